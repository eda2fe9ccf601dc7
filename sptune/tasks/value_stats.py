"""The training split's mean and std of a continuous task's values, which the model standardises its input with.

Raw pixels in [0, 1] (std ~0.24 on CIFAR) next to a position code of std ~0.7 leave the image a small share of
what a token carries; the reference (Amos et al., S4's CIFAR pipeline) standardises with the training set's
statistics. Computed from the split the trials train on (after `train_fraction` and `max_train`), never from
validation or test data.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sptune.tasks.base import ArraySplit, TaskSplits


def value_mean_std(split: ArraySplit, levels: int) -> tuple[float, float]:
    """Mean and std of x / (levels - 1) over every value of the split, exactly (a histogram of the integer
    levels, so a 45k x 1,024 CIFAR split needs no float copy)."""
    values = np.asarray(split.x).ravel()
    counts = np.bincount(values.astype(np.int64, copy=False), minlength=levels).astype(np.float64)
    scaled = np.arange(len(counts), dtype=np.float64) / (levels - 1)
    n = counts.sum()
    mean = float(counts @ scaled / n)
    var = float(counts @ (scaled - mean) ** 2 / n)
    return mean, max(var, 0.0) ** 0.5


def with_value_stats(splits: TaskSplits) -> TaskSplits:
    """The splits with ``info.value_mean``/``value_std`` set from the training split (continuous tasks only).
    A constant training split (std 0) keeps std 1: standardising would divide by zero."""
    info = splits.info
    if info.input_kind != "continuous" or not len(splits.train):
        return splits
    mean, std = value_mean_std(splits.train, info.levels)
    return splits.replace(info=replace(info, value_mean=mean, value_std=std if std > 0 else 1.0))
