"""The stages that make a variant's pick after its search (`sptune.tuning.stages` routes them): what their trials
train, given the pick so far, and what they select once their trials have ended.

- candidates (`selection: {top_k, seeds}`): the search's `top_k` best configs, each once per candidate seed; the
  pick is the best mean over seeds (`sptune.judging.robust_selection`), recorded as that config's search trial.

Every config is fixed when the stage is released, so what they train and pick never depends on finish order.
"""

from __future__ import annotations

from typing import Any

from sptune.errors import RuntimeFailure
from sptune.judging.robust_selection import CandidateRuns, candidate_entries, pick_candidate
from sptune.judging.selection import Selection, TrialOutcome, select_each
from sptune.plan.study_plan import SearchPlan

CANDIDATE_KEY = "candidate"  # a candidate trial's config: its candidate's rank in the search (0: the best)


def searched(search: SearchPlan, config: dict[str, Any]) -> dict[str, Any]:
    """A config's searched values: lr, batch_size and any other searched one (weight_decay, ...)."""
    return {name: config[name] for name, _ in search.space.items()}


def _start(config: dict[str, Any], seed: int, spt: dict[int | None, str] | None) -> dict[str, Any]:
    """A given config with its seed, and for an SPT variant the checkpoint that seed starts from (`spt`: seed ->
    checkpoint, or None -> the one for every seed), carried in its config so its MLflow params show it."""
    config = {**config, "seed": seed}
    if spt is not None:
        config["spt_checkpoint"] = spt.get(seed, spt.get(None))
    return config


def rerun_configs(
    search: SearchPlan, best: Selection, seeds: list[int] | tuple[int, ...], spt: dict[int | None, str] | None = None
) -> list[dict[str, Any]]:
    """The selected config once per re-run seed."""
    return [_start(searched(search, best.config), seed, spt) for seed in seeds]


def candidate_configs(search: SearchPlan, ranked: list[Selection], seeds: tuple[int, ...],
                      spt: dict[int | None, str] | None = None) -> list[dict[str, Any]]:
    """Each candidate (the search's best configs, best first) once per candidate seed, candidate by candidate."""
    return [_start({**searched(search, best.config), CANDIDATE_KEY: rank}, seed, spt)
            for rank, best in enumerate(ranked) for seed in seeds]


def _best_epoch(outcome: TrialOutcome, plan: SearchPlan) -> dict[str, Any] | None:
    """The trial's validation-best epoch's metrics; None when it diverged, failed or kept no checkpoint."""
    try:
        return select_each([outcome], plan)[0].metrics
    except RuntimeFailure:
        return None


def select_candidates(plan: SearchPlan, ranked: list[Selection], seeds: tuple[int, ...],
                      outcomes: list[TrialOutcome]) -> tuple[Selection, list[dict[str, Any]]]:
    """The pick among the candidates (its search trial's selection, whose checkpoint is tested without re-runs)
    and results.json's entries of every candidate."""
    runs = {(int(o.config[CANDIDATE_KEY]), int(o.config["seed"])): _best_epoch(o, plan) for o in outcomes}
    candidates = [CandidateRuns(searched(plan, best.config), seeds, tuple(runs.get((rank, s)) for s in seeds))
                  for rank, best in enumerate(ranked)]
    picked = pick_candidate(candidates, plan.epoch_score)
    return ranked[picked], candidate_entries(candidates, picked, [best.score for best in ranked])
