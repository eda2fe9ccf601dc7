"""The arithmetic every synchronous scheduler, the spec's rules and the printed plan share."""

from __future__ import annotations

import pytest

from sptune.rules.rungs import (
    bracket_trials,
    describe_rungs,
    halving_epochs,
    hyperband_brackets,
    hyperband_plan,
    planned_epochs,
    rung_epochs,
    rung_sizes,
)


def test_rung_sizes_are_ceilings_of_what_entered():
    assert rung_sizes(9, 3, 2) == [9, 3, 1]
    assert rung_sizes(10, 3, 2) == [10, 4, 2]  # ⌈10/3⌉ = 4, then ⌈4/3⌉ = 2 (not ⌈10/9⌉ = 2 by luck)
    assert rung_sizes(5, 2, 3) == [5, 3, 2, 1]
    assert rung_sizes(4, 2, 0) == [4]  # no rung: everyone trains to the end


def test_halving_epochs_count_each_survivor_from_rung_to_rung():
    # 9 trials to epoch 2, 3 of them on to 6, 1 on to 8: 18 + 12 + 2.
    assert halving_epochs(9, [2, 6], 3, 8) == 32
    # BENCHMARKS.md §3: what synchronous halving would spend at E = 16, grace 2, reduction 3.
    assert halving_epochs(9, [2, 6], 3, 16) == 40
    assert halving_epochs(3, [], 3, 8) == 24


def test_hyperband_brackets_start_at_later_and_later_rungs_of_sha():
    assert hyperband_brackets(2, 3, 8) == [[2, 6], [6], []]
    assert hyperband_brackets(1, 2, 8) == [[1, 2, 4], [2, 4], [4], []]
    assert hyperband_brackets(8, 2, 8) == [[]]  # grace at the end: one bracket, no early stopping


def test_bracket_shares_follow_li_et_al_and_fill_every_bracket():
    # Weights η^s/(s+1) for s = 2, 1, 0 at η = 3: 3, 1.5, 1 (9 trials: 4.9, 2.45, 1.64).
    assert bracket_trials(9, 3, 3) == [5, 2, 2]
    assert bracket_trials(5, 3, 3) == [3, 1, 1]
    assert bracket_trials(7, 3, 3) == [4, 2, 1]
    assert bracket_trials(3, 3, 3) == [1, 1, 1]  # the least budget that fills every bracket
    assert bracket_trials(6, 2, 1) == [6]
    for n in range(4, 40):
        counts = bracket_trials(n, 2, 4)
        assert sum(counts) == n and min(counts) >= 1
        assert counts == sorted(counts, reverse=True)  # the aggressive brackets never get fewer
    with pytest.raises(ValueError, match="2 trials cannot fill 3 brackets"):
        bracket_trials(2, 3, 3)


def test_planned_epochs_per_scheduler():
    assert planned_epochs("sha", 9, 2, 3, 8) == 32
    # Brackets of 3, 1, 1 trials: 3·2 + 1·4 + 1·2, then 1·8, then 1·8.
    assert hyperband_plan(5, 2, 3, 8) == [(3, [2, 6]), (1, [6]), (1, [])]
    assert planned_epochs("hyperband", 5, 2, 3, 8) == 12 + 8 + 8
    assert planned_epochs("asha", 9, 2, 3, 8) == planned_epochs("fifo", 9, 2, 3, 8) == 72


def test_describe_rungs_names_every_bracket():
    assert describe_rungs("sha", 9, 2, 3, 8) == "halving: 9 → 3 → 1 trials to epochs 2 → 6 → 8 (32 trial-epochs)"
    text = describe_rungs("hyperband", 5, 2, 3, 8)
    assert text.startswith("hyperband, 3 brackets: [3 → 1 → 1 trials to epochs 2 → 6 → 8 (12 trial-epochs)]")
    assert "[1 trial to epochs 8 (8 trial-epochs)] = 28 trial-epochs" in text


def test_rung_epochs_keeps_its_old_home():
    from sptune.tuning.schedulers.halving import rung_epochs as from_halving

    assert from_halving is rung_epochs
