"""The prepared-array cache (`sptune.tasks.prepared`) and the skipped-row counts it carries."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sptune.tasks import holdout
from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits
from sptune.tasks.prepared import PREPARED_FORMAT, cached_splits, prepared_dir, preparing
from sptune.tasks.skipped import record_skipped, reset_skipped, skipped_counts

pytestmark = pytest.mark.usefixtures("offline_data_env")

INFO = TaskInfo(name="demo", input_kind="tokens", seq_len=3, num_classes=2, vocab_size=6, vocab=tuple("abcdef"))


def demo_splits(reads: list[str]) -> TaskSplits:
    def load_test() -> ArraySplit:
        reads.append("test")
        return ArraySplit(np.array([[5, 4, 0]]), np.array([1]))

    train = ArraySplit(np.array([[2, 3, 4], [4, 0, 0]]), np.array([0, 1]))
    return TaskSplits(INFO, train, ArraySplit(np.array([[3, 3, 0]]), np.array([0])), load_test, "demo files")


def test_prepared_directory_name_is_unchanged():
    # Written by the code before the helpers moved: a change here orphans every user's prepared cache.
    assert PREPARED_FORMAT == 1
    assert prepared_dir("listops", {"files": [("/a/b", 10, 123)], "max_len": 2000}).name == "listops-05a449f601a21976"


def test_ordinary_loads_never_write_the_cache():
    reads: list[str] = []
    splits = cached_splits("demo", {"k": 1}, lambda: demo_splits(reads))
    assert splits.source == "demo files" and not prepared_dir("demo", {"k": 1}).exists() and reads == []


def test_prepare_saves_all_splits_and_later_loads_memory_map_them():
    reads: list[str] = []
    with preparing():
        prepared = cached_splits("demo", {"k": 1}, lambda: demo_splits(reads))
    assert reads == ["test"]  # converted once, inside the conversion's own unsealed block
    directory = prepared_dir("demo", {"k": 1})
    assert prepared.source == f"demo files [prepared: {directory}]"
    assert json.loads((directory / "vocab.json").read_text()) == list("abcdef")

    again = cached_splits("demo", {"k": 1}, lambda: pytest.fail("the cache should be used"))
    assert isinstance(again.train.x, np.memmap) and again.info == INFO and again.info.vocab == INFO.vocab
    assert np.array_equal(again.train.x, [[2, 3, 4], [4, 0, 0]]) and list(again.val.y) == [0]
    with pytest.raises(holdout.SealedSplitError):
        _ = again.test
    with holdout.final_evaluation():
        assert np.array_equal(again.test.x, [[5, 4, 0]])


def test_skipped_counts_travel_with_the_prepared_cache():
    reset_skipped("demo")
    record_skipped("demo", "train", 3)
    with preparing():
        cached_splits("demo", {"k": 2}, lambda: demo_splits([]))
    reset_skipped("demo")
    assert skipped_counts("demo") == {}
    cached_splits("demo", {"k": 2}, lambda: pytest.fail("the cache should be used"))
    assert skipped_counts("demo") == {"train": 3}
    reset_skipped("demo")
