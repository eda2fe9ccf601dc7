"""Synchronous successive halving: the same results give the same decisions in any finish order.

No Ray cluster: real `Trial` objects (stubs) and a small stand-in for Tune's controller that
does what Tune does with a scheduler's decisions (pause, stop, resume what it chooses)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from sptune.rules.ranking import creation_index
from sptune.rules.rungs import planned_epochs, rung_epochs
from sptune.tuning.schedulers.by_stage import StageScheduler
from sptune.tuning.schedulers.halving import SuccessiveHalving
from tests.helpers_tune import Controller
from tests.helpers_tune import stub_trial as _trial

# Validation accuracy per epoch of six trials (index 1..6); trials 3 and 4 are identical.
CURVES = [
    [0.30, 0.50, 0.60, 0.65, 0.66, 0.67, 0.68, 0.69],
    [0.40, 0.45, 0.50, 0.52, 0.53, 0.54, 0.55, 0.56],
    [0.35, 0.55, 0.70, 0.72, 0.74, 0.75, 0.76, 0.77],
    [0.35, 0.55, 0.70, 0.72, 0.74, 0.75, 0.76, 0.77],
    [0.10, 0.20, 0.30, 0.35, 0.40, 0.45, 0.50, 0.55],
    [0.50, 0.52, 0.53, 0.54, 0.55, 0.56, 0.57, 0.58],
]
MAX_T = 8


def _report(controller: Controller, trial: Trial, epoch: int, curves: list[list[float]]) -> None:
    value = curves[creation_index(trial.experiment_tag) - 1][epoch - 1]
    result = {"training_iteration": epoch, "val_acc": value, "done": epoch >= MAX_T}
    decision = controller.scheduler.on_trial_result(controller, trial, result)
    if result["done"] or decision == TrialScheduler.STOP:
        controller.stop_trial(trial)
    elif decision == TrialScheduler.PAUSE:
        trial.set_status(Trial.PAUSED)


def simulate(scheduler: TrialScheduler, pick: random.Random, curves: list[list[float]] = CURVES) -> dict:
    """Trials arrive one by one and report epochs in an order `pick` chooses; the epochs each
    trial trained before it was stopped or finished."""
    controller = Controller(scheduler)
    epochs: dict[str, int] = {}
    waiting = [_trial(i + 1) for i in range(len(curves))]
    while waiting or any(t.status != Trial.TERMINATED for t in controller.trials):
        if waiting and pick.random() < 0.5:  # the searcher proposes the next trial
            controller.add(waiting.pop(0))
        controller.start_chosen()
        running = [t for t in controller.trials if t.status == Trial.RUNNING]
        if running:
            trial = pick.choice(running)
            epochs[trial.trial_id] = epochs.get(trial.trial_id, 0) + 1
            _report(controller, trial, epochs[trial.trial_id], curves)
    return epochs


def _halving() -> SuccessiveHalving:
    return SuccessiveHalving(len(CURVES), MAX_T, grace_period=1, reduction_factor=2, metric="val_acc", mode="max")


def test_rungs_are_grace_times_eta_powers_below_max_t():
    assert rung_epochs(1, 2, 8) == [1, 2, 4]
    assert rung_epochs(2, 3, 20) == [2, 6, 18]
    assert rung_epochs(5, 2, 5) == []  # grace at the last epoch: no early stopping
    assert rung_epochs(1, 1.5, 4) == [1, 2, 3]  # rounded, never repeated


def test_same_decisions_in_any_finish_order():
    outcomes = [simulate(_halving(), random.Random(seed)) for seed in range(20)]
    assert all(o == outcomes[0] for o in outcomes)
    # Rung 1 keeps 3 of 6: trials 6 (0.50), 2 (0.40) and 3, tied with 4 at 0.35 but created
    # first; rung 2 keeps 3 (0.55) and 6 (0.52); rung 4 keeps 3 (0.72).
    assert outcomes[0] == {"t1": 1, "t2": 2, "t3": 8, "t4": 1, "t5": 1, "t6": 4}


def test_asha_decides_by_finish_order():
    """Why `sha` is the default: ASHA, given the same results, stops different trials."""
    def asha() -> ASHAScheduler:
        scheduler = ASHAScheduler(time_attr="training_iteration", max_t=MAX_T, grace_period=1, reduction_factor=2)
        scheduler.set_search_properties("val_acc", "max")
        return scheduler

    outcomes = {tuple(sorted(simulate(asha(), random.Random(seed)).items())) for seed in range(20)}
    assert len(outcomes) > 1


def test_ties_go_to_the_lower_trial_index():
    curves = [[0.5] * MAX_T for _ in range(4)]
    for seed in range(5):
        epochs = simulate(SuccessiveHalving(4, MAX_T, 1, 2, "val_acc", "max"), random.Random(seed), curves)
        assert epochs == {"t1": 8, "t2": 2, "t3": 1, "t4": 1}


def test_min_mode_keeps_the_lowest_loss():
    curves = [[0.9] * MAX_T, [0.2] * MAX_T]
    epochs = simulate(SuccessiveHalving(2, MAX_T, 1, 2, "val_acc", "min"), random.Random(0), curves)
    assert epochs == {"t1": 1, "t2": 8}


def _two_running(budget: int, eta: float = 2) -> tuple[SuccessiveHalving, Controller, Trial, Trial]:
    """A variant of `budget` trials whose first two are running."""
    scheduler = SuccessiveHalving(budget, MAX_T, 1, eta, "val_acc", "max")
    controller = Controller(scheduler)
    first, second = _trial(1), _trial(2)
    for trial in (first, second):
        controller.add(trial)
        trial.set_status(Trial.RUNNING)
    return scheduler, controller, first, second


def test_the_first_rung_waits_for_the_whole_budget_and_counts_pauses_out():
    scheduler, controller, first, second = _two_running(3, eta=3)
    for trial in (first, second):
        _report(controller, trial, 1, CURVES)
    # Both wait at the rung for the third trial, paused, without a slot, and are never chosen.
    assert first.status == second.status == Trial.PAUSED
    assert controller.search_alg.searcher.paused == {"t1", "t2"}
    assert scheduler.choose_trial_to_run(controller) is None
    third = _trial(3)
    controller.add(third)
    assert scheduler.choose_trial_to_run(controller) is third  # a new trial may start
    third.set_status(Trial.RUNNING)
    controller.scheduler.on_trial_error(controller, third)  # it fails before the rung ...
    third.set_status(Trial.ERROR)
    # ... so the rung is decided between the two that reached it: ⌈3/3⌉ = 1 goes on, the better (0.40).
    assert first.status == Trial.TERMINATED and "t2" not in controller.search_alg.searcher.paused
    assert scheduler.choose_trial_to_run(controller) is second


def test_a_trial_retried_after_a_failure_is_still_waited_for():
    scheduler, controller, first, second = _two_running(2)
    _report(controller, second, 1, CURVES)
    first.set_status(Trial.ERROR)  # what Tune does before it requeues a trial to retry it
    scheduler.on_trial_error(controller, first)
    first.set_status(Trial.PENDING)
    scheduler.on_trial_add(controller, first)
    assert second.status == Trial.PAUSED  # the rung still waits for the retried trial
    first.set_status(Trial.RUNNING)
    _report(controller, first, 1, CURVES)
    assert first.status == Trial.TERMINATED and scheduler.choose_trial_to_run(controller) is second


def test_stage_scheduler_resumes_in_trial_order_within_the_concurrency_limit():
    schedulers = {v: SuccessiveHalving(2, MAX_T, 1, 2, "val_acc", "max") for v in ("a", "b")}
    scheduler = StageScheduler(schedulers, max_concurrent=1)
    controller = Controller(scheduler)
    trials = [_trial(1, "a"), _trial(2, "b"), _trial(3, "a"), _trial(4, "b")]
    for trial in trials:
        controller.add(trial)
    assert scheduler.choose_trial_to_run(controller) is trials[0]  # the first created goes first
    for trial in trials:
        trial.set_status(Trial.RUNNING)
        _report(controller, trial, 1, CURVES)
    # Each stage decided its own rung: a keeps trial 3 (0.35 > 0.30), b keeps trial 2 (0.40 > 0.35).
    assert [t.status for t in trials] == [Trial.TERMINATED, Trial.PAUSED, Trial.RUNNING, Trial.TERMINATED]
    assert scheduler.choose_trial_to_run(controller) is None  # trial 3 runs: the one slot is taken
    trials[2].set_status(Trial.PAUSED)
    assert scheduler.choose_trial_to_run(controller) is trials[1]


@pytest.mark.parametrize("tag, index", [("12_lr=0.1,batch_size=32", 12), ("", 0), (None, 0)])
def test_trial_index_is_read_from_the_experiment_tag(tag, index):
    assert creation_index(tag) == index


def test_a_rung_keeps_its_planned_size_when_a_trial_fails_before_it():
    """Rung sizes are n, ⌈n/η⌉, ... of the trials that entered (sptune.rules.rungs): a variant whose
    trial fails still trains as many trials on as the plan says."""
    scheduler = SuccessiveHalving(5, MAX_T, 1, 2, "val_acc", "max")
    controller = Controller(scheduler)
    trials = [_trial(i) for i in range(1, 6)]
    for trial in trials:
        controller.add(trial)
        trial.set_status(Trial.RUNNING)
    scheduler.on_trial_error(controller, trials[4])  # trial 5 fails for good before epoch 1
    trials[4].set_status(Trial.ERROR)
    for trial in trials[:4]:
        _report(controller, trial, 1, CURVES)
    # ⌈5/2⌉ = 3 of the 4 that reached the rung go on (2: 0.40, 3 and 4: 0.35); only trial 1 (0.30) stops.
    assert [t.status for t in trials[:4]] == [Trial.TERMINATED, Trial.PAUSED, Trial.PAUSED, Trial.RUNNING]
    assert scheduler.sizes == [5, 3, 2, 1]


def test_the_epochs_spent_are_the_planned_ones():
    epochs = simulate(_halving(), random.Random(0))
    assert sum(epochs.values()) == planned_epochs("sha", len(CURVES), 1, 2, MAX_T) == 6 + 3 + 2 * 2 + 4


def test_halving_and_selection_agree_on_tied_trials(repo_root):
    """Three trials tie on best_val_acc at the rung: trial 3 has the lowest val_loss at its best epoch (tied
    with trial 2's) and the earlier best epoch. Selection, reading each trial's best-epoch checkpoint, picks
    trial 3 by the ranking rule; halving must promote that trial, not the first-created one."""
    from pathlib import Path

    from sptune.judging.selection import TrialOutcome, select_best
    from sptune.plan.study_plan import build_plan
    from sptune.spec import load_spec
    from sptune.tasks.base import TaskInfo

    best = {1: (0.5, 0.8, 2), 2: (0.5, 0.7, 2), 3: (0.5, 0.7, 1)}  # index -> best epoch's val_acc, val_loss, epoch
    scheduler = SuccessiveHalving(3, 4, grace_period=2, reduction_factor=3, metric="best_val_acc", mode="max")
    controller = Controller(scheduler)
    trials = {i: _trial(i) for i in best}
    for trial in trials.values():
        controller.add(trial)
        trial.set_status(Trial.RUNNING)
    for i, (acc, loss, epoch) in best.items():
        result = {"training_iteration": 2, "val_acc": 0.4, "val_loss": 1.0,  # the rung's own epoch: worse
                  "best_val_acc": acc, "best_val_loss": loss, "best_epoch": epoch, "done": False}
        if scheduler.on_trial_result(controller, trials[i], result) == TrialScheduler.STOP:
            controller.stop_trial(trials[i])
    promoted = [i for i, t in trials.items() if t.status != Trial.TERMINATED]

    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", [])
    search = build_plan(spec, TaskInfo("digits", "continuous", 64, 10), cluster_cpus=2).variant_searches()[0]
    outcomes = [
        TrialOutcome({"lr": 1e-3}, {"trial_id": f"t{i}", "experiment_tag": f"{i}_lr=x", "training_iteration": 2},
                     None, "", [(SimpleNamespace(path=f"/t{i}"), {"val_acc": a, "val_loss": loss, "epoch": e})])
        for i, (a, loss, e) in best.items()
    ]
    assert select_best(outcomes, search).trial_id == "t3"
    assert promoted == [3]
