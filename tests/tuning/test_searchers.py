"""Batched TPE: the same proposals in whatever order a batch's trials finish. No Ray cluster."""

from __future__ import annotations

import math
import random

import optuna
from ray import tune
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from sptune.tuning.searchers import BatchedSearcher

SPACE = {"lr": tune.loguniform(1e-4, 1e-2)}
CONCURRENT = 3
N_TRIALS = 9

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _optuna() -> OptunaSearch:
    sampler = optuna.samplers.TPESampler(seed=0, n_startup_trials=2)
    return OptunaSearch(OptunaSearch.convert_search_space(SPACE), metric="val_acc", mode="max", sampler=sampler)


def _accuracy(config: dict) -> float:
    return 1.0 - abs(math.log10(config["lr"]) + 3.0)  # best at lr = 1e-3


def propose(searcher: Searcher, pick: random.Random) -> list[float]:
    """Drive the searcher as Tune does: fill free slots, then let one running trial (chosen by
    `pick`) finish; the learning rates in the order they were proposed."""
    running: dict[str, dict] = {}
    proposed: list[float] = []
    while len(proposed) < N_TRIALS or running:
        while len(running) < CONCURRENT and len(proposed) < N_TRIALS:
            trial_id = f"t{len(proposed)}"
            config = searcher.suggest(trial_id)
            if config is None:
                break  # waits for results
            running[trial_id] = config
            proposed.append(config["lr"])
        done = pick.choice(sorted(running))
        config = running.pop(done)
        searcher.on_trial_complete(done, {"val_acc": _accuracy(config), "training_iteration": 4, **config})
    return proposed


def test_batched_proposals_do_not_depend_on_finish_order():
    runs = [propose(BatchedSearcher(_optuna(), CONCURRENT, N_TRIALS, None), random.Random(s)) for s in range(5)]
    assert all(run == runs[0] for run in runs)
    assert len(set(runs[0])) == N_TRIALS


def test_async_proposals_do_depend_on_finish_order():
    """Why batches: told results as trials finish, TPE proposes differently."""
    runs = {tuple(propose(_optuna(), random.Random(s))) for s in range(5)}
    assert len(runs) > 1


def test_results_reach_optuna_in_trial_order_once_the_batch_is_in():
    searcher = BatchedSearcher(_optuna(), batch_size=2, n_trials=3, settle_epoch=None)
    first, second = searcher.suggest("a"), searcher.suggest("b")
    assert searcher.suggest("c") is None  # the batch is out: wait
    searcher.on_trial_complete("b", {"val_acc": 0.2, **second})
    assert searcher.suggest("c") is None
    searcher.on_trial_complete("a", {"val_acc": 0.9, **first})
    told = [t.value for t in searcher.inner._ot_study.trials]
    assert told == [0.9, 0.2]  # trial a's result first, though b finished first
    assert searcher.suggest("c") is not None  # the last batch holds the one trial left
    assert searcher.suggest("d") == Searcher.FINISHED


def test_a_trial_settles_at_the_first_rung_and_its_later_end_is_ignored():
    searcher = BatchedSearcher(_optuna(), batch_size=1, n_trials=2, settle_epoch=2)
    config = searcher.suggest("a")
    searcher.on_trial_result("a", {"val_acc": 0.3, "training_iteration": 1, **config})
    assert searcher.suggest("b") is None  # epoch 1 is before the rung
    searcher.on_trial_result("a", {"val_acc": 0.5, "training_iteration": 2, **config})
    assert searcher.suggest("b") is not None
    searcher.on_trial_complete("a", {"val_acc": 0.8, "training_iteration": 8, **config})
    assert [t.value for t in searcher.inner._ot_study.trials if t.value is not None] == [0.5]


def test_a_failed_trial_settles_as_failed():
    searcher = BatchedSearcher(_optuna(), batch_size=1, n_trials=2, settle_epoch=2)
    searcher.suggest("a")
    searcher.on_trial_complete("a", None, error=True)
    assert searcher.inner._ot_study.trials[0].state == optuna.trial.TrialState.FAIL
    assert searcher.suggest("b") is not None
