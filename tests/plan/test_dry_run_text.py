"""The printed plan says which kind of decision each part of the study makes, and nothing untrue."""

from __future__ import annotations

import pytest

from sptune.plan.dry_run_text import describe
from sptune.plan.study_plan import build_plan
from sptune.spec import load_spec
from sptune.tasks.base import TaskInfo
from tests.helpers_tiny import PLAIN_PICK

INFO = TaskInfo("digits", "continuous", 64, 10)


def _describe(repo_root: str, *overrides: str) -> str:
    spec = load_spec(f"{repo_root}/search_spaces/digits_quick.yaml", [*PLAIN_PICK, *overrides])  # a plain study's
    return describe(build_plan(spec, INFO, cluster_cpus=2))


def test_the_default_decisions_say_they_are_order_independent(repo_root):
    text = _describe(repo_root, "scheduler.type=sha")
    assert "Scheduler: synchronous successive halving per variant (grace 5 epochs, η 2;" in text
    assert "Searcher: Optuna (TPE) per variant in batches of 4 (searcher.batch_size, whatever the concurrency), " \
           "told each trial's result at epoch 5" in text
    assert text.count("order-independent") == 2 and "depend on finish order" not in text


def test_asynchronous_decisions_say_they_depend_on_finish_order(repo_root):
    text = _describe(repo_root, "scheduler.type=asha", "searcher.mode=async")
    assert "Scheduler: ASHA per variant (grace 5 epochs, η 2; asynchronous: decisions depend on finish order)" in text
    assert "Searcher: Optuna (TPE) per variant, told results as trials finish" in text
    assert "order-independent" not in text


@pytest.mark.parametrize("mode", ["batched", "async"])
def test_fifo_claims_no_early_stopping(repo_root, mode):
    text = _describe(repo_root, "scheduler.type=fifo", f"searcher.mode={mode}")
    assert "Scheduler: FIFO (no early stopping" in text
    assert "early stopping ends" not in text and "ASHA" not in text


def test_no_searcher_line_without_optuna(repo_root):
    text = _describe(repo_root, "scheduler.type=sha", "searcher.type=random")
    assert "Searcher:" not in text


def test_hyperband_says_it_is_order_independent_and_shows_its_brackets(repo_root):
    text = _describe(repo_root, "scheduler.type=hyperband")
    assert "Scheduler: synchronous Hyperband per variant (grace 5 epochs, η 2;" in text
    assert text.count("order-independent") == 2 and "depend on finish order" not in text
    # 6 trials over rungs 5, 10 of 20 epochs: brackets of 2, 2 and 2 trials, the last with no rung.
    bracket = "[2 → 1 → 1 trials to epochs 5 → 10 → 20 (25 trial-epochs)] [2 → 1 trials to epochs 10 → 20 "
    assert f"hyperband, 3 brackets: {bracket}(30 trial-epochs)] [2 trials to epochs 20 (40 trial-epochs)] = 95" in text


def test_synchronous_halving_shows_its_rung_sizes_and_the_total_counts_them(repo_root):
    text = _describe(repo_root, "scheduler.type=sha")
    assert "halving: 6 → 3 → 2 trials to epochs 5 → 10 → 20 (65 trial-epochs)" in text
    assert "halving: 4 → 2 → 1 trials to epochs 5 → 10 → 20 (40 trial-epochs)" in text  # the pretraining
    # 40 + 2 x 65 searched, 2 variants x 3 seeds x 20 re-run: exact, not 16 trials x 20 epochs.
    assert "at most 290 trial-epochs" in text
    assert "at most 440 trial-epochs" in _describe(repo_root, "scheduler.type=asha")  # asynchronous: no bound
