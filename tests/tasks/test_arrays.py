"""Padding, sequence lengths, training-set limits and integer compaction (`sptune.tasks.arrays`)."""

from __future__ import annotations

import numpy as np
import pytest

from sptune.tasks import holdout
from sptune.tasks.arrays import capped_len, compact, compact_splits, limit_train, nested_subset, pad_rows
from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits

INFO = TaskInfo(name="demo", input_kind="tokens", seq_len=4, num_classes=2, vocab_size=300)


def splits_of(n_train: int) -> TaskSplits:
    train = ArraySplit(np.arange(n_train * 2, dtype=np.int64).reshape(n_train, 2), np.arange(n_train) % 2)
    val = ArraySplit(np.zeros((2, 2), dtype=np.int64), np.zeros(2, dtype=np.int64))
    test = ArraySplit(np.full((1, 2), 7, dtype=np.int64), np.ones(1, dtype=np.int64))
    return TaskSplits(INFO, train, val, lambda: test, "demo")


def test_pad_rows_truncates_and_pads():
    rows = [np.array([5, 6, 7]), np.array([8]), np.array([], dtype=np.int64)]
    out = pad_rows(rows, 2, pad_id=1)
    assert out.dtype == np.int64 and out.tolist() == [[5, 6], [8, 1], [1, 1]]


def test_capped_len_is_the_longest_row_at_most_max_len():
    rows = [np.zeros(3), np.zeros(9)]
    assert capped_len(rows, 100) == 9 and capped_len(rows, 4) == 4 and capped_len([], 10) == 1


def test_limit_train_keeps_a_prefix_and_leaves_val_and_test():
    splits = splits_of(10)
    assert limit_train(splits, None) is splits and limit_train(splits, 0) is splits
    small = limit_train(splits, 3)
    assert np.array_equal(small.train.x, splits.train.x[:3]) and small.val is splits.val
    with pytest.raises(holdout.SealedSplitError):
        _ = small.test
    with holdout.final_evaluation():
        assert small.test.x.tolist() == [[7, 7]]


def test_nested_subsets_are_contained_in_larger_ones():
    splits = splits_of(40)
    small, large = nested_subset(splits, 0.25), nested_subset(splits, 0.5)
    assert (len(small.train), len(large.train)) == (10, 20)
    rows = {r.tobytes() for r in large.train.x}
    assert all(r.tobytes() in rows for r in small.train.x)
    assert small.val is splits.val and nested_subset(splits, 1.0) is splits
    assert len(nested_subset(splits, 0.001).train) == 1  # never empty


def test_compact_narrows_non_negative_ids_only():
    ids = ArraySplit(np.array([[0, 300]], dtype=np.int64), np.array([1]))
    assert compact(ids).x.dtype == np.int16 and compact(ids).x.tolist() == [[0, 300]]
    for x in (np.array([[-1, 2]], dtype=np.int64), np.array([[0, 40000]]), np.array([[0.5, 1.0]])):
        assert compact(ArraySplit(x, np.array([0]))).x.dtype == x.dtype


def test_compact_splits_narrows_the_test_split_when_it_is_read():
    compacted = compact_splits(splits_of(4))
    assert compacted.train.x.dtype == compacted.val.x.dtype == np.int16
    with holdout.final_evaluation():
        assert compacted.test.x.dtype == np.int16
