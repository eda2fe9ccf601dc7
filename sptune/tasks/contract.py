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


PLUGIN_FIX = "return what sptune.plugins documents for a task's load (docs/guides/plugins.md)"


def _check_plugin_split(where: str, split: ArraySplit, info: TaskInfo) -> ArraySplit:
    """What a built-in reader guarantees by construction, checked for a plug-in: x of whole numbers (token ids, or
    levels that `TaskInfo.levels` scales), one row per example (two for a paired task), values within range."""
    x = split.x
    check_arrays(where, x, split.y, info.num_classes, PLUGIN_FIX)
    rows = "(N, 2, seq_len)" if info.paired else "(N, seq_len)"
    if x.ndim != (3 if info.paired else 2) or (info.paired and x.shape[1] != 2):
        raise DataError(where, f"x has shape {x.shape}; a {'paired ' if info.paired else ''}task's x is {rows}",
                        f"return x of shape {rows}, seq_len = {info.seq_len} (TaskInfo.seq_len)")
    if x.shape[-1] != info.seq_len:
        raise DataError(where, f"x has rows of {x.shape[-1]} values, but TaskInfo.seq_len is {info.seq_len}",
                        f"return x of shape {rows} with seq_len {info.seq_len}, or set TaskInfo.seq_len to the rows' "
                        "length (pad shorter sequences with pad_id)")
    if x.dtype.kind not in "iu":
        raise DataError(where, f"x has dtype {x.dtype}; sptune reads whole numbers (token ids, or continuous levels "
                        f"0..levels-1 that TaskInfo.levels scales)",
                        "return integers, e.g. np.round(v * 255).astype(np.uint8) with levels=256 for values in [0, 1]")
    high = info.vocab_size if info.input_kind == "tokens" else info.levels
    what = "vocab_size" if info.input_kind == "tokens" else "levels"
    if x.size and (int(x.min()) < 0 or int(x.max()) >= high):
        raise DataError(where, f"x holds values {int(x.min())}..{int(x.max())}, outside 0..{high - 1} (TaskInfo."
                        f"{what} = {high})", f"raise TaskInfo.{what}, or map x into 0..{high - 1}")
    return split


def checked_plugin_splits(splits: object, where: str) -> TaskSplits:
    """A plug-in task's load result against the contract: a `TaskSplits` with a `TaskInfo`, splits of integer rows
    in range (the test split when it is read, behind its seal)."""
    if not isinstance(splits, TaskSplits):
        raise DataError(where, f"load returned a {type(splits).__name__}, not a sptune.plugins.TaskSplits", PLUGIN_FIX)
    info = splits.info
    if not isinstance(info, TaskInfo):
        raise DataError(where, f"TaskSplits.info is a {type(info).__name__}, not a sptune.plugins.TaskInfo",
                        PLUGIN_FIX)
    if info.input_kind not in ("tokens", "continuous"):
        raise DataError(where, f"TaskInfo.input_kind is {info.input_kind!r}", "use 'tokens' or 'continuous'")
    if info.num_classes < 2 or info.seq_len < 1:
        raise DataError(where, f"TaskInfo has num_classes {info.num_classes} and seq_len {info.seq_len}",
                        "give at least 2 classes and a positive sequence length")
    for name, split in (("train", splits.train), ("validation", splits.val)):
        if not isinstance(split, ArraySplit):
            raise DataError(where, f"the {name} split is a {type(split).__name__}, not an ArraySplit", PLUGIN_FIX)
        _check_plugin_split(f"{where} ({name} split)", split, info)
    return splits.replace(map_test=lambda test: _check_plugin_split(f"{where} (test split)", test, info))
