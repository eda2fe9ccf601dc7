"""The test split is sealed: readable only inside final_evaluation(), never in trials."""

from __future__ import annotations

import json

import pytest

from sptune.judging import holdout
from sptune.tasks import TaskRequest, load_task


def test_test_split_is_sealed_outside_final_evaluation(tmp_path):
    splits = load_task(TaskRequest("digits"))
    with pytest.raises(holdout.SealedSplitError):
        _ = splits.test
    audit = tmp_path / "reads.jsonl"
    with holdout.final_evaluation(audit):
        assert len(splits.test) == 359
    with pytest.raises(holdout.SealedSplitError):
        _ = splits.test
    assert len([json.loads(x) for x in audit.read_text().splitlines()]) == 1


def test_data_shipped_to_trials_has_no_test_split_at_all():
    trial_data = load_task(TaskRequest("digits")).without_test()
    with holdout.final_evaluation(), pytest.raises(holdout.SealedSplitError):
        _ = trial_data.test


def test_splits_are_disjoint_and_fixed():
    a, b = load_task(TaskRequest("digits", seed=0)), load_task(TaskRequest("digits", seed=5))
    assert (a.train.x == b.train.x).all()  # the split never depends on the study seed
    with holdout.final_evaluation():
        test = a.test
    rows = {r.tobytes() for r in a.train.x}
    val_rows = {r.tobytes() for r in a.val.x}
    test_rows = {r.tobytes() for r in test.x}
    assert len(a.train) + len(a.val) + len(test) == 1797
    # Digits has a few duplicate images; index-level disjointness shows as near-zero overlap.
    assert len(rows & test_rows) <= 5 and len(rows & val_rows) <= 5
