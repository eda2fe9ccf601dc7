"""tools/device/pack_data.py: the CIFAR npz packed for the device call and rebuilt there, byte for byte, on a small
npz written the way cifar10_gray.npz was (numpy.savez_compressed; images, labels, strings)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "device"))
import pack_data  # noqa: E402


def _images(n: int, rng: np.random.Generator) -> np.ndarray:
    """Smooth images (what the predictor is for) with noise, and the pixel values at both ends."""
    yy, xx = np.mgrid[0:32, 0:32]
    base = (yy[None] * rng.integers(1, 8, (n, 1, 1)) + xx[None] * rng.integers(1, 8, (n, 1, 1))) % 256
    img = np.clip(base + rng.integers(-20, 21, (n, 32, 32)), 0, 255).astype(np.uint8)
    img[0], img[1] = 0, 255
    img[2] = rng.integers(0, 256, (32, 32))
    return img.reshape(n, 1024)


@pytest.fixture
def npz(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    path = tmp_path / "src" / "cifar10_gray.npz"
    path.parent.mkdir()
    np.savez_compressed(path, x_train=_images(40, rng), y_train=rng.integers(0, 10, 40).astype(np.uint8),
                        train_files=np.array([f"img_{i}.jpg" for i in range(40)]), x_test=_images(8, rng),
                        y_test=rng.integers(0, 10, 8).astype(np.uint8), class_names=np.array(["cat", "dog"]),
                        source=np.array("a test npz"))
    return path


def test_the_predictor_coding_inverts_exactly():
    pixels = _images(16, np.random.default_rng(1))
    assert np.array_equal(pack_data.decode_images(pack_data.encode_images(pixels), 16), pixels)


def test_unpacking_rebuilds_the_npz_byte_for_byte(npz: Path, tmp_path: Path):
    manifest = pack_data.pack(npz, tmp_path / "pack")
    codings = {m["name"]: m["coding"] for m in manifest["members"]}
    assert codings["x_train.npy"] == codings["x_test.npy"] == "med-zigzag-xz"
    assert codings["y_train.npy"] == codings["train_files.npy"] == "xz"
    got = pack_data.unpack(tmp_path / "pack", tmp_path / "out")
    rebuilt = tmp_path / "out" / "cifar10_gray.npz"
    assert got["file_identical"] and got["members_identical"] == 7
    assert hashlib.sha256(rebuilt.read_bytes()).hexdigest() == hashlib.sha256(npz.read_bytes()).hexdigest()
    with np.load(npz) as a, np.load(rebuilt) as b:
        assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)


def test_a_corrupt_member_is_refused(npz: Path, tmp_path: Path, capsys):
    pack_data.pack(npz, tmp_path / "pack")
    pixels = pack_data.member_bytes(tmp_path / "pack", {"file": "x_test.npy.xz", "coding": "xz"})
    changed = bytearray(pixels)
    changed[100] ^= 1  # one residual, so one pixel, off by one
    (tmp_path / "pack" / "x_test.npy.xz").write_bytes(pack_data.lzma.compress(bytes(changed)))
    assert pack_data.main(["unpack", "--pack", str(tmp_path / "pack"), "--out", str(tmp_path / "out")]) == 1
    assert "x_test.npy: sha256 differs" in capsys.readouterr().err
    assert not (tmp_path / "out" / "cifar10_gray.npz").exists()
