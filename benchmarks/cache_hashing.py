"""What keying the prepared cache on content costs, on LRA-sized sources.

Writes a ListOps-sized split file (``--listops-mb``, LRA's basic_train.tsv is ~80 MiB) and an
IMDb-sized folder of reviews (``--reviews``, LRA Text's train split is 25,000 files), then times,
in one run:

  read      reading every byte once (what ``prepare`` does anyway)
  cold      the content fingerprint with no memo: every byte read and hashed
  warm      the content fingerprint with a memo: a stat per file, nothing read
  stamps    the stamp fingerprint (what test files and image folders are keyed on): a stat per file

and prints each as a ratio of ``read`` (cold / read: what a first load pays beyond reading the data;
warm / read: what every later load pays). Writes JSON.

    python benchmarks/cache_hashing.py --json benchmarks/results/cache_hashing.json
    python benchmarks/cache_hashing.py --listops-mb 1 --reviews 200      # seconds: the smoke test's size
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

from sptune.tasks import content_hash


def write_sources(root: Path, listops_mb: int, reviews: int) -> tuple[Path, Path]:
    rng = random.Random(0)
    listops = root / "basic_train.tsv"
    row = "( ( ( [MAX 2 ) 9 ) ] )\t9\n"
    with open(listops, "w") as handle:
        handle.write("Source\tTarget\n")
        handle.write(row * (listops_mb * (1 << 20) // len(row)))
    folder = root / "aclImdb" / "train" / "pos"
    folder.mkdir(parents=True)
    words = ["film", "plot", "actor", "scene", "great", "boring", "music", "ending"]
    for i in range(reviews):
        # LRA Text's reviews average ~1.3 kB.
        (folder / f"{i}_8.txt").write_text(" ".join(rng.choice(words) for _ in range(220)))
    return listops, folder


def read_all(listops: Path, folder: Path) -> None:
    listops.read_bytes()
    for entry in os.scandir(folder):
        Path(entry.path).read_bytes()


def fingerprint(listops: Path, folder: Path, content: bool) -> None:
    if content:
        content_hash.content_fingerprint([listops])
    else:
        content_hash.stamps_fingerprint([listops])
    content_hash.tree_fingerprint(folder, content=content)


def timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def measure(listops_mb: int, reviews: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SPTUNE_CACHE_DIR"] = str(Path(tmp) / "cache")
        listops, folder = write_sources(Path(tmp), listops_mb, reviews)
        read = min(timed(read_all, listops, folder) for _ in range(2))  # warm page cache, as later loads see it
        cold = timed(fingerprint, listops, folder, True)
        warm = min(timed(fingerprint, listops, folder, True) for _ in range(3))
        stamps = min(timed(fingerprint, listops, folder, False) for _ in range(3))
    return {
        "listops_mb": listops_mb,
        "reviews": reviews,
        "seconds": {"read": read, "cold": cold, "warm": warm, "stamps": stamps},
        "ratio_to_read": {"cold": cold / read, "warm": warm / read, "stamps": stamps / read},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listops-mb", type=int, default=80)
    parser.add_argument("--reviews", type=int, default=25000)
    parser.add_argument("--json", default=None, help="write the numbers here")
    args = parser.parse_args()
    result = measure(args.listops_mb, args.reviews)
    print(f"sources: a {args.listops_mb} MiB split file + {args.reviews} review files")
    print(f"{'':8} {'seconds':>9} {'/ read':>8}")
    for name, seconds in result["seconds"].items():
        print(f"{name:8} {seconds:9.3f} {seconds / result['seconds']['read']:8.2f}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
