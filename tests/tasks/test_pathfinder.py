"""Pathfinder / PathX: generator ground truth, and the reader on the official layout."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from sptune.errors import DataError
from sptune.tasks import TaskRequest, check_task, holdout, load_task
from sptune.tasks.pathfinder import read_metadata, skipped_images, split_rows
from sptune.tasks.pathfinder_generator import default_params, generate_pathfinder, render_sample

EIGHT = np.ones((3, 3), dtype=int)


pytestmark = pytest.mark.usefixtures("offline_data_env")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("pf")
    return generate_pathfinder(out, seed=5, n=60, keep_truth=True, batch_size=25)


# ----------------------------------------------------------------------------- generator
def check_ground_truth(sample) -> None:
    """label 1 <=> both markers on one connected stroke, judged from the stroke image alone."""
    components, count = ndimage.label(sample.strokes, structure=EIGHT)
    (ra, ca), (rb, cb) = sample.markers
    assert components[ra, ca] > 0 and components[rb, cb] > 0, "a marker is off every stroke"
    assert (components[ra, ca] == components[rb, cb]) == (sample.label == 1)
    # Snakes never touch, so strokes split into exactly one component per snake.
    assert count == len(np.unique(sample.stroke_ids)) - 1
    # Markers sit on snake ends: the start of one target snake, the end of the same or the other.
    first, other = sample.marker_snakes
    ends = sample.snake_ends
    assert (ra, ca) == tuple(int(v) for v in np.floor(ends[first][0]))
    assert (rb, cb) == tuple(int(v) for v in np.floor(ends[other][1]))
    # Markers are drawn: the marker pixels are bright in the image.
    assert sample.image[ra, ca] >= 200 and sample.image[rb, cb] >= 200


def test_generator_ground_truth_and_balance(generated):
    assert generated.labels.sum() == 30 and len(generated.labels) == 60
    for sample in generated.truth:
        check_ground_truth(sample)


def test_generator_writes_official_layout(generated):
    root = generated.directory
    assert root.parts[-2:] == ("pathfinder32", "curv_contour_length_14")
    files = sorted((root / "metadata").glob("*.npy"), key=lambda f: int(f.stem))
    assert [f.name for f in files] == ["0.npy", "1.npy", "2.npy"]
    lines = [ln.split() for f in files for ln in f.read_text().splitlines()]
    assert len(lines) == 60
    for fields, label, sample in zip(lines, generated.labels, generated.truth, strict=True):
        assert int(fields[3]) == label
        pixels = np.asarray(Image.open(root / fields[0] / fields[1]))
        assert pixels.dtype == np.uint8 and np.array_equal(pixels, sample.image)


def test_strokes_equal_the_rendered_snake_pixels():
    p = default_params(32)
    sample = render_sample(random.Random(3), p, 1)
    (ra, ca), (rb, cb) = sample.markers
    image = sample.image.copy()
    yy, xx = np.ogrid[:32, :32]
    for r, c in ((ra, ca), (rb, cb)):  # marker disks may add pixels near the ends only
        image[(yy - r) ** 2 + (xx - c) ** 2 <= 9] = 0
    strokes = sample.strokes.copy()
    for r, c in ((ra, ca), (rb, cb)):
        strokes[(yy - r) ** 2 + (xx - c) ** 2 <= 9] = False
    assert np.array_equal(image > 0, strokes)


def test_pathx_resolution_ground_truth():
    sample = render_sample(random.Random(0), default_params(128), 0)
    assert sample.image.shape == (128, 128)
    check_ground_truth(sample)


# ----------------------------------------------------------------------------- reader
def png(path: Path, pixels: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)


def write_official(root: Path, n: int = 20, resolution: int = 32) -> Path:
    """n images in the LRA layout; image i has value i+1 at row 0, col i (row-major check)."""
    base = root / f"pathfinder{resolution}" / "curv_contour_length_14"
    lines = {0: [], 1: []}
    for i in range(n):
        batch = i % 2
        pixels = np.zeros((resolution, resolution), dtype=np.uint8)
        pixels[0, i] = i + 1
        pixels[5, 5] = 255
        png(base / "imgs" / str(batch) / f"sample_{i}.png", pixels)
        lines[batch].append(f"imgs/{batch} sample_{i}.png {i} {i % 2} 1.0 14 4 2 0.5 1 1\n")
    (base / "metadata").mkdir(parents=True)
    for batch, batch_lines in lines.items():
        (base / "metadata" / f"{batch}.npy").write_text("".join(batch_lines))
    return base


def load(data_dir, task="pathfinder", **options):
    request = TaskRequest(task, options, 0, data_dir)
    check_task(request)
    return load_task(request)


def test_reader_split_sizes_and_row_major_pixels(tmp_path):
    write_official(tmp_path)
    splits = load(tmp_path)
    assert (len(splits.train), len(splits.val)) == (16, 2)
    info = splits.info
    assert info.input_kind == "continuous" and info.seq_len == 1024 and info.levels == 256
    x = splits.train.x
    assert x.dtype == np.uint8 and x.shape == (16, 1024)
    for row, label in zip(x, splits.train.y, strict=True):
        i = int(np.flatnonzero(row[:32])[0])  # row 0 holds the marker value i + 1 at column i
        assert row[i] == i + 1 and label == i % 2
    with pytest.raises(holdout.SealedSplitError):
        _ = splits.test
    with holdout.final_evaluation():
        assert len(splits.test) == 2
    again = load(tmp_path)
    assert np.array_equal(again.train.x, x)  # fixed split seed


def test_unreadable_and_empty_images_are_skipped_and_counted(tmp_path):
    base = write_official(tmp_path)
    parts = split_rows(read_metadata(base))
    empty, broken, blank = (base / rel for rel, _ in parts["train"][:3])
    empty.write_bytes(b"")
    broken.write_bytes(b"\x89PNG\r\n\x1a\nbroken")
    png(blank, np.zeros((32, 32), dtype=np.uint8))  # every real sample shows its markers
    (base / parts["test"][0][0]).unlink()  # missing
    splits = load(tmp_path)
    assert skipped_images("pathfinder") == {"train": 3, "val": 0}
    assert "train 3, val 0" in splits.source
    with holdout.final_evaluation():
        test = splits.test
    assert skipped_images("pathfinder") == {"train": 3, "val": 0, "test": 1}
    assert (len(splits.train), len(splits.val), len(test)) == (13, 2, 1)


def test_malformed_metadata_line_names_file_and_line(tmp_path):
    base = write_official(tmp_path)
    meta = base / "metadata" / "1.npy"
    meta.write_text(meta.read_text() + "imgs/1 sample_99.png\n")
    with pytest.raises(DataError, match=r"metadata/1\.npy:11"):
        load(tmp_path)


def test_missing_metadata_names_the_folder(tmp_path):
    (tmp_path / "pathfinder32" / "curv_contour_length_14").mkdir(parents=True)
    with pytest.raises(DataError, match=r"curv_contour_length_14/metadata"):
        load(tmp_path)


def test_no_readable_image_is_an_error_naming_imgs(tmp_path):
    base = write_official(tmp_path)
    for f in (base / "imgs").rglob("*.png"):
        f.write_bytes(b"")
    with pytest.raises(DataError, match=r"imgs"):
        load(tmp_path)


def test_offline_default_generates_into_cache(tmp_path):
    splits = load(None, gen_n=30)
    assert splits.source.startswith("generated ") and str(tmp_path / "cache") in splits.source
    assert (len(splits.train), len(splits.val)) == (24, 3)
    assert set(np.unique(splits.train.y)) <= {0, 1}
    with pytest.raises(DataError, match="generate is false"):
        load(None, generate=False)


def test_pooled_splits_say_the_pooled_image_side():
    """What reads a sequence back as an image (the trivial predictors' neighbour mean) finds the pooled side."""
    from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits
    from sptune.tasks.pathfinder import pool_splits

    info = TaskInfo(name="pathfinder", input_kind="continuous", seq_len=32 * 32, num_classes=2, image_side=32)
    split = ArraySplit(np.zeros((2, 32 * 32), dtype=np.uint8), np.zeros(2, dtype=np.int64))
    pooled = pool_splits(TaskSplits(info, split, split, lambda: split), 16)
    assert (pooled.info.seq_len, pooled.info.image_side) == (256, 16)
    assert pooled.train.x.shape == (2, 256)
