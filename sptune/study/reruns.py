"""Re-runs: each variant's selected config re-trained once per seed, to the end."""

from __future__ import annotations

from dataclasses import replace

from sptune.plan import SearchPlan
from sptune.selection import Selection
from sptune.spec import SweepSpec


def rerun_plan(spec: SweepSpec, search: SearchPlan, best: Selection) -> SearchPlan:
    """The variant's selected config with ``spec.rerun_seeds`` seeds (no early stopping: phase rerun)."""
    seeds = [spec.seed + i for i in range(spec.rerun_seeds)]
    searched = {name: best.config[name] for name, _ in search.space.items()}  # lr, batch_size and any other
    configs = tuple({**searched, "seed": s} for s in seeds)
    return replace(search, phase="rerun", num_samples=1, searcher="grid", fixed_configs=configs)
