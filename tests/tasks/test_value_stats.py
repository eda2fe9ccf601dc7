"""The training split's statistics continuous inputs are standardised with (sptune.tasks.value_stats)."""

from __future__ import annotations

import numpy as np
import pytest

from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits
from sptune.tasks.registry import TaskRequest, load_task
from sptune.tasks.value_stats import value_mean_std, with_value_stats

INFO = TaskInfo(name="px", input_kind="continuous", seq_len=16, num_classes=2, levels=256)


def _split(rng: np.random.Generator, n: int, high: int = 256) -> ArraySplit:
    return ArraySplit(rng.integers(0, high, (n, 16)).astype(np.uint8), rng.integers(0, 2, n))


def test_the_histogram_gives_numpys_mean_and_std_exactly():
    split = _split(np.random.default_rng(0), 50)
    mean, std = value_mean_std(split, 256)
    scaled = split.x.astype(np.float64) / 255
    assert mean == pytest.approx(scaled.mean(), abs=1e-12) and std == pytest.approx(scaled.std(), abs=1e-12)


def test_only_the_training_split_sets_the_statistics():
    rng = np.random.default_rng(1)
    train, val = _split(rng, 40, high=100), _split(rng, 40)  # validation values reach higher: it must not count
    splits = with_value_stats(TaskSplits(INFO, train, val, lambda: val))
    assert splits.info.value_mean == pytest.approx(train.x.mean() / 255)
    assert splits.info.value_std == pytest.approx((train.x / 255).std())


def test_a_constant_split_and_token_tasks_keep_the_identity():
    constant = ArraySplit(np.full((4, 16), 7, dtype=np.uint8), np.zeros(4, dtype=np.int64))
    assert with_value_stats(TaskSplits(INFO, constant, constant, lambda: constant)).info.value_std == 1.0
    tokens = TaskInfo(name="tok", input_kind="tokens", seq_len=16, num_classes=2, vocab_size=300)
    same = TaskSplits(tokens, constant, constant, lambda: constant)
    assert with_value_stats(same) is same


def test_a_loaded_task_carries_its_train_statistics_after_train_fraction():
    full = load_task(TaskRequest("digits"))
    half = load_task(TaskRequest("digits", {"train_fraction": 0.5}))
    for splits in (full, half):
        assert splits.info.value_mean == pytest.approx(splits.train.x.mean() / 16)
    assert full.info.value_mean != half.info.value_mean  # the rows trials train on, not the full split's
