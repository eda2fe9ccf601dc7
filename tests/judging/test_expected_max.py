"""sptune.judging.expected_max: the expected best score of n of a search's N trials (drawn without replacement),
checked against every subset, and the budgets at which two variants' order flips."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from sptune.judging.expected_max import budget_table, expected_max, order_flips, table_budgets


def brute_force(scores: list[float], n: int) -> float:
    subsets = list(itertools.combinations(scores, n))
    return sum(max(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("seed", range(6))
def test_every_budget_matches_the_mean_best_over_all_subsets(seed):
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 10))
    scores = list(rng.choice([0.1, 0.5, 0.52, 0.9, 0.93], size)) if seed % 2 else list(rng.random(size))  # ties too
    curve = expected_max(scores)
    assert len(curve) == size
    for n in range(1, size + 1):
        assert curve[n - 1] == pytest.approx(brute_force(scores, n), abs=1e-12)


def test_one_trial_is_the_mean_all_trials_the_max_and_more_trials_never_less():
    scores = [0.61, 0.93, 0.12, 0.88, 0.88, 0.40, 0.75]
    curve = expected_max(scores)
    assert curve[0] == pytest.approx(np.mean(scores)) and curve[-1] == max(scores)
    assert all(a <= b + 1e-15 for a, b in zip(curve, curve[1:], strict=False))
    assert expected_max(list(reversed(scores))) == pytest.approx(curve)  # the trials' order does not matter
    assert expected_max([]) == [] and expected_max([0.7]) == [0.7]


def test_large_searches_neither_overflow_nor_leave_the_observed_range():
    scores = np.random.default_rng(1).random(3000)
    curve = expected_max(scores)
    assert curve[0] == pytest.approx(scores.mean()) and curve[-1] == pytest.approx(scores.max(), abs=1e-12)
    assert np.isfinite(curve).all() and np.all(np.diff(curve) >= -1e-12)
    with pytest.raises(ValueError, match="finite"):
        expected_max([0.5, float("-inf")])


def test_the_order_flips_where_the_curves_cross_and_ties_are_not_flips():
    assert order_flips([0.5, 0.6, 0.8, 0.9], [0.6, 0.7, 0.75, 0.8]) == [3]  # behind up to 2 trials, ahead from 3
    assert order_flips([0.5, 0.7, 0.8], [0.6, 0.7, 0.7]) == [3]  # the tie at 2 keeps the order of 1
    assert order_flips([0.7, 0.6, 0.8], [0.6, 0.7, 0.7]) == [2, 3]
    assert order_flips([0.7, 0.8], [0.6, 0.7, 0.9]) == []  # compared only over the budgets both ran


def test_the_table_of_a_study_and_the_budgets_shown():
    table = budget_table({"scratch": [0.6, 0.9, 0.7], "spt": [0.8, 0.82, 0.81]}, {"spt": "scratch"})
    assert table["variants"]["scratch"] == {"n_trials": 3, "by_n": pytest.approx([0.7333333, 0.8333333, 0.9])}
    # spt is ahead with 1 trial (0.81 vs 0.73), behind from 2 on (0.817 vs 0.833).
    assert table["order_vs"] == {"spt": "scratch"} and table["order_flips_at"] == {"spt": [2]}
    assert table_budgets(1) == [1] and table_budgets(8) == [1, 2, 4, 8] and table_budgets(12) == [1, 2, 4, 8, 12]
