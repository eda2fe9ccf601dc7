"""The spec's re-runs: the sequential section (`rerun_sequential`) and the rules across sections for re-runs
(fixed seeds, re-pretraining, sequential looks), beside SweepSpec."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import model_validator

from sptune.rules.seeds import MAX_RERUN_SEEDS
from sptune.spec.fields import Strict, problem, ranged

if TYPE_CHECKING:
    from sptune.spec.sweep_spec import SweepSpec


class SequentialRerunSpec(Strict):
    """Re-runs until decided (sptune.judging.sequential): each variant's pick re-trained with `min` seeds, then
    `step` more per look while a comparison it is in is undecided, up to `max`; each look's paired Δ is tested at
    two-sided error `alpha` across all looks (Lan-DeMets `spending`); `effect` is the ±margin within which a Δ
    counts as equivalent, and what the fixed-N design it is compared with must detect."""

    min: int = ranged(3, "use e.g. 3 (at least 2: one seed has no spread)", ge=2, le=MAX_RERUN_SEEDS)
    max: int = ranged(15, "use e.g. 15 (at least min)", ge=2, le=MAX_RERUN_SEEDS)
    step: int = ranged(3, "use e.g. 3 (seeds added per look)", ge=1)
    effect: float = ranged(0.01, "use e.g. 0.01 (one accuracy point)", gt=0, le=1)
    alpha: float = ranged(0.05, "use e.g. 0.05", gt=0, lt=0.5)
    spending: Literal["obrien_fleming", "pocock"] = "obrien_fleming"

    @model_validator(mode="after")
    def _max_not_below_min(self) -> SequentialRerunSpec:
        if self.max < self.min:
            raise problem(f"max {self.max} is below min {self.min}", f"use max >= {self.min}", "max")
        return self


def check_rerun_pretrain(spec: SweepSpec) -> None:
    if not spec.rerun_pretrain:
        return
    if spec.rerun_seeds < 2:
        fix = "set rerun_seeds: 3 (or more), or drop rerun_pretrain"
        raise problem("re-pretraining per seed needs seed re-runs (rerun_seeds > 1)", fix, "rerun_pretrain")
    if not spec.needs_pretraining():
        raise problem("no variant starts from SPT: nothing to re-pretrain", "drop rerun_pretrain", "rerun_pretrain")
    if spec.pretrain.checkpoint is not None:
        message = "a given SPT checkpoint (pretrain.checkpoint) cannot be re-pretrained per seed"
        raise problem(message, "drop pretrain.checkpoint or rerun_pretrain", "rerun_pretrain")


def resolve_sequential_reruns(spec: SweepSpec) -> None:
    """Refuses what sequential re-runs cannot do; then sets rerun_seeds to their most seeds."""
    s = spec.rerun_sequential
    if "rerun_seeds" in spec.model_fields_set and spec.rerun_seeds not in (1, s.max):
        message = f"rerun_seeds {spec.rerun_seeds} and rerun_sequential (up to {s.max} seeds) both set the re-runs"
        raise problem(message, "drop rerun_seeds: rerun_sequential.max is the most seeds", "rerun_seeds")
    if spec.rerun_pretrain:
        message = "re-pretraining per seed (rerun_pretrain) is not supported with sequential re-runs yet"
        raise problem(message, "drop rerun_pretrain, or use a fixed rerun_seeds: N", "rerun_pretrain")
    if spec.baseline not in spec.variants or len(spec.variants) < 2:
        message = (f"sequential re-runs test each variant's Δ against the baseline '{spec.baseline}', and this spec "
                   f"has {'no such variant' if spec.baseline not in spec.variants else 'nothing to compare with it'}")
        fix = "name one of the variants in baseline: and compare at least two variants, or drop rerun_sequential"
        raise problem(message, fix, "rerun_sequential")
    spec.rerun_seeds = s.max
