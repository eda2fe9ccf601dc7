"""Pack cifar10_gray.npz small enough to travel to the device machine, and unpack it there, checked.

The npz (58.8 MB: its pixels barely deflate) plus the checkout must fit a device call's 64 MiB. Packing is
lossless: each image's pixels are replaced by their residuals against the LOCO-I (JPEG-LS) median predictor
of the left, upper and upper-left pixels, zigzag-coded and xz-compressed (about 30 % smaller than the npz);
every other member's .npy bytes are xz-compressed as they are. Unpacking inverts the predictor row by row,
rebuilds every member's exact .npy bytes and the npz around them (same member order, names, dates and
deflate settings as numpy.savez_compressed writes), and checks the sha256 of every member and of the file.
A member that differs is an error (exit 1). The file's own sha256 also depends on the zlib build that deflates
it: where that differs from the packing machine's, the file's hash is reported as differing while every member
(every array numpy reads) is identical, and that passes. Needs numpy and the standard library only.

    python tools/device/pack_data.py pack --src ../shared/data/cifar10_gray.npz --out .device/data
    python tools/device/pack_data.py unpack --pack .device/data --out /tmp/data      # on the device
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

MANIFEST = "manifest.json"
XZ_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9}]
SIDE = 32  # CIFAR images: 32 x 32 pixels, flattened row-major to 1,024


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _neighbours(img: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Left, upper and upper-left pixel of every pixel (0 outside the image), as int16."""
    a, b, c = (np.zeros_like(img) for _ in range(3))
    a[:, :, 1:], b[:, 1:, :], c[:, 1:, 1:] = img[:, :, :-1], img[:, :-1, :], img[:, :-1, :-1]
    return a, b, c


def _med(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """LOCO-I's median edge detector: min(a, b) above an edge, max(a, b) below one, else a + b - c."""
    hi, lo = np.maximum(a, b), np.minimum(a, b)
    return np.where(c >= hi, lo, np.where(c <= lo, hi, a + b - c))


def encode_images(pixels: np.ndarray) -> bytes:
    """(n, 1024) uint8 -> zigzag-coded residuals against the predictor, one byte per pixel."""
    img = pixels.reshape(-1, SIDE, SIDE).astype(np.int16)
    r = (img - _med(*_neighbours(img)) + 128) % 256 - 128  # the residual modulo 256, in [-128, 127]
    return np.where(r >= 0, 2 * r, -2 * r - 1).astype(np.uint8).tobytes()


def decode_images(codes: bytes, n: int) -> np.ndarray:
    """The inverse of `encode_images`: one pass per pixel position, every image at once."""
    z = np.frombuffer(codes, np.uint8).reshape(n, SIDE, SIDE).astype(np.int16)
    r = np.where(z % 2 == 0, z // 2, -(z + 1) // 2)
    img = np.zeros((n, SIDE, SIDE), np.int16)
    zero = np.zeros(n, np.int16)
    for i in range(SIDE):
        for j in range(SIDE):
            a = img[:, i, j - 1] if j else zero
            b = img[:, i - 1, j] if i else zero
            c = img[:, i - 1, j - 1] if i and j else zero
            img[:, i, j] = (_med(a, b, c) + r[:, i, j]) % 256
    return img.astype(np.uint8).reshape(n, SIDE * SIDE)


def _image_rows(data: bytes) -> int:
    """Rows of a member holding (n, 1024) uint8 pixels in C order (its .npy header then n x 1024 bytes), else 0."""
    arr = np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
    is_image = arr.dtype == np.uint8 and arr.ndim == 2 and arr.shape[1] == SIDE * SIDE and arr.flags.c_contiguous
    return arr.shape[0] if is_image and not np.isfortran(arr) else 0


def pack(src: Path, out: Path) -> dict:
    """Write `out`/manifest.json and one .xz per member; returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    blob = src.read_bytes()
    members = []
    with zipfile.ZipFile(src) as zf:
        for info in zf.infolist():
            data = zf.read(info)
            entry = {"name": info.filename, "sha256": sha256(data), "size": len(data),
                     "date_time": list(info.date_time), "compress_type": info.compress_type,
                     "external_attr": info.external_attr, "create_system": info.create_system}
            n = _image_rows(data)
            if n:
                head = len(data) - n * SIDE * SIDE  # the pixels are the member's last bytes
                entry.update(coding="med-zigzag-xz", header=data[:head].hex(), rows=n)
                payload = encode_images(np.frombuffer(data, np.uint8, offset=head).reshape(n, SIDE * SIDE))
            else:
                payload, entry["coding"] = data, "xz"
            entry["file"] = f"{info.filename}.xz"
            (out / entry["file"]).write_bytes(lzma.compress(payload, filters=XZ_FILTERS))
            members.append(entry)
    manifest = {"name": src.name, "sha256": sha256(blob), "size": len(blob), "members": members}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def member_bytes(pack_dir: Path, entry: dict) -> bytes:
    payload = lzma.decompress((pack_dir / entry["file"]).read_bytes())
    if entry["coding"] == "xz":
        return payload
    return bytes.fromhex(entry["header"]) + decode_images(payload, entry["rows"]).tobytes()


def write_npz(path: Path, members: list[tuple[dict, bytes]]) -> None:
    """The npz as numpy.savez_compressed writes it: deflated members, zip64 forced, in the recorded order."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
        for entry, data in members:
            info = zipfile.ZipInfo(entry["name"], date_time=tuple(entry["date_time"]))
            info.compress_type, info.external_attr = entry["compress_type"], entry["external_attr"]
            info.create_system = entry["create_system"]
            with zf.open(info, "w", force_zip64=True) as f:
                f.write(data)


def unpack(pack_dir: Path, out: Path) -> dict:
    """Rebuild the npz into `out`; the checks' outcome (raises ValueError when a member differs)."""
    manifest = json.loads((pack_dir / MANIFEST).read_text())
    members, bad = [], []
    for entry in manifest["members"]:
        data = member_bytes(pack_dir, entry)
        if sha256(data) != entry["sha256"]:
            bad.append(entry["name"])
        members.append((entry, data))
    if bad:
        raise ValueError(f"{', '.join(bad)}: sha256 differs from the packed original's (a corrupt or partial pack)")
    out.mkdir(parents=True, exist_ok=True)
    target = out / manifest["name"]
    write_npz(target, members)
    got = sha256(target.read_bytes())
    return {"file": str(target), "members_identical": len(members), "sha256": got,
            "file_identical": got == manifest["sha256"], "expected_sha256": manifest["sha256"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="npz -> packed folder (here)")
    p.add_argument("--src", type=Path, default=Path("../shared/data/cifar10_gray.npz"))
    p.add_argument("--out", type=Path, default=Path(".device/data"))
    u = sub.add_parser("unpack", help="packed folder -> npz, checked (on the device)")
    u.add_argument("--pack", type=Path, default=Path(".device/data"))
    u.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    start = time.perf_counter()
    if args.command == "pack":
        manifest = pack(args.src, args.out)
        packed = sum(f.stat().st_size for f in args.out.iterdir())
        print(f"packed {args.src} ({manifest['size'] / 2**20:.1f} MiB, sha256 {manifest['sha256']}) into {args.out}: "
              f"{packed / 2**20:.1f} MiB in {time.perf_counter() - start:.0f} s")
        return 0
    try:
        got = unpack(args.pack, args.out)
    except (ValueError, OSError, lzma.LZMAError) as e:
        print(f"unpack of {args.pack} failed: {e}", file=sys.stderr)
        return 1
    file_note = "identical" if got["file_identical"] else (
        f"differs ({got['sha256']}): this zlib deflates differently; every member, so every array, is identical")
    print(f"unpacked {got['file']} in {time.perf_counter() - start:.1f} s: {got['members_identical']} members "
          f"identical by sha256; file sha256 {got['expected_sha256']} {file_note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
