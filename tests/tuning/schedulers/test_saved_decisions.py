"""Synchronous halving's and Hyperband's decisions saved (`state`, plain JSON) and loaded back before Tune re-adds
the trials (`load`): interrupted anywhere and restored as Tuner.restore does it, a stage trains exactly the epochs
of the uninterrupted one; no trial halving stopped trains again, and one waiting at an undecided rung waits on."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest
from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from sptune.tuning.schedulers.by_stage import StageScheduler
from sptune.tuning.schedulers.halving import SuccessiveHalving
from sptune.tuning.schedulers.hyperband import Hyperband
from tests.tuning.schedulers.test_halving import CURVES, MAX_T, Controller, _report, _trial, simulate


def _halving() -> SuccessiveHalving:
    return SuccessiveHalving(len(CURVES), MAX_T, grace_period=1, reduction_factor=2, metric="val_acc", mode="max")


def _hyperband() -> Hyperband:
    return Hyperband(len(CURVES), MAX_T, grace_period=1, reduction_factor=2, metric="val_acc", mode="max")


def _restore(controller: Controller, make: Callable[[], TrialScheduler]) -> Controller:
    """What Tuner.restore does to the scheduler: a new one (from tuner.pkl), given the saved decisions by the
    searcher's restore, then every trial re-added, the unfinished ones as PENDING (Tune would start them all)."""
    saved = json.loads(json.dumps(controller.scheduler.state()))  # what the snapshot holds: JSON only
    scheduler = make()
    scheduler.load(saved)
    restored = Controller(scheduler)
    for trial in controller.trials:
        if trial.status not in (Trial.TERMINATED, Trial.ERROR):
            trial.set_status(Trial.PENDING)
        restored.add(trial)
    return restored


def _interrupted(make: Callable[[], TrialScheduler], pick: random.Random, at: int) -> dict:
    """`simulate`, restored after its `at`-th step: the epochs each trial trained."""
    controller, epochs, steps = Controller(make()), {}, 0
    waiting = [_trial(i + 1) for i in range(len(CURVES))]
    while waiting or any(t.status != Trial.TERMINATED for t in controller.trials):
        if steps == at:
            controller = _restore(controller, make)
        steps += 1
        if waiting and pick.random() < 0.5:
            controller.add(waiting.pop(0))
        controller.start_chosen()
        running = controller.running()
        if running:
            trial = pick.choice(running)
            epochs[trial.trial_id] = epochs.get(trial.trial_id, 0) + 1
            _report(controller, trial, epochs[trial.trial_id], CURVES)
    return epochs


@pytest.mark.parametrize("make", [_halving, _hyperband], ids=["halving", "hyperband"])
def test_a_stage_restored_at_any_step_trains_the_uninterrupted_epochs(make):
    for seed in range(4):
        uninterrupted = simulate(make(), random.Random(seed))
        for at in range(1, 40, 3):
            assert _interrupted(make, random.Random(seed), at) == uninterrupted, (seed, at)


def test_without_the_saved_decisions_a_restored_stage_trains_more():
    """The failure the saved state prevents: restored afresh (what Ray alone does), trials halving had stopped or
    kept waiting train further."""
    def afresh() -> SuccessiveHalving:
        scheduler = _halving()
        scheduler.load = lambda saved: None  # forgets what was decided
        return scheduler

    uninterrupted = simulate(_halving(), random.Random(0))
    differs = [_interrupted(afresh, random.Random(0), at) != uninterrupted for at in range(1, 40, 3)]
    assert any(differs)


def _waiting_pair() -> tuple[Controller, Trial, Trial]:
    """Two of a stage's three trials at its first rung (epoch 1), the third not yet suggested."""
    controller = Controller(SuccessiveHalving(3, MAX_T, 1, 3, "val_acc", "max"))
    first, second = _trial(1), _trial(2)
    for trial in (first, second):
        controller.add(trial)
    controller.start_chosen()
    for trial in (first, second):
        _report(controller, trial, 1, CURVES)
    return controller, first, second


def test_a_trial_waiting_at_an_undecided_rung_waits_again_after_a_restore():
    controller, first, second = _waiting_pair()
    assert first.status == second.status == Trial.PAUSED
    restored = _restore(controller, lambda: SuccessiveHalving(3, MAX_T, 1, 3, "val_acc", "max"))
    # Re-added PENDING, they are paused again and counted out of the searcher's slots, never chosen ...
    assert first.status == second.status == Trial.PAUSED
    assert restored.search_alg.searcher.paused == {"t1", "t2"}
    assert restored.scheduler.choose_trial_to_run(restored) is None
    # ... until the third trial reaches the rung: ⌈3/3⌉ = 1 goes on, trial 2 (0.40 against 0.30 and 0.35).
    third = _trial(3)
    restored.add(third)
    restored.start_chosen()
    _report(restored, third, 1, CURVES)
    assert first.status == third.status == Trial.TERMINATED
    assert restored.scheduler.choose_trial_to_run(restored) is second


def test_a_trial_stopped_before_tune_recorded_it_is_stopped_without_training():
    """Halving returned STOP for the reporting trial, and the snapshot was taken before Tune stopped it (its
    decision still queued): the restored trial comes back PENDING and must end without an epoch more."""
    make = lambda: SuccessiveHalving(2, MAX_T, 1, 2, "val_acc", "max")  # noqa: E731
    controller = Controller(make())
    first, second = _trial(1), _trial(2)
    for trial in (first, second):
        controller.add(trial)
    controller.start_chosen()
    _report(controller, second, 1, CURVES)  # 0.40: waits at rung 1
    decision = controller.scheduler.on_trial_result(controller, first, {"training_iteration": 1, "val_acc": 0.30})
    assert decision == TrialScheduler.STOP and first.status == Trial.RUNNING  # Tune has not stopped it yet
    restored = _restore(controller, make)
    assert first.status == Trial.PAUSED  # never started again ...
    assert restored.scheduler.choose_trial_to_run(restored) is second  # ... stopped at the first choice
    assert first.status == Trial.TERMINATED


def test_the_stage_scheduler_saves_each_stage_as_plain_json_per_trial_id():
    scheduler = StageScheduler({"a": _halving(), "b": _hyperband()})
    controller = Controller(scheduler)
    for index, stage in ((1, "a"), (2, "b")):
        controller.add(_trial(index, stage))
    controller.start_chosen()
    _report(controller, controller.trials[0], 1, CURVES)
    state = scheduler.state()
    assert json.loads(json.dumps(state)) == state
    assert state["a"]["trials"]["t1"] == {"index": 1, "values": {"1": {"val_acc": 0.30}}, "passed": 0,
                                          "ended": False, "resumable": False, "stopped": False}
    assert state["b"]["bracket_of"] == {"t2": 0} and "t2" in state["b"]["brackets"][0]["trials"]
