"""What each kind of stage (`sptune.judging.stage_graph`) trains once released and selects once its trials have
ended (`sptune.judging.ledger` calls these, and only it):

- a search: its best trial by the ranking rule (`sptune.judging.selection`; with top_k its best configs);
- re-runs: each seed's validation-best epoch (re-pretraining: every seed must have one);
- an LR extension's round (`search.lr.extend`): LRs beyond the bound the pick so far (with top_k, the
  best-ranked of the configs it may still come from) sits at (`sptune.rules.lr_extension`), with its other
  values; the pick is then selected again over the best so far and the round's trials by the ranking rule;
- candidates (`selection: {top_k, seeds}`): the search's `top_k` best configs, each once per candidate seed; the
  pick is the best mean over seeds (`sptune.judging.robust_selection`), recorded as that config's search trial.

Every config is fixed when the stage is released, so what they train and pick never depends on finish order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sptune.errors import RuntimeFailure
from sptune.judging.robust_selection import CandidateRuns, candidate_entries, pick_candidate
from sptune.judging.selection import Selection, TrialOutcome, rank_selections, rank_trials, select_each
from sptune.judging.stage_graph import Stage, StageKind
from sptune.plan.study_plan import SearchPlan
from sptune.rules.lr_extension import extension_step

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


def extension_configs(search: SearchPlan, ranked: list[Selection], round_: int, seeds: tuple[int, ...],
                      spt: dict[int | None, str] | None = None) -> list[dict[str, Any]]:
    """Round `round_` of the search's LR extension: each LR it adds beyond the bound the best-ranked config at the
    edge sits at (`ranked`: the configs the pick may come from, best first; [] when none is at the edge), with
    that config's other searched values and a seed of the round's own."""
    step = extension_step(search.space.lr, [float(s.config["lr"]) for s in ranked], round_)
    if step is None:
        return []
    index, lrs = step
    others = searched(search, ranked[index].config)
    return [_start({**others, "lr": lr}, seed, spt) for lr, seed in zip(lrs, seeds[: len(lrs)], strict=True)]


def select_extension(search: SearchPlan, best: list[Selection], outcomes: list[TrialOutcome],
                     k: int) -> list[Selection]:
    """The `k` best configs (best first) over the best so far (`best`, created before the round) and the round's
    trials, each at its validation-best epoch (a trial that diverged or failed has none)."""
    trials = [s for o in outcomes if (s := _selected(o, search)) is not None]
    return rank_selections([*best, *sorted(trials, key=lambda s: int(s.config["seed"]))], search, k)


def _selected(outcome: TrialOutcome, search: SearchPlan) -> Selection | None:
    try:
        return select_each([outcome], search)[0]
    except RuntimeFailure:
        return None


def _best_epoch(outcome: TrialOutcome, search: SearchPlan) -> dict[str, Any] | None:
    """The trial's validation-best epoch's metrics; None when it diverged, failed or kept no checkpoint."""
    selected = _selected(outcome, search)
    return None if selected is None else selected.metrics


def select_candidates(search: SearchPlan, ranked: list[Selection], seeds: tuple[int, ...],
                      outcomes: list[TrialOutcome]) -> tuple[Selection, list[dict[str, Any]]]:
    """The pick among the candidates (its search trial's selection, whose checkpoint is tested without re-runs)
    and results.json's entries of every candidate."""
    runs = {(int(o.config[CANDIDATE_KEY]), int(o.config["seed"])): _best_epoch(o, search) for o in outcomes}
    candidates = [CandidateRuns(searched(search, best.config), seeds, tuple(runs.get((rank, s)) for s in seeds))
                  for rank, best in enumerate(ranked)]
    picked = pick_candidate(candidates, search.epoch_score)
    return ranked[picked], candidate_entries(candidates, picked, [best.score for best in ranked])


def given_configs(stage: Stage, continued: list[Selection], spt: dict[int | None, str] | None) -> list[dict[str, Any]]:
    """What a stage that re-trains selected configs trains, fixed when it is released (`continued`: the best configs of
    the stage it continues from, best first)."""
    if stage.kind is StageKind.CANDIDATES:
        return candidate_configs(stage.search, continued, stage.seeds, spt)
    if stage.kind is StageKind.EXTEND:
        return extension_configs(stage.search, continued, stage.extend_round, stage.seeds, spt)
    return rerun_configs(stage.search, continued[0], stage.seeds, spt)


@dataclass(frozen=True)
class Pick:
    """What a stage selected: its pick (re-runs: one per seed), its ranked best configs when it ranks some
    (top_k > 1), results.json's entries of its candidates."""

    picked: list[Selection]
    ranked: list[Selection] | None = None
    candidates: list[dict[str, Any]] | None = None


def pick(stage: Stage, outcomes: list[TrialOutcome], continued: list[Selection]) -> Pick:
    """What the stage selects from its ended trials (`continued`: the best configs it continues from): a search its best
    trial, an extension round the best so far and its own trials' best (both ranking `top_k` for candidates),
    candidates the pick among them, re-runs each seed's best epoch. Raises RuntimeFailure when nothing is usable."""
    if stage.kind is StageKind.RERUN:
        if not outcomes:  # a look of sequential re-runs that was not needed
            return Pick([])
        try:
            picked = select_each(outcomes, stage.trial_plan)
        except RuntimeFailure:
            if stage.look < 2:
                raise
            return Pick([])  # a later look's seeds all diverged: its comparisons go on with the seeds they have
        _check_seeds(stage, picked)
        return Pick(picked)
    if stage.kind is StageKind.CANDIDATES:
        best, entries = select_candidates(stage.trial_plan, continued, stage.seeds, outcomes)
        return Pick([best], candidates=entries)
    if stage.kind is StageKind.EXTEND:
        ranked = select_extension(stage.trial_plan, continued, outcomes, stage.top_k)
    else:
        ranked = rank_trials(outcomes, stage.trial_plan, stage.top_k)
    return Pick(ranked[:1], ranked if stage.top_k > 1 else None)


def _check_seeds(stage: Stage, picked: list[Selection]) -> None:
    """Re-pretraining: every seed's variant re-runs need that seed's checkpoint."""
    if not stage.search.is_pretraining:
        return
    missing = sorted(set(stage.seeds) - {int(s.config["seed"]) for s in picked})
    if missing:
        fix = "lower the pretraining LR range, or drop rerun_pretrain; then rerun with --resume --output DIR"
        raise RuntimeFailure(stage.label, f"re-pretraining with seed(s) {missing} diverged or failed", fix)


def spt_checkpoints_of(stage: Stage, picked: list[Selection]) -> dict[int | None, str] | None:
    """What a pretraining stage's selection gives the stages that start from it: its checkpoint, or for its
    re-runs one per seed. None for a variant's stage."""
    if not stage.search.is_pretraining:
        return None
    if stage.kind is StageKind.RERUN:
        return {int(s.config["seed"]): s.checkpoint_path for s in picked}
    return {None: picked[0].checkpoint_path}
