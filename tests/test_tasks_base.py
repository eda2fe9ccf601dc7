"""`TaskSplits.replace`: copies with new parts, the test split still sealed and read lazily."""

from __future__ import annotations

import numpy as np
import pytest

from sptune import holdout
from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits

INFO = TaskInfo(name="demo", input_kind="continuous", seq_len=2, num_classes=2)


def splits_counting(reads: list[int]) -> TaskSplits:
    def load_test() -> ArraySplit:
        reads.append(1)
        return ArraySplit(np.array([[1, 2]]), np.array([1]))

    one = ArraySplit(np.zeros((1, 2)), np.zeros(1, dtype=np.int64))
    return TaskSplits(INFO, one, one, load_test, "src")


def test_replace_swaps_only_the_given_parts():
    splits = splits_counting([])
    train = ArraySplit(np.ones((3, 2)), np.zeros(3, dtype=np.int64))
    copy = splits.replace(train=train, source="other")
    assert copy is not splits and copy.train is train and copy.val is splits.val and copy.info is INFO
    assert copy.source == "other" and splits.source == "src"


def test_map_test_applies_when_the_sealed_test_split_is_read():
    reads: list[int] = []
    doubled = splits_counting(reads).replace(map_test=lambda s: ArraySplit(s.x * 2, s.y))
    assert reads == []  # nothing is read to build the copy
    with pytest.raises(holdout.SealedSplitError):
        _ = doubled.test
    with holdout.final_evaluation():
        assert doubled.test.x.tolist() == [[2, 4]]
    assert reads == [1]


def test_without_test_refuses_even_in_final_evaluation():
    trial = splits_counting([]).without_test()
    with holdout.final_evaluation(), pytest.raises(holdout.SealedSplitError):
        _ = trial.test
