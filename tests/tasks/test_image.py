"""Image: the official CIFAR-10 python-format release (``cifar-10-batches-py``)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from sptune.errors import DataError
from sptune.tasks import TaskRequest, check_task, holdout, load_task

pytestmark = pytest.mark.usefixtures("offline_data_env")


def write_batches(root: Path, per_batch: int = 4, seed: int = 0) -> tuple[Path, dict]:
    """The release's layout: pickled dicts with b'data' (N, 3072) channel-major and b'labels'."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    written = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                 b"labels": [int(v) for v in rng.integers(0, 10, per_batch)],
                 b"batch_label": name.encode()}
        with (folder / name).open("wb") as f:
            pickle.dump(batch, f)
        written[name] = batch
    return root, written


def gray(data: np.ndarray) -> np.ndarray:
    r, g, b = (data[:, k * 1024 : (k + 1) * 1024].astype(float) for k in range(3))
    return np.rint(0.299 * r + 0.587 * g + 0.114 * b).astype(np.uint8)


def load(root: Path, **options):
    request = TaskRequest("image", {"n_val": 4, **options}, 0, root)
    check_task(request)
    return load_task(request)


def test_batches_are_read_as_lra_grayscale(tmp_path):
    root, written = write_batches(tmp_path)
    splits = load(root)
    assert (len(splits.train), len(splits.val)) == (16, 4)
    assert splits.info.seq_len == 1024 and splits.train.x.dtype == np.uint8
    every = np.concatenate([gray(written[f"data_batch_{i}"][b"data"]) for i in range(1, 6)])
    labels = np.concatenate([written[f"data_batch_{i}"][b"labels"] for i in range(1, 6)])
    got = {(row.tobytes(), int(y)) for row, y in zip(splits.train.x, splits.train.y, strict=True)}
    assert got <= {(row.tobytes(), int(y)) for row, y in zip(every, labels, strict=True)}
    assert "cifar-10-batches-py" in splits.source
    with pytest.raises(holdout.SealedSplitError):
        _ = splits.test
    with holdout.final_evaluation():
        test = splits.test
    assert np.array_equal(test.x, gray(written["test_batch"][b"data"]))


def test_corrupt_test_batch_only_fails_at_final_evaluation(tmp_path):
    root, _ = write_batches(tmp_path)
    (root / "cifar-10-batches-py" / "test_batch").write_bytes(b"not a pickle")
    splits = load(root)
    with holdout.final_evaluation(), pytest.raises(DataError, match="test_batch"):
        _ = splits.test


def test_missing_batch_names_the_file(tmp_path):
    root, _ = write_batches(tmp_path)
    (root / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DataError, match=r"cifar-10-batches-py/data_batch_3"):
        check_task(TaskRequest("image", {}, 0, root))


def test_npz_still_wins_over_batches(tmp_path):
    root, _ = write_batches(tmp_path)
    x = np.full((10, 1024), 7, dtype=np.uint8)
    np.savez(root / "cifar10_gray.npz", x_train=x, y_train=np.zeros(10, dtype=np.int64),
             x_test=x[:2], y_test=np.zeros(2, dtype=np.int64))
    splits = load(root, n_val=2)
    assert splits.source.endswith("cifar10_gray.npz") and (splits.train.x == 7).all()
