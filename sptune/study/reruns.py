"""Re-runs: a selected config re-trained once per seed, to the end (a variant's finetuning, or
with `rerun_pretrain` a pretraining). Their seeds are ones the search never used (StudyPlan.rerun_seeds).
The study runs them as stages of its one Tuner (`sptune.tuning.stages`); this builds one as its own plan."""

from __future__ import annotations

from dataclasses import replace

from sptune.judging.selection import Selection
from sptune.plan.study_plan import SearchPlan
from sptune.tuning.stages import rerun_configs


def rerun_plan(
    search: SearchPlan, best: Selection, seeds: list[int], spt_checkpoints: dict[int, str] | None = None
) -> SearchPlan:
    """The search's selected config with each re-run seed (no early stopping: phase rerun). For an SPT
    variant, `spt_checkpoints` (seed -> checkpoint) names the checkpoint each seed's re-run starts from."""
    configs = rerun_configs(search, best, seeds, spt_checkpoints)
    return replace(search, phase="rerun", num_samples=1, searcher="grid", grid_repeats=1, fixed_configs=tuple(configs))
