"""Which variant each Δ is taken against: the one pairing rule of results.json / results.md and the report.

The rule (``PAIRING_RULE``): every Δ is against the study's baseline (the spec's ``baseline:``, default the
variant named ``scratch``; no baseline, no Δ). When the baseline trains another model than the variant
(causal vs bidirectional, or a language-model backbone), the Δ would mix that architecture change with the
variant's own change, so it is taken against the variant's like-for-like baseline kind instead (the kinds
table: ``spt_causal`` -> ``scratch_causal``) when the study has one. Without one, the Δ against the baseline is
still given, marked as not like-for-like: the user named that baseline, and the mark says what it mixes.

Torch-free and Ray-free: the report and the study driver both import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sptune.judging.stats import DEFAULT_BASELINE
from sptune.spec.variant_kinds import KINDS, VariantKind, as_built

PAIRING_RULE = ("Each Δ is against the baseline, except where the baseline trains another model (causal vs "
                "bidirectional, or a language model) and the study has the variant's like-for-like from-scratch "
                "variant (spt_causal: scratch_causal): then against that one. A Δ marked 'not like-for-like' "
                "mixes the change of model with the variant's own change.")


@dataclass(frozen=True)
class Pairing:
    """One variant's Δ: the variant it is against, and whether both train the same model."""

    variant: str
    baseline: str
    like_for_like: bool | None  # None: a kind outside the table (e.g. an old results.json), so unknown
    note: str  # e.g. "like-for-like: both causal"; "" when unknown

    @property
    def label(self) -> str:
        return pairing_label(self.baseline, self.note)


def pairing_label(baseline: str, note: str) -> str:
    """'scratch_causal (like-for-like: both causal)', or just the baseline's name when unknown."""
    return f"{baseline} ({note})" if note else baseline


def _facts(kinds: Mapping[str, str], pretrain_objective: str | None) -> dict[str, VariantKind | None]:
    return {v: as_built(KINDS[k], pretrain_objective) if k in KINDS else None for v, k in kinds.items()}


def _twin(variant: str, wanted: str, kinds: Mapping[str, str]) -> str | None:
    """The study's variant of kind ``wanted`` (the one named after the kind if several), not ``variant``."""
    found = [v for v, k in kinds.items() if k == wanted and v != variant]
    return wanted if wanted in found else (found[0] if found else None)


def _pair(variant: str, base: str, mine: VariantKind | None, theirs: VariantKind | None) -> Pairing:
    if mine is None or theirs is None:
        return Pairing(variant, base, None, "")
    if mine.network == theirs.network:
        both = mine.network + ("s" if mine.language_model else "")  # "both causal language models"
        return Pairing(variant, base, True, f"like-for-like: both {both}")
    return Pairing(variant, base, False, f"not like-for-like: {mine.network} vs {theirs.network}")


def baseline_for(variant: str, kinds: Mapping[str, str], baseline: str = DEFAULT_BASELINE,
                 pretrain_objective: str | None = None) -> Pairing | None:
    """The pairing of ``variant``'s Δ among the study's variants (``kinds``: variant -> kind name), by
    ``PAIRING_RULE``; None for the baseline itself and when no variant is named ``baseline``.
    ``pretrain_objective``: the spec's pretrain.objective, which `spt` follows (``as_built``)."""
    if baseline not in kinds or variant == baseline:
        return None
    facts = _facts(kinds, pretrain_objective)
    named = _pair(variant, baseline, facts[variant], facts[baseline])
    if named.like_for_like is not False:
        return named
    twin = _twin(variant, facts[variant].baseline, kinds)
    return _pair(variant, twin, facts[variant], facts[twin]) if twin else named


def pairings(kinds: Mapping[str, str], baseline: str = DEFAULT_BASELINE,
             pretrain_objective: str | None = None) -> dict[str, Pairing]:
    """variant -> its pairing, for every variant that has a Δ."""
    found = {v: baseline_for(v, kinds, baseline, pretrain_objective) for v in kinds}
    return {v: p for v, p in found.items() if p is not None}
