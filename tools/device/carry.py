"""What a device call carries (the checkout plus the folders named in `carry`) against 64 MiB; the kit keeps to 60.

The device tool sends the working tree (tracked files and untracked files git does not ignore, a `shared/` folder
inside the checkout included) and each `carry` path, 64 MiB together (/work/.library/device/README.md, Limits).

    python tools/device/carry.py .device/bundle        # call A
    python tools/device/carry.py .device/data          # call B
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

LIMIT = 64 * 2**20  # bytes a call may carry: the working tree and its carry paths together
# What the kit's calls keep to: 4 MiB under the limit, so that the checkout can grow between two bundle builds
# (tests/tools/test_device_bundle.py checks the checkout plus the recorded bundle against it in CI).
TARGET = 60 * 2**20
REPO = Path(__file__).resolve().parents[2]


def checkout_bytes(repo: Path = REPO) -> int:
    """Bytes of the working tree that travels: tracked and untracked-not-ignored files, and shared/ if present."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                            capture_output=True, check=True).stdout.decode().split("\0")
    files = {repo / name for name in listed if name}
    shared = repo / "shared"
    if shared.is_dir():
        files |= {p for p in shared.rglob("*") if p.is_file()}
    return sum(p.lstat().st_size for p in files if p.exists() or p.is_symlink())


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def report(carried: list[Path], repo: Path = REPO) -> tuple[int, str]:
    """(total bytes, a one-line account of them) for a call carrying `carried` beside the checkout."""
    tree = checkout_bytes(repo)
    parts = [f"checkout {tree / 2**20:.1f} MiB"] + [f"{p} {folder_bytes(p) / 2**20:.1f} MiB" for p in carried]
    total = tree + sum(folder_bytes(p) for p in carried)
    if total <= TARGET:
        verdict = f"fits, {(TARGET - total) / 2**20:.1f} MiB under the {TARGET / 2**20:.0f} MiB target"
    elif total <= LIMIT:
        verdict = f"over the {TARGET / 2**20:.0f} MiB target by {(total - TARGET) / 2**20:.1f} MiB: shrink it"
    else:
        verdict = f"OVER by {(total - LIMIT) / 2**20:.1f} MiB"
    return total, f"{' + '.join(parts)} = {total / 2**20:.1f} MiB of {LIMIT / 2**20:.0f} MiB: {verdict}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("carried", nargs="*", type=Path, help="the folders the call names in carry")
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.carried if not p.exists()]
    if missing:
        print(f"not found: {', '.join(missing)} (build them first: see tools/device/README.md)", file=sys.stderr)
        return 2
    total, line = report(args.carried)
    print(line)
    return 0 if total <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
