"""The spec's rules for re-runs (fixed seeds, re-pretraining, sequential looks), beside SweepSpec."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sptune.spec.fields import problem

if TYPE_CHECKING:
    from sptune.spec.sweep_spec import SweepSpec


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
