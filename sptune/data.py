"""Data preparation: the on-disk caches every task shares, and the ``python -m sptune.data`` CLI.

Two caches live under ``SPTUNE_CACHE_DIR`` (default ``~/.cache/sptune``):

- ``generated/<kind>-<hash>/``: offline datasets written by a generator in the *official* file
  layout, keyed by the generator's parameters, then read back by the same reader as real data.
- ``prepared/<task>-<hash>/``: tokenised arrays (``.npy``) written by ``prepare``; later loads
  memory-map them. The key covers the task options that shape the arrays and the size and
  modification time of every source file, so editing a source file invalidates the cache.

CLI::

    python -m sptune.data prepare TASK [--data-dir DIR] [--set KEY=VALUE ...]
    python -m sptune.data info TASK [--data-dir DIR] [--json]
    python -m sptune.data generate {listops,pathfinder,retrieval,bits} --out DIR --seed S ...
"""

from __future__ import annotations

import argparse
import contextvars
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from sptune import holdout
from sptune.errors import DataError, SptuneError
from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits

# Bump when the prepared layout or any tokeniser changes, so old caches are never reused.
PREPARED_FORMAT = 1

_preparing: contextvars.ContextVar[bool] = contextvars.ContextVar("sptune_preparing", default=False)
# Rows skipped while reading (e.g. unreadable Pathfinder PNGs): task -> split -> count.
SKIPPED: dict[str, dict[str, int]] = {}


# ----------------------------------------------------------------------------- cache locations
def cache_root() -> Path:
    value = os.environ.get("SPTUNE_CACHE_DIR")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "sptune"


def _digest(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def file_fingerprint(paths: Iterable[Path]) -> list[tuple[str, int, int]]:
    """(path, size, mtime) per file: cheap (no reads) yet changes whenever a file is rewritten."""
    out = []
    for path in paths:
        stat = path.stat()
        out.append((str(path.resolve()), stat.st_size, stat.st_mtime_ns))
    return out


def ensure_generated(kind: str, params: dict[str, Any], write: Callable[[Path], None]) -> Path:
    """Directory holding the generated dataset for ``params``, writing it on first use.

    Written into a temporary sibling and renamed, so concurrent trials never see half a dataset.
    """
    final = cache_root() / "generated" / f"{kind}-{_digest(params)}"
    if (final / "DONE").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=final.parent))
    try:
        write(tmp)
        (tmp / "params.json").write_text(json.dumps(params, indent=1, sort_keys=True))
        (tmp / "DONE").write_text("")
        _publish(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _publish(tmp: Path, final: Path) -> None:
    try:
        os.replace(tmp, final)
    except OSError:
        # Another process published first (or left a stale partial dir): keep a complete one.
        if not (final / "DONE").is_file():
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)


# ----------------------------------------------------------------------------- prepared arrays
def limit_train(splits: TaskSplits, max_train: int | None) -> TaskSplits:
    """Keep the first ``max_train`` training rows (applied after caching, so one cache serves all)."""
    if not max_train:
        return splits
    train = ArraySplit(splits.train.x[: int(max_train)], splits.train.y[: int(max_train)])
    return TaskSplits(splits.info, train, splits.val, splits._load_test, splits.source)


def prepared_dir(task: str, key: dict[str, Any]) -> Path:
    return cache_root() / "prepared" / f"{task}-{_digest({'format': PREPARED_FORMAT, **key})}"


def cached_splits(task: str, key: dict[str, Any], build: Callable[[], TaskSplits]) -> TaskSplits:
    """Memory-mapped prepared arrays when present; else ``build()`` (saved first under ``prepare``)."""
    directory = prepared_dir(task, key)
    if (directory / "DONE").is_file():
        return _open_prepared(directory)
    splits = build()
    if not _preparing.get():
        return splits
    _save_prepared(splits, directory, key)
    return _open_prepared(directory)


@contextmanager
def preparing() -> Iterator[None]:
    """Inside this block, task loads write their prepared cache (what ``prepare`` runs)."""
    token = _preparing.set(True)
    try:
        yield
    finally:
        _preparing.reset(token)


@contextmanager
def _unsealed_for_conversion() -> Iterator[None]:
    # Entering final_evaluation() inside an open one would re-seal the outer block on exit.
    if holdout._unsealed():
        yield
        return
    with holdout.final_evaluation():
        yield


def _save_prepared(splits: TaskSplits, directory: Path, key: dict[str, Any]) -> None:
    # prepare converts the test file to arrays once so later final evaluations memory-map it;
    # nothing is computed from it here, which is why opening the seal is legitimate.
    with _unsealed_for_conversion():
        test = splits.test
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        for name, split in (("train", splits.train), ("val", splits.val), ("test", test)):
            np.save(tmp / f"{name}_x.npy", np.ascontiguousarray(split.x))
            np.save(tmp / f"{name}_y.npy", np.ascontiguousarray(split.y))
        info = dataclasses.asdict(splits.info)
        info["vocab"] = list(info["vocab"])
        (tmp / "info.json").write_text(json.dumps(info, indent=1))
        (tmp / "vocab.json").write_text(json.dumps(list(splits.info.vocab)))
        meta = {"source": splits.source, "key": key, "skipped": SKIPPED.get(splits.info.name, {})}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
        (tmp / "DONE").write_text("")
        _publish(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _open_prepared(directory: Path) -> TaskSplits:
    info_dict = json.loads((directory / "info.json").read_text())
    info_dict["vocab"] = tuple(info_dict["vocab"])
    info = TaskInfo(**info_dict)
    meta = json.loads((directory / "meta.json").read_text())
    SKIPPED[info.name] = dict(meta.get("skipped", {}))

    def split(name: str) -> ArraySplit:
        # mode "c" (copy-on-write): pages load lazily and the arrays stay writable for torch.
        x = np.load(directory / f"{name}_x.npy", mmap_mode="c")
        return ArraySplit(x, np.load(directory / f"{name}_y.npy", mmap_mode="c"))

    source = f"{meta['source']} [prepared: {directory}]"
    return TaskSplits(info, split("train"), split("val"), lambda: split("test"), source=source)


def record_skipped(task: str, split: str, count: int) -> None:
    SKIPPED.setdefault(task, {})[split] = int(count)


def reset_skipped(task: str) -> None:
    """Forget the counts of an earlier load: each load reports its own."""
    SKIPPED.pop(task, None)


# ----------------------------------------------------------------------------- token helpers
def pad_rows(rows: Sequence[np.ndarray], seq_len: int, pad_id: int = 0) -> np.ndarray:
    """Stack variable-length id rows into an int64 (N, seq_len) array, truncating and padding."""
    out = np.full((len(rows), seq_len), pad_id, dtype=np.int64)
    for i, row in enumerate(rows):
        row = row[:seq_len]
        out[i, : len(row)] = row
    return out


def capped_len(rows: Sequence[np.ndarray], max_len: int) -> int:
    """Sequence length of a token task: the longest training row, at most ``max_len``.

    A pure function of the training data, so pretraining and finetuning agree, and small
    generated sets are not padded to the official 2k-4k lengths.
    """
    longest = max((len(r) for r in rows), default=1)
    return max(1, min(int(max_len), longest))


# ----------------------------------------------------------------------------- CLI
def _request(task: str, data_dir: str | None, sets: list[str]) -> Any:
    from sptune.tasks.registry import TaskRequest, resolve_data_dir

    options = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep:
            raise DataError(f"--set {item}", "expected KEY=VALUE", "write e.g. --set max_len=512")
        options[key] = _parse_value(value)
    return TaskRequest(task, options, 0, resolve_data_dir(data_dir))


def _parse_value(text: str) -> Any:
    if text in ("None", "none", "null"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text  # a bare string such as a path


def _load(request: Any) -> TaskSplits:
    from sptune.tasks.registry import check_task, load_task

    check_task(request)
    return load_task(request)


def cmd_prepare(args: argparse.Namespace) -> int:
    request = _request(args.task, args.data_dir, args.set)
    with preparing():
        splits = _load(request)
    source, marker, directory = splits.source.partition(" [prepared: ")
    if not marker:  # embedded or in-memory tasks load fast and keep no array cache
        print(f"{args.task}: nothing to prepare ({source})")
        return 0
    print(f"{args.task}: prepared arrays in {directory.rstrip(']')}")
    print(f"source: {source}")
    return 0


def _balance(y: np.ndarray) -> dict[str, float]:
    values, counts = np.unique(np.asarray(y), return_counts=True)
    return {str(int(v)): round(float(c) / max(1, len(y)), 4) for v, c in zip(values, counts, strict=True)}


def task_info(request: Any) -> dict[str, Any]:
    """Sizes, lengths and label balance of every split of a task."""
    splits = _load(request)
    # `info` is an inspection command: it counts rows and label frequencies of the test split
    # and computes no model metric, so opening the seal here cannot leak into a selection.
    with holdout.final_evaluation():
        test = splits.test
    parts = {"train": splits.train, "val": splits.val, "test": test}
    info = splits.info
    return {
        "task": info.name,
        "source": splits.source,
        "input_kind": info.input_kind,
        "seq_len": info.seq_len,
        "num_classes": info.num_classes,
        "vocab_size": info.vocab_size,
        "paired": info.paired,
        "splits": {k: len(v) for k, v in parts.items()},
        "label_balance": {k: _balance(v.y) for k, v in parts.items()},
        "skipped": SKIPPED.get(info.name, {}),
    }


def cmd_info(args: argparse.Namespace) -> int:
    result = task_info(_request(args.task, args.data_dir, args.set))
    if args.json:
        print(json.dumps(result))
        return 0
    for key, value in result.items():
        print(f"{key:>14}: {value}")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    out = Path(args.out).expanduser()
    counts = {"n_train": args.n_train, "n_val": args.n_val, "n_test": args.n_test}
    counts = {k: v for k, v in counts.items() if v is not None}
    if args.kind == "listops":
        from sptune.tasks.listops import generate_listops

        lengths = {"min_len": args.min_len, "max_len": args.max_len}
        extra = {k: v for k, v in {**lengths, "max_depth": args.max_depth, "max_args": args.max_args}.items()
                 if v is not None}
        written = generate_listops(out, args.seed, **{**_default_counts(), **counts}, **extra)
    elif args.kind == "pathfinder":
        from sptune.tasks.pathfinder import generate_pathfinder

        n = args.n or (sum(counts.values()) if counts else 2000)
        shape = {"resolution": args.resolution, "contour_length": args.contour_length}
        extra = {k: v for k, v in shape.items() if v is not None}
        written = generate_pathfinder(out, args.seed, n, **extra).directory
    elif args.kind == "text":
        from sptune.tasks.text import generate_synthetic_imdb

        # SYNTHETIC reviews in the aclImdb layout (offline smoke runs; not IMDb, and labelled so).
        sizes = {"n_train": counts.get("n_train", 2000), "n_test": counts.get("n_test", 500)}
        written = generate_synthetic_imdb(out, args.seed, **sizes)
    elif args.kind == "retrieval":
        from sptune.tasks.retrieval import generate_retrieval

        written = generate_retrieval(out, args.seed, **{**_default_counts(), **counts})
    else:
        from sptune.tasks.bits import generate_bits_files

        extra = {"n_bits": args.n_bits} if args.n_bits is not None else {}
        written = generate_bits_files(out, args.seed, **counts, **extra)
    print(f"wrote {written}; read it back with --data-dir {out}")
    return 0


def _default_counts() -> dict[str, int]:
    return {"n_train": 2000, "n_val": 300, "n_test": 300}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sptune.data", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, helptext in (
        ("prepare", cmd_prepare, "load a task once and cache its arrays for memory-mapped loads"),
        ("info", cmd_info, "split sizes, sequence length, vocabulary size, label balance"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("task")
        p.add_argument("--data-dir", default=None, help="root of the data (default: $SPTUNE_DATA_DIR)")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="task option")
        if name == "info":
            p.add_argument("--json", action="store_true", help="print one JSON object")
        p.set_defaults(func=func)
    g = sub.add_parser("generate", help="write an offline dataset in the official layout")
    g.add_argument("kind", choices=["listops", "pathfinder", "retrieval", "bits", "text"])
    g.add_argument("--out", required=True)
    g.add_argument("--seed", type=int, default=0)
    for flag in ("--n-train", "--n-val", "--n-test", "--n", "--min-len", "--max-len", "--max-depth",
                 "--max-args", "--resolution", "--contour-length", "--n-bits"):
        g.add_argument(flag, type=int, default=None)
    g.set_defaults(func=cmd_generate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SptuneError as err:
        print(str(err), file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    # Run main() from the importable `sptune.data` module, not this `__main__` copy: task modules
    # import `sptune.data`, and the prepare flag must live in that one module instance.
    from sptune.data import main as _main

    sys.exit(_main())
