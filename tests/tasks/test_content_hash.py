"""Source fingerprints (`sptune.tasks.content_hash`) and the prepared cache never serving stale data.

Each stale case copies or rewrites a source file so that its size and modification time stay
what the prepared cache saw, the way ``cp -p``, ``rsync -a`` and ``tar -x`` do, and asserts that
the next load reads the new bytes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sptune import data
from sptune.tasks import TaskRequest, content_hash, holdout, load_task
from sptune.tasks.pathfinder import read_metadata, split_rows
from sptune.tasks.pathfinder_generator import generate_pathfinder
from sptune.tasks.prepared import preparing
from tests.tasks.test_listops import TRAIN, write_official
from tests.tasks.test_text_and_retrieval import decode, write_imdb

pytestmark = pytest.mark.usefixtures("offline_data_env")


def same_stat_rewrite(path: Path, new: bytes) -> None:
    """Rewrite ``path`` in place with bytes of the same length, its mtime set back (``touch -r``)."""
    assert len(new) == path.stat().st_size
    before = path.stat()
    path.write_bytes(new)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def copy_over_keeping_times(new: bytes, target: Path, scratch: Path) -> None:
    """What ``cp -p corrected.tsv target`` does: the same size and mtime, new bytes (and a new inode)."""
    scratch.write_bytes(new)
    os.utime(scratch, ns=(target.stat().st_atime_ns, target.stat().st_mtime_ns))
    os.replace(scratch, target)


def prepare(task: str, data_dir: Path, force: bool = False, **options):
    with preparing(force=force):
        return load_task(TaskRequest(task, options, 0, data_dir))


def load(task: str, data_dir: Path, **options):
    return load_task(TaskRequest(task, options, 0, data_dir))


# ----------------------------------------------------------------------------- fingerprints
def test_content_fingerprint_follows_bytes_not_times(tmp_path):
    path = tmp_path / "a.tsv"
    path.write_bytes(b"label 1\n")
    first = content_hash.content_fingerprint([path])
    same_stat_rewrite(path, b"label 2\n")
    assert content_hash.content_fingerprint([path]) != first
    copy = tmp_path / "b.tsv"
    shutil.copy2(path, copy)  # the same bytes elsewhere: the same hash
    assert content_hash.content_fingerprint([copy])[0][1] == content_hash.content_fingerprint([path])[0][1]


def test_an_unchanged_file_is_not_read_again(tmp_path, monkeypatch):
    path = tmp_path / "a.tsv"
    path.write_bytes(b"rows\n" * 100)
    first = content_hash.content_fingerprint([path])
    monkeypatch.setattr(content_hash, "file_sha256", lambda p: pytest.fail(f"{p} was re-read"))
    assert content_hash.content_fingerprint([path]) == first  # the memo's stamp still matches
    path.touch()  # any stamp change re-hashes
    with pytest.raises(pytest.fail.Exception, match="re-read"):
        content_hash.content_fingerprint([path])


def test_stamps_fingerprint_opens_nothing_yet_sees_an_in_place_rewrite(tmp_path, monkeypatch):
    path = tmp_path / "test.tsv"
    path.write_bytes(b"label 1\n")
    with monkeypatch.context() as patched:
        patched.setattr("builtins.open", lambda *a, **k: pytest.fail("opened"))
        first = content_hash.stamps_fingerprint([path])
    same_stat_rewrite(path, b"label 2\n")  # the ctime moves: no user can set it back
    assert content_hash.stamps_fingerprint([path]) != first


# ----------------------------------------------------------------------------- ListOps (split files)
def test_listops_file_copied_over_with_its_times_reads_the_new_label(tmp_path):
    root = write_official(tmp_path / "data")
    train_file = root / "listops" / "basic_train.tsv"
    before = sorted(prepare("listops", root).train.y.tolist())
    text = train_file.read_text()
    corrected = text.replace("] )\t9\n", "] )\t8\n", 1)  # the first row's label, same length
    assert corrected != text and len(corrected) == len(text)
    copy_over_keeping_times(corrected.encode(), train_file, tmp_path / "corrected.tsv")
    after = sorted(load("listops", root).train.y.tolist())
    assert after != before and after.count(8) == before.count(8) + 1


def test_listops_test_file_is_never_read_to_key_the_cache(tmp_path, monkeypatch):
    root = write_official(tmp_path / "data")
    hashed: list[str] = []
    real = content_hash.file_sha256
    monkeypatch.setattr(content_hash, "file_sha256", lambda p: hashed.append(Path(p).name) or real(p))
    splits = load("listops", root)
    assert sorted(hashed) == ["basic_train.tsv", "basic_val.tsv"]
    with pytest.raises(holdout.SealedSplitError):
        _ = splits.test


# ----------------------------------------------------------------------------- Text (folders of reviews)
def test_text_review_rewritten_in_place_reads_the_new_bytes(tmp_path):
    root = write_imdb(tmp_path / "data")
    review = root / "aclImdb" / "train" / "pos" / "0_8.txt"
    before = {decode(row) for row in prepare("text", root, n_val=2, max_len=64).train.x}
    new = review.read_bytes().replace(b"pos review 0", b"POS REVIEW 0")
    same_stat_rewrite(review, new)
    after = {decode(row) for row in load("text", root, n_val=2, max_len=64).train.x}
    after |= {decode(row) for row in load("text", root, n_val=2, max_len=64).val.x}
    assert any("POS REVIEW 0" in t for t in after) and not any("POS REVIEW 0" in t for t in before)


# ----------------------------------------------------------------------------- Pathfinder (a folder of PNGs)
@pytest.fixture
def pathfinder_root(tmp_path) -> Path:
    generated = generate_pathfinder(tmp_path / "data", seed=3, n=40, batch_size=20)
    return generated.directory


def _train_image(root: Path) -> tuple[Path, int]:
    """A training image's path and its row in the loaded train split."""
    rows = split_rows(read_metadata(root))["train"]
    return root / rows[0][0], 0


def _pathfinder(root: Path, prepare_first: bool = False):
    options = {"generate": False}
    data_dir = root.parents[1]
    return prepare("pathfinder", data_dir, **options) if prepare_first else load("pathfinder", data_dir, **options)


def test_png_overwritten_in_place_reads_the_new_pixels(pathfinder_root):
    image, row = _train_image(pathfinder_root)
    old = _pathfinder(pathfinder_root, prepare_first=True).train.x[row].copy()
    pixels = np.asarray(Image.open(image))
    Image.fromarray((255 - pixels).astype(np.uint8)).save(image)
    new = _pathfinder(pathfinder_root).train.x[row]
    assert not np.array_equal(new, old) and np.array_equal(new, (255 - pixels).reshape(-1))


def test_an_image_missing_at_prepare_time_is_read_once_it_is_back(pathfinder_root):
    image, _ = _train_image(pathfinder_root)
    full = len(_pathfinder(pathfinder_root).train)
    aside = image.with_name(".aside.png")
    image.rename(aside)  # an interrupted extraction
    assert len(_pathfinder(pathfinder_root, prepare_first=True).train) == full - 1
    aside.rename(image)
    assert len(_pathfinder(pathfinder_root).train) == full


def test_pooled_pathfinder_carries_the_pooled_side(pathfinder_root):
    splits = load("pathfinder", pathfinder_root.parents[1], generate=False, resolution=16)
    assert (splits.info.seq_len, splits.info.image_side) == (256, 16)
    assert splits.train.x.shape[1] == 256


# ----------------------------------------------------------------------------- prepare --force
def test_prepare_force_rebuilds_an_existing_cache(tmp_path, capsys):
    root = write_official(tmp_path / "data")
    args = ["prepare", "listops", "--data-dir", str(root)]
    assert data.main(args) == 0
    directory = Path(capsys.readouterr().out.split("prepared arrays in ")[1].splitlines()[0])
    (directory / "train_y.npy").write_bytes(b"corrupt")  # what only a rebuild repairs
    assert data.main([*args, "--force"]) == 0
    assert f"prepared arrays in {directory}" in capsys.readouterr().out
    assert sorted(load("listops", root).train.y.tolist()) == sorted(t for _, t in TRAIN)
