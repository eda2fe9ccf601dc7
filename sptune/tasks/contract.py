"""The data contract every reader's arrays are checked against before use: x holds one row per label, rows of the
task's length, whole-number labels within the task's classes, and no split is empty. A file that breaks it is
named with what is wrong, instead of a reshape error (or a split silently built from it) further on."""

from __future__ import annotations

import numpy as np

from sptune.errors import DataError
from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits

REWRITE = "re-create the file (e.g. `python -m sptune.data generate ...`) or re-download it"


def check_arrays(where: str, x: np.ndarray, y: np.ndarray, num_classes: int, fix: str = REWRITE) -> None:
    """Refuse arrays of the wrong shapes or types, x and y of different lengths, or labels outside the classes."""
    if x.ndim < 2:
        raise DataError(where, f"x has shape {x.shape}: expected one row of values per example", fix)
    if y.ndim != 1 or y.dtype.kind not in "iu":
        raise DataError(where, f"y has shape {y.shape} and dtype {y.dtype}: expected one whole-number label per "
                        "example", fix)
    if len(x) != len(y):
        raise DataError(where, f"x has {len(x)} rows but y has {len(y)} labels", fix)
    if not len(y):
        raise DataError(where, "holds no examples", fix)
    low, high = int(y.min()), int(y.max())
    if low < 0 or high >= num_classes:
        raise DataError(where, f"labels run {low}..{high}, outside this task's {num_classes} classes "
                        f"0..{num_classes - 1}", fix)


def check_split(where: str, split: ArraySplit, info: TaskInfo) -> ArraySplit:
    """A finished split against its task: the contract, and rows of the task's sequence length."""
    check_arrays(where, split.x, split.y, info.num_classes)
    if split.x.shape[-1] != info.seq_len:
        raise DataError(where, f"rows of {split.x.shape[-1]} values, but the task reads {info.seq_len}", REWRITE)
    return split


def checked_splits(splits: TaskSplits) -> TaskSplits:
    """Train and validation checked now; the test split when it is read, still behind its seal."""
    where = splits.source or splits.info.name
    check_split(f"{where} (train split)", splits.train, splits.info)
    check_split(f"{where} (validation split)", splits.val, splits.info)
    return splits.replace(map_test=lambda test: check_split(f"{where} (test split)", test, splits.info))
