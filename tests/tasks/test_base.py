"""`TaskSplits.replace`: copies with new parts, the test split still sealed and read lazily."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from sptune.tasks import holdout
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


def _no_test() -> ArraySplit:
    raise AssertionError("not read here")


def test_shipped_splits_are_plain_arrays_over_the_same_memory_that_pickle_out_of_band(tmp_path):
    # The prepared cache hands out np.memmap arrays (slices and casts of them stay memmaps), which
    # pickle *in band*: Ray would unpickle a private copy of the whole split in every trial. Plain
    # contiguous ndarrays pickle out of band, so the object store's one copy is shared instead.
    np.save(tmp_path / "x.npy", np.arange(3000, dtype=np.int16).reshape(1000, 3))
    cached = np.load(tmp_path / "x.npy", mmap_mode="c")
    strided = np.arange(80).reshape(20, 4)[:, ::2]  # a view pickle cannot hand over as one buffer
    loaded = TaskSplits(INFO, ArraySplit(cached[:500], np.arange(500)), ArraySplit(strided, np.arange(20)), _no_test)
    shipped = loaded.without_test()
    assert type(shipped.train.x) is np.ndarray and np.shares_memory(shipped.train.x, cached)  # a view, no copy
    assert shipped.val.x.flags.c_contiguous and shipped.val.x.tolist() == strided.tolist()
    buffers: list[pickle.PickleBuffer] = []
    pickle.dumps(shipped, protocol=5, buffer_callback=buffers.append)
    arrays = (shipped.train.x, shipped.train.y, shipped.val.x, shipped.val.y)
    assert sorted(b.raw().nbytes for b in buffers) == sorted(a.nbytes for a in arrays)
    # What was loaded is untouched (a study keeps using it on the driver).
    assert type(loaded.train.x) is np.memmap
