"""Re-runs: a selected config re-trained once per seed, to the end (a variant's finetuning, or
with `rerun_pretrain` a pretraining). Their seeds are ones the search never used (StudyPlan.rerun_seeds)."""

from __future__ import annotations

from dataclasses import replace

from sptune.plan import SearchPlan
from sptune.selection import Selection


def rerun_plan(
    search: SearchPlan, best: Selection, seeds: list[int], spt_checkpoints: dict[int, str] | None = None
) -> SearchPlan:
    """The search's selected config with each re-run seed (no early stopping: phase rerun). For an SPT
    variant, `spt_checkpoints` (seed -> checkpoint) names the checkpoint each seed's re-run starts from:
    carried in its config, so its MLflow params show it."""
    configs = []
    for seed in seeds:
        # lr, batch_size and any other searched value (weight_decay, warmup_fraction, dropout)
        config = {**{name: best.config[name] for name, _ in search.space.items()}, "seed": seed}
        if spt_checkpoints is not None:
            config["spt_checkpoint"] = spt_checkpoints[seed]
        configs.append(config)
    return replace(search, phase="rerun", num_samples=1, searcher="grid", grid_repeats=1, fixed_configs=tuple(configs))
