"""Pick the validation-best trial *and epoch* of a search, never the last checkpoint.

`Result.checkpoint` is a trial's latest checkpoint; we rank the checkpoints the trial kept
(`sptune.tuning.callbacks.checkpoint_pruning`: its best and its latest, as Tune lists them) by
`sptune.rules.ranking`'s rule instead, the same rule the trials used for their logged best epoch, across
trials too. The same functions select from a finished Tuner's `Result`s and, while the study's one Tuner still
runs, from `TrialOutcome`s the driver took from each ended trial (`sptune.judging.ledger`), so both ways
pick the same trial and epoch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sptune.errors import RuntimeFailure
from sptune.plan.study_plan import SearchPlan
from sptune.rules.ranking import creation_index, rank_key


@dataclass(frozen=True)
class Selection:
    trial_id: str
    config: dict[str, Any]
    checkpoint_path: str
    metric: str
    score: float
    epoch: int
    metrics: dict[str, Any]
    n_trials: int
    n_diverged: int
    n_failed: int
    trial_epochs: int  # epochs actually trained across the Tuner's trials (compute spent)
    # Failures Tune counted across the search's trials (`Trial.num_failures`: a crashed process, a lost
    # node), each retried from the trial's last checkpoint until max_failures; 0 in a state file without the count.
    n_failures: int = 0
    # What the selected trial itself trained, from its last result (`trial_totals`): Tune iterations, Ray's
    # time_total_s and optimizer steps; empty in older state files.
    trial_totals: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TrialOutcome:
    """What selection reads of one ended trial: the fields of a Tune `Result` it uses."""

    config: dict[str, Any]
    metrics: dict[str, Any]  # its last result
    error: str | None
    path: str
    # (checkpoint with a .path, the metrics of its epoch) for each checkpoint the trial kept
    best_checkpoints: list[tuple[Any, dict[str, Any]]] = field(default_factory=list)
    failures: int = 0  # Tune's num_failures of the trial (a Tune Result has none: 0)


def _usable(result: Any) -> bool:
    return result.error is None and not (result.metrics or {}).get("diverged")


def _failures(result: Any) -> int:
    return int(getattr(result, "failures", 0) or 0)


def _best_checkpoint(result: Any, search: SearchPlan) -> tuple | None:
    """(rank key, result, checkpoint, its metrics) of the trial's best kept checkpoint."""
    index = creation_index((result.metrics or {}).get("experiment_tag"))
    kept = [
        (rank_key(ck_metrics, search.epoch_score, index), result, checkpoint, ck_metrics)
        for checkpoint, ck_metrics in result.best_checkpoints
        if ck_metrics.get(search.epoch_score) is not None
    ]
    return min(kept, key=lambda c: c[0]) if kept else None


def trial_totals(metrics: dict[str, Any]) -> dict[str, float]:
    """What a trial trained in all, from its last result: iterations, seconds (Ray's time_total_s: training,
    validation and checkpoints, not time spent paused) and optimizer steps."""
    return {"iterations": int(metrics.get("training_iteration", 0)), "seconds": float(metrics.get("time_total_s", 0.0)),
            "optimizer_steps": int(metrics.get("optimizer_steps", 0))}


def _selection(
    best: tuple, search: SearchPlan, n_trials: int, n_div: int, n_fail: int, epochs: int, failures: int
) -> Selection:
    _, result, checkpoint, ck_metrics = best
    return Selection(
        trial_id=result.metrics.get("trial_id", ""),
        config=dict(result.config),
        checkpoint_path=checkpoint.path,
        metric=search.epoch_score,
        score=float(ck_metrics[search.epoch_score]),
        epoch=int(ck_metrics.get("epoch", ck_metrics.get("training_iteration"))),
        metrics=dict(ck_metrics),
        n_trials=n_trials,
        n_diverged=n_div,
        n_failed=n_fail,
        trial_epochs=epochs,
        n_failures=failures,
        trial_totals=trial_totals(result.metrics or {}),
    )


def _nothing_usable(grid: list, search: SearchPlan) -> RuntimeFailure:
    errors = [r for r in grid if r.error is not None]
    diverged = sum(bool((r.metrics or {}).get("diverged")) for r in grid)
    first = f"; first error: {str(errors[0].error).splitlines()[-1][:300]} (in {errors[0].path})" if errors else ""
    return RuntimeFailure(
        search.label,
        f"no trial finished without error or divergence ({len(errors)} failed, {diverged} diverged of "
        f"{len(grid)}){first}",
        "fix the cause (lower the LR range if trials diverge) and rerun with --resume --output DIR",
    )


def select_each(results: Iterable[Any], search: SearchPlan) -> list[Selection]:
    """The validation-best epoch of every usable trial (re-runs: one selection per seed)."""
    grid, picked = list(results), []
    for result in grid:
        best = _best_checkpoint(result, search) if _usable(result) else None
        if best is not None:
            epochs = int((result.metrics or {}).get("training_iteration", 0))
            picked.append(_selection(best, search, 1, 0, 0, epochs, _failures(result)))
    if not picked:
        raise _nothing_usable(grid, search)
    return sorted(picked, key=lambda s: s.config.get("seed", 0))


def select_best(results: Iterable[Any], search: SearchPlan) -> Selection:
    """The search's validation-best trial and epoch; `results` are Tune Results or TrialOutcomes."""
    return rank_trials(results, search, 1)[0]


def rank_trials(results: Iterable[Any], search: SearchPlan, k: int) -> list[Selection]:
    """The search's `k` best configs by the ranking rule, best first, each as its best trial's validation-best
    epoch (a config a grid repeats counts once: its best repeat); every one carries the search's statistics."""
    grid = list(results)
    bests: list[tuple] = []
    n_div = n_fail = epochs = failures = 0
    for result in grid:
        metrics = result.metrics or {}
        epochs += int(metrics.get("training_iteration", 0))
        n_div += int(bool(metrics.get("diverged")))
        n_fail += int(result.error is not None)
        failures += _failures(result)
        candidate = _best_checkpoint(result, search) if _usable(result) else None
        if candidate is not None:
            bests.append(candidate)
    if not bests:
        raise _nothing_usable(grid, search)
    # Equal scores go to the trial created first (rank_key), never to the grid's order (it changes on restore).
    ranked, seen = [], set()
    for best in sorted(bests, key=lambda c: c[0]):
        config = searched_values(best[1].config, search)
        if config not in seen:
            seen.add(config)
            ranked.append(_selection(best, search, len(grid), n_div, n_fail, epochs, failures))
    return ranked[:k]


def searched_values(config: dict[str, Any], search: SearchPlan) -> tuple:
    """What makes two trials of a search the same config: its searched values, not its seed."""
    return tuple(config.get(name) for name, _ in search.space.items())


def rank_selections(selections: Iterable[Selection], search: SearchPlan, k: int) -> list[Selection]:
    """The `k` best of selections listed in the order their trials were created, by the ranking rule (a tie goes
    to the one listed first, the trial created first), each config once: a search's best configs merged with
    trials that came after it."""
    ranked, seen = [], set()
    for sel in sorted(selections, key=lambda s: rank_key(s.metrics, search.epoch_score)[:-1]):  # stable
        config = searched_values(sel.config, search)
        if config not in seen:
            seen.add(config)
            ranked.append(sel)
    return ranked[:k]
