"""Shaping a task's arrays: padding token rows, and shrinking training sets or integer types.

Every function here is a pure function of its inputs (fixed seeds only), so pretraining and
finetuning loads of the same task always agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sptune.tasks.base import ArraySplit, TaskSplits

# Fixed, not the study seed: the same fraction keeps the same rows in every study.
FRACTION_SEED = 2024


def pad_rows(rows: Sequence[np.ndarray], seq_len: int, pad_id: int = 0) -> np.ndarray:
    """Stack variable-length id rows into an int64 (N, seq_len) array, truncating and padding."""
    out = np.full((len(rows), seq_len), pad_id, dtype=np.int64)
    for i, row in enumerate(rows):
        row = row[:seq_len]
        out[i, : len(row)] = row
    return out


def capped_len(rows: Sequence[np.ndarray], max_len: int) -> int:
    """Sequence length of a token task: the longest training row, at most ``max_len``.

    A pure function of the training data, so pretraining and finetuning agree, and small
    generated sets are not padded to the official 2k-4k lengths.
    """
    longest = max((len(r) for r in rows), default=1)
    return max(1, min(int(max_len), longest))


def limit_train(splits: TaskSplits, max_train: int | None) -> TaskSplits:
    """Keep the first ``max_train`` training rows (applied after caching, so one cache serves all)."""
    if not max_train:
        return splits
    train = ArraySplit(splits.train.x[: int(max_train)], splits.train.y[: int(max_train)])
    return splits.replace(train=train)


def nested_subset(splits: TaskSplits, fraction: float) -> TaskSplits:
    """The first ``fraction`` of a fixed permutation of the training rows: a smaller
    fraction is always contained in a larger one (nested data-fraction ablations)."""
    if fraction >= 1.0:
        return splits
    order = np.random.default_rng(FRACTION_SEED).permutation(len(splits.train))
    keep = np.sort(order[: max(1, int(round(fraction * len(order))))])
    return splits.replace(train=ArraySplit(splits.train.x[keep], splits.train.y[keep]))


def compact(split: ArraySplit) -> ArraySplit:
    """Token ids in the smallest integer type that holds them (full AAN retrieval is
    9.4 GB as int64, 2.4 GB as int16); the model widens each batch to int64 anyway."""
    x = split.x
    if x.dtype.kind in "iu" and x.dtype.itemsize > 2 and x.size and x.min() >= 0:
        if x.max() < np.iinfo(np.int16).max:
            x = x.astype(np.int16)
    return ArraySplit(x, split.y)


def compact_splits(splits: TaskSplits) -> TaskSplits:
    """`compact` applied to every split (the test split when it is read)."""
    return splits.replace(train=compact(splits.train), val=compact(splits.val), map_test=compact)


def unpaired(split: ArraySplit) -> ArraySplit:
    """Paired tasks pretrain on individual documents: (N, 2, L) -> (2N, L)."""
    if split.x.ndim == 3 and split.x.shape[1] == 2:
        x = split.x.reshape(-1, split.x.shape[-1])
        return ArraySplit(x, split.y.repeat(2))
    return split
