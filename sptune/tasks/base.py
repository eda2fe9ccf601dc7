"""The data contract every task honours.

A task produces `TaskSplits`: train and validation arrays in memory, and the test
split behind `holdout`, which refuses to read it before the final evaluation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from sptune.errors import SpecError
from sptune.tasks import holdout

InputKind = Literal["tokens", "continuous"]


@dataclass(frozen=True)
class ArraySplit:
    """One split. ``x`` is (N, L) (or (N, 2, L) for paired tasks); ``y`` is (N,) int64.

    Token tasks store int ids (``pad_id`` where a sequence is shorter than L);
    continuous tasks store raw integer levels (e.g. uint8 pixels) scaled later by
    ``TaskInfo.levels`` so that pixel-level targets stay exact.
    """

    x: np.ndarray
    y: np.ndarray

    def __post_init__(self) -> None:
        if len(self.x) != len(self.y):
            raise ValueError(f"x has {len(self.x)} rows but y has {len(self.y)}")

    def __len__(self) -> int:
        return len(self.y)

    def fingerprint(self) -> str:
        """sha256 of the split's arrays (dtype, shape and bytes of x, then of y): equal exactly when
        two loads hold the same examples in the same order."""
        digest = hashlib.sha256()
        for array in (self.x, self.y):
            array = np.ascontiguousarray(array)
            digest.update(f"{array.dtype.str}{array.shape}".encode())
            digest.update(memoryview(array).cast("B"))
        return digest.hexdigest()

    def shareable(self) -> ArraySplit:
        """The split as plain C-contiguous ndarrays: views of the same memory where possible.

        Pickle protocol 5 hands such an array's buffer over out of band, so a shared-memory store
        (Ray's object store) keeps one copy that every reader maps without copying. A subclass such
        as ``np.memmap`` (the prepared cache, and its slices and casts) or a strided view is pickled
        in band instead, and every reader would unpickle a private copy of the whole split.
        """
        return ArraySplit(np.ascontiguousarray(self.x), np.ascontiguousarray(self.y))


@dataclass(frozen=True)
class TaskInfo:
    """What the model needs to know about a task's inputs and labels."""

    name: str
    input_kind: InputKind
    seq_len: int
    num_classes: int
    # Token tasks: vocabulary size including the specials below.
    vocab_size: int = 0
    pad_id: int = 0
    mask_id: int = 1
    # Continuous tasks: values are integers in [0, levels), scaled to v = x / (levels - 1); the model sees v
    # standardised, (v - value_mean) / value_std, with the training split's statistics (sptune.tasks.value_stats;
    # the defaults leave v as it is).
    levels: int = 256
    value_mean: float = 0.0
    value_std: float = 1.0
    # Image tasks: the side of the square image each sequence is read from row-major (0: not an image).
    image_side: int = 0
    # Paired tasks (retrieval): x is (N, 2, L) and the head compares two encodings.
    paired: bool = False
    vocab: tuple[str, ...] = field(default=(), compare=False, repr=False)


@dataclass
class TaskSplits:
    """Train/val in memory; test only through the guard (see `sptune.tasks.holdout`).

    ``details``: what a reader records of how it made the arrays from the user's data (columns, class names and
    their ids, splits, rows truncated); results.json's provenance and the MLflow parent run carry it.
    """

    info: TaskInfo
    train: ArraySplit
    val: ArraySplit
    _load_test: Callable[[], ArraySplit] = field(repr=False)
    source: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def test(self) -> ArraySplit:
        holdout.check_allowed(self.info.name)
        split = self._load_test()
        holdout.record_read(self.info.name, split)
        return split

    def replace(
        self,
        *,
        info: TaskInfo | None = None,
        train: ArraySplit | None = None,
        val: ArraySplit | None = None,
        source: str | None = None,
        map_test: Callable[[ArraySplit], ArraySplit] | None = None,
    ) -> TaskSplits:
        """A copy with the given parts swapped in.

        The test split cannot be handed over as an array (that would read it before the final
        evaluation), so ``map_test`` is applied to it when it is read, still behind the seal.
        """
        load_test = self._load_test
        if map_test is not None:
            unmapped = load_test
            load_test = lambda: map_test(unmapped())  # noqa: E731
        return TaskSplits(
            info if info is not None else self.info,
            train if train is not None else self.train,
            val if val is not None else self.val,
            load_test,
            source if source is not None else self.source,
            self.details,
        )

    def without_test(self) -> TaskSplits:
        """What is shipped to trials: the splits with a test split that cannot be read at all,
        and train/val as `ArraySplit.shareable` arrays, so that concurrent trials on a node read
        one shared copy instead of each holding its own."""
        return TaskSplits(self.info, self.train.shareable(), self.val.shareable(), _no_test_in_trials, self.source,
                          self.details)


def _no_test_in_trials() -> ArraySplit:
    raise holdout.SealedSplitError("trials never receive the test split")


def seeded_permutation(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).permutation(n)


# The fewest training rows carve_validation leaves: fewer is not a training set.
MIN_TRAIN_ROWS = 1


def carve_validation(x: np.ndarray, y: np.ndarray, n_val: int, seed: int) -> tuple[ArraySplit, ArraySplit]:
    """Split training data into train/val with a fixed seed (val always comes from train); n_val is the task
    option of that name where a task has one."""
    if not 1 <= n_val <= len(y) - MIN_TRAIN_ROWS:
        high = len(y) - MIN_TRAIN_ROWS
        raise SpecError("task.n_val", f"{n_val} validation rows out of the {len(y)} training rows leave "
                        f"{len(y) - n_val} to train on (at least {MIN_TRAIN_ROWS} needed)",
                        f"use n_val between 1 and {high}, e.g. {max(1, len(y) // 10)}")
    order = seeded_permutation(len(y), seed)
    val_idx, train_idx = np.sort(order[:n_val]), np.sort(order[n_val:])
    return ArraySplit(x[train_idx], y[train_idx]), ArraySplit(x[val_idx], y[val_idx])
