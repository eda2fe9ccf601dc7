"""Every variant kind, defined once with the facts the spec and the builders rely on.

Torch-free, so a spec naming an unknown kind is refused before anything heavy is imported.
`sptune.variants` registers one builder per kind of this table and fails at import if a kind
has none, so adding a row here without its builder cannot go unnoticed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Objective = Literal["masked", "causal"]


@dataclass(frozen=True)
class VariantKind:
    name: str
    # The pretraining objective the variant's init comes from (None: no pretraining).
    pretraining: Objective | None = None
    # Takes pretrain.objective instead of `pretraining` (which is then only the default).
    follows_pretrain_objective: bool = False
    # Pretrains on variants.<name>.source_task instead of the study's own task.
    cross_task: bool = False
    # Built on the Hugging Face checkpoint in language_model.path.
    language_model: bool = False
    # Defined on attention weights, so it has no meaning for model.family: ssm.
    attention_only: bool = False


KINDS: dict[str, VariantKind] = {
    kind.name: kind
    for kind in (
        VariantKind("scratch"),
        VariantKind("spt", pretraining="masked", follows_pretrain_objective=True),
        VariantKind("spt_causal", pretraining="causal"),
        VariantKind("qk_init", pretraining="masked", attention_only=True),
        VariantKind("frozen_attn", attention_only=True),
        VariantKind("frozen_attn_mlp", attention_only=True),
        # Frozen pretrained transformers (Lu et al.) and their controls.
        VariantKind("fpt_frozen", language_model=True),
        VariantKind("fpt_unfrozen", language_model=True),
        VariantKind("frozen_random", language_model=True),
        VariantKind("unfrozen_random", language_model=True),
        # A -> B transfer: masked SPT on another task, then fine-tuning on the study's task.
        VariantKind("spt_cross", pretraining="masked", follows_pretrain_objective=True, cross_task=True),
    )
}

VARIANT_KINDS = tuple(KINDS)
LANGUAGE_MODEL_KINDS = tuple(name for name, kind in KINDS.items() if kind.language_model)
ATTENTION_ONLY_KINDS = tuple(name for name, kind in KINDS.items() if kind.attention_only)
# Which pretraining objective each kind's init comes from by default (read by sptune.report).
PRETRAINING_OF: dict[str, Objective | None] = {name: kind.pretraining for name, kind in KINDS.items()}
