"""scikit-learn's bundled UCI handwritten digits: real data, no download.

1,797 8x8 images with 17 grey levels (0..16), flattened row-major to 64 values.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits, carve_validation, seeded_permutation
from sptune.tasks.registry import TaskDef, TaskRequest, register

# The split never depends on the study seed: every study sees the same test images.
SPLIT_SEED = 1234
TEST_FRACTION = 0.2
VAL_FRACTION = 0.1


def _bundled_csv() -> Path | None:
    """scikit-learn's copy of the digits (one CSV row per image: 64 pixels, then the label), found
    without importing scikit-learn, whose import every refusal would wait for (docs/design/data.md)."""
    spec = importlib.util.find_spec("sklearn")  # locates the package; runs none of it
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    return path if path.is_file() else None


def _all_digits() -> tuple[np.ndarray, np.ndarray]:
    path = _bundled_csv()
    if path is None:  # a scikit-learn that keeps its data elsewhere: its own loader finds it
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return bunch.data.astype(np.uint8), bunch.target.astype(np.int64)
    rows = np.loadtxt(path, delimiter=",", dtype=np.int64)  # load_digits reads the same file this way
    return rows[:, :-1].astype(np.uint8), rows[:, -1]


def _split_indices(n: int) -> tuple[np.ndarray, np.ndarray]:
    order = seeded_permutation(n, SPLIT_SEED)
    n_test = int(round(n * TEST_FRACTION))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def load(request: TaskRequest) -> TaskSplits:
    x, y = _all_digits()
    trainval_idx, _ = _split_indices(len(y))
    n_val = int(round(len(y) * VAL_FRACTION))
    train, val = carve_validation(x[trainval_idx], y[trainval_idx], n_val, SPLIT_SEED + 1)
    info = TaskInfo(name="digits", input_kind="continuous", seq_len=64, num_classes=10, levels=17, image_side=8)
    return TaskSplits(info, train, val, _read_test, source="sklearn.datasets.load_digits")


def _read_test() -> ArraySplit:
    x, y = _all_digits()
    _, test_idx = _split_indices(len(y))
    return ArraySplit(x[test_idx], y[test_idx])


def check_available(request: TaskRequest) -> None:
    """Bundled with scikit-learn: always available."""


register(TaskDef(
    name="digits", description="UCI handwritten digits bundled with scikit-learn (8x8 -> 64 pixels, 10 classes)",
    defaults={}, load=load, check_available=check_available,
))
