"""Every variant kind, defined once with the facts the spec, the builders and the report rely on.

Torch-free, so a spec naming an unknown kind is refused before anything heavy is imported.
`sptune.training.variants` registers one builder per kind of this table and fails at import if a kind
has none, so adding a row here without its builder cannot go unnoticed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

Objective = Literal["masked", "causal"]
# Whether attention (or the SSM kernel) looks both ways, or only at earlier positions.
Architecture = Literal["bidirectional", "causal"]

# Masked reconstruction uses both sides of a position; next-element prediction must not see ahead,
# so a model pretrained that way stays causal when it is fine-tuned.
ARCHITECTURE_OF: dict[Objective, Architecture] = {"masked": "bidirectional", "causal": "causal"}
# The from-scratch kind of each architecture: the like-for-like baseline of a kind built on it.
FROM_SCRATCH: dict[Architecture, str] = {"bidirectional": "scratch", "causal": "scratch_causal"}


@dataclass(frozen=True)
class VariantKind:
    name: str
    # The pretraining objective the variant's init comes from (None: no pretraining).
    pretraining: Objective | None = None
    # Takes pretrain.objective instead of `pretraining` (which is then only the default): see `as_built`.
    follows_pretrain_objective: bool = False
    # Pretrains on variants.<name>.source_task instead of the study's own task.
    cross_task: bool = False
    # Built on the Hugging Face checkpoint in language_model.path.
    language_model: bool = False
    # Defined on attention weights, so it has no meaning for model.family: ssm.
    attention_only: bool = False
    # The model it trains; GPT-2 style language models are causal.
    architecture: Architecture = "bidirectional"
    # Its like-for-like baseline: the kind with the same model, random init, every parameter training.
    # A Δ against it measures the kind's own change and nothing of the architecture (sptune.judging.pairing).
    baseline: str = "scratch"

    @property
    def network(self) -> str:
        """The model in words ('causal', 'bidirectional', 'causal language model'); like-for-like when equal."""
        return f"{self.architecture} language model" if self.language_model else self.architecture


def _language_model(name: str) -> VariantKind:
    # The language-model kinds' like-for-like baseline is the same backbone from a random init, all training.
    return VariantKind(name, language_model=True, architecture="causal", baseline="unfrozen_random")


KINDS: dict[str, VariantKind] = {
    kind.name: kind
    for kind in (
        VariantKind("scratch"),
        # The causal model of spt_causal from a random init: its like-for-like baseline.
        VariantKind("scratch_causal", architecture="causal", baseline="scratch_causal"),
        VariantKind("spt", pretraining="masked", follows_pretrain_objective=True),
        # spt's encoder frozen as FPT freezes its language model (Lu et al.). Its baseline stays scratch, like
        # spt's, so both get a Δ against one variant; `baseline: spt` in a spec gives frozen-vs-unfrozen itself.
        VariantKind("spt_frozen", pretraining="masked", follows_pretrain_objective=True),
        VariantKind("spt_causal", pretraining="causal", architecture="causal", baseline="scratch_causal"),
        VariantKind("qk_init", pretraining="masked", attention_only=True),
        VariantKind("frozen_attn", attention_only=True),
        VariantKind("frozen_attn_mlp", attention_only=True),
        # Frozen pretrained transformers (Lu et al.) and their controls.
        _language_model("fpt_frozen"),
        _language_model("fpt_unfrozen"),
        _language_model("frozen_random"),
        _language_model("unfrozen_random"),
        # A -> B transfer: masked SPT on another task, then fine-tuning on the study's task.
        VariantKind("spt_cross", pretraining="masked", follows_pretrain_objective=True, cross_task=True),
    )
}

VARIANT_KINDS = tuple(KINDS)
LANGUAGE_MODEL_KINDS = tuple(name for name, kind in KINDS.items() if kind.language_model)
ATTENTION_ONLY_KINDS = tuple(name for name, kind in KINDS.items() if kind.attention_only)
# Which pretraining objective each kind's init comes from by default (see `as_built` for a given study).
PRETRAINING_OF: dict[str, Objective | None] = {name: kind.pretraining for name, kind in KINDS.items()}


def as_built(kind: VariantKind, pretrain_objective: str | None) -> VariantKind:
    """The kind's facts in a study whose pretrain.objective is ``pretrain_objective`` (None: no pretrain section).

    The one rule for kinds that follow pretrain.objective (`spt`, `spt_frozen`, `spt_cross`): they pretrain with
    it, so with the causal objective they build the causal model, whose like-for-like baseline is the causal
    scratch."""
    if not kind.follows_pretrain_objective or pretrain_objective not in ARCHITECTURE_OF:
        return kind
    architecture = ARCHITECTURE_OF[pretrain_objective]
    return replace(kind, pretraining=pretrain_objective, architecture=architecture,
                   baseline=FROM_SCRATCH[architecture])
