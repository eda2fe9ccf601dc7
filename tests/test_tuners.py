"""The Tuner's parts rank trials by the number selection uses: each trial's best-so-far score."""

from __future__ import annotations

from pathlib import Path

import pytest

from sptune.plan import TunerPlan, build_plan
from sptune.spec import load_spec
from sptune.tasks.base import TaskInfo
from sptune.tuners import search_and_schedule


def _optuna_study(searcher):
    """The Optuna study inside a variant's searcher, whatever wraps it (limiters, batching)."""
    while not hasattr(searcher, "_ot_study"):
        searcher = getattr(searcher, "inner", None) or searcher.searcher
    return searcher._ot_study


@pytest.fixture
def plan(repo_root):
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", [])
    return build_plan(spec, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)


def test_optuna_is_told_the_trials_best_epoch_not_its_last(plan):
    scratch = next(s for s in plan.variant_searches() if s.variant == "scratch")
    assert scratch.searcher == "optuna"
    searcher, _ = search_and_schedule(plan, TunerPlan("search", (scratch,)))
    # A whole first batch (one per concurrent slot), each trial's last epoch worse than its best.
    trials = [f"t_{i:05d}" for i in range(plan.concurrency)]
    configs = [searcher.suggest(trial) for trial in trials]
    epochs = [(0.60, 0.60), (0.90, 0.90), (0.50, 0.90)]  # (val_acc, best_val_acc)
    for trial, config in zip(trials, configs, strict=True):
        for epoch, (acc, best) in enumerate(epochs, 1):
            result = {**config, "epoch": epoch, "training_iteration": epoch, "val_acc": acc, "best_val_acc": best}
            searcher.on_trial_result(trial, result)
        searcher.on_trial_complete(trial, result)
    completed = [t for t in _optuna_study(searcher.searchers["scratch"]).trials if t.state.name == "COMPLETE"]
    assert [t.value for t in completed] == [0.90] * len(trials)  # selection would pick epoch 2 at 0.90
