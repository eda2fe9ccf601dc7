"""Synchronous Hyperband: brackets of successive halving, the same decisions in any finish order,
exactly the planned trial-epochs; then one real Tuner per synchronous scheduler.

The decision tests need no Ray cluster: the stand-in controller of tests/test_halving.py plays
Tune's part."""

from __future__ import annotations

import random

import pytest

from sptune.rules.rungs import hyperband_plan, planned_epochs
from sptune.tuning.schedulers.hyperband import Hyperband
from tests.tuning.schedulers.test_halving import CURVES, MAX_T, Controller, _report, _trial, simulate


def _hyperband(n_trials: int = len(CURVES)) -> Hyperband:
    return Hyperband(n_trials, MAX_T, grace_period=1, reduction_factor=2, metric="val_acc", mode="max")


def test_trials_fill_the_brackets_in_creation_order():
    # 6 trials over rungs 1, 2, 4 of 8 epochs: brackets of 2, 2, 1 and 1 trials.
    scheduler = _hyperband()
    assert [n for n, _ in scheduler.plan] == [2, 2, 1, 1]
    assert [b.rungs for b in scheduler.brackets] == [[1, 2, 4], [2, 4], [4], []]
    controller = Controller(scheduler)
    for index in range(1, 7):
        controller.add(_trial(index))
    brackets = [scheduler.brackets.index(scheduler.bracket_of[f"t{i}"]) for i in range(1, 7)]
    assert brackets == [0, 0, 1, 1, 2, 3]
    retried = _trial(3)  # re-added (a retry after a failure): it keeps its bracket
    scheduler.on_trial_add(controller, retried)
    assert scheduler.bracket_of["t3"] is scheduler.brackets[1] and len(scheduler.bracket_of) == 6


def test_same_decisions_in_any_finish_order_and_exactly_the_planned_epochs():
    outcomes = [simulate(_hyperband(), random.Random(seed)) for seed in range(20)]
    assert all(o == outcomes[0] for o in outcomes)
    # Bracket [1, 2]: trial 2 (0.40 at epoch 1) beats 1 and trains to the end. Bracket [3, 4]
    # starts halving at epoch 2, where 3 and 4 tie (0.55): the one created first goes on.
    # Trials 5 (first rung at epoch 4, alone) and 6 (no rung) train all 8 epochs.
    assert outcomes[0] == {"t1": 1, "t2": 8, "t3": 8, "t4": 2, "t5": 8, "t6": 8}
    assert sum(outcomes[0].values()) == planned_epochs("hyperband", len(CURVES), 1, 2, MAX_T) == 35


def test_a_bracket_waits_only_for_its_own_trials():
    scheduler = _hyperband()
    controller = Controller(scheduler)
    first, second, third = _trial(1), _trial(2), _trial(3)
    for trial in (first, second, third):
        controller.add(trial)
        trial.set_status("RUNNING")
    _report(controller, first, 1, CURVES)
    assert first.status == "PAUSED"  # bracket 0 waits for trial 2 at epoch 1, without a slot ...
    assert controller.search_alg.searcher.paused == {"t1"}
    _report(controller, third, 1, CURVES)
    assert third.status == "RUNNING"  # ... while bracket 1 has no rung at epoch 1
    _report(controller, second, 1, CURVES)
    assert first.status == "TERMINATED" and second.status == "RUNNING"  # 0.40 beats 0.30


def test_more_trials_than_planned_train_without_early_stopping():
    scheduler = _hyperband(4)  # brackets of 1 trial each
    controller = Controller(scheduler)
    for index in range(1, 6):
        controller.add(_trial(index))
    assert scheduler.bracket_of["t5"] is scheduler.brackets[-1] and scheduler.brackets[-1].rungs == []


def test_hyperband_plan_matches_the_scheduler():
    scheduler = Hyperband(9, 8, 2, 3, "val_acc", "max")
    assert scheduler.plan == hyperband_plan(9, 2, 3, 8) == [(5, [2, 6]), (2, [6]), (2, [])]
    assert [b.n_trials for b in scheduler.brackets] == [5, 2, 2]


# ------------------------------------------------------------------ a real Tuner


@pytest.mark.parametrize("scheduler", ["sha", "hyperband"])
def test_a_real_tuner_spends_exactly_the_planned_epochs(ray_session, repo_root, tmp_path, scheduler):
    """Real Ray Tune, real trainings (digits, one tiny scratch variant, 2 slots, batched Optuna):
    every trial stops where its bracket's rung sizes say, so the trial-epochs are the plan's."""
    from sptune.judging.stage_graph import Stage
    from sptune.plan.study_plan import build_plan, search_epochs
    from sptune.spec import load_spec
    from sptune.tasks import TaskRequest, load_task
    from sptune.tasks.registry import resolve_data_dir
    from sptune.tuning.tuner import build_study_tuner, staged_search

    overrides = [
        "variants={scratch: {search: {lr: {type: loguniform, low: 1.0e-4, high: 1.0e-2}, "
        "batch_size: {type: choice, values: [32, 64]}}, num_samples: 5}}",
        "finetune.epochs=4",
        f"scheduler.type={scheduler}",
        "scheduler.grace_period=1",
        "scheduler.reduction_factor=2",
        "model.n_layers=1",
        "model.d_model=32",
        "model.d_ff=64",
        "rerun_seeds=1",
    ]
    spec = load_spec(f"{repo_root}/search_spaces/digits_quick.yaml", overrides)
    data = load_task(TaskRequest("digits", {}, spec.seed, resolve_data_dir(None)))
    plan = build_plan(spec, data.info, cluster_cpus=2)
    [search] = plan.variant_searches()
    searcher, stage_scheduler = staged_search(plan, [Stage(search)], {}, {})
    grid = build_study_tuner(plan, data, searcher, stage_scheduler, str(tmp_path), []).fit()
    assert not grid.errors
    by_index = sorted((int(r.metrics["experiment_tag"].split("_")[0]), r.metrics["training_iteration"]) for r in grid)
    epochs = [e for _, e in by_index]
    assert sum(epochs) == search_epochs(plan, search)
    if scheduler == "sha":  # 5 → 3 → 2 trials to epochs 1 → 2 → 4
        assert sum(epochs) == 5 + 3 + 2 * 2 and sorted(epochs) == [1, 1, 2, 4, 4]
    else:  # brackets of 2, 2 and 1 trials (in creation order): rungs [1, 2], [2], none
        assert sum(epochs) == (2 + 1 + 2) + (2 * 2 + 2) + 4
        assert sorted(epochs[:2]) == [1, 4] and sorted(epochs[2:4]) == [2, 4] and epochs[4] == 4
