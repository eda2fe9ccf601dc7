"""The prepared-array cache: a task's tokenised splits saved once, memory-mapped afterwards.

``prepared/<task>-<hash>/`` under `sptune.tasks.cache.cache_root` holds ``{train,val,test}_{x,y}.npy``
plus ``info.json``, ``vocab.json`` and ``meta.json``. It is written only inside `preparing()`
(what ``python -m sptune.data prepare`` runs), so ordinary loads never write to disk. The key
covers the task options that shape the arrays and a fingerprint of every source file
(`sptune.tasks.content_hash`: their bytes, or stamps for files unopened before the final
evaluation), so a changed, copied-over, added or removed source file invalidates the cache.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from sptune.tasks import holdout
from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits
from sptune.tasks.cache import cache_root, digest, publish
from sptune.tasks.skipped import restore_skipped, skipped_counts

# Bump when the prepared layout or any tokeniser changes, so old caches are never reused.
PREPARED_FORMAT = 1

# None: an ordinary load (reads a prepared cache, never writes one); "fill": write one where none is;
# "force": write it anew even where one is (``prepare --force``).
_preparing: contextvars.ContextVar[str | None] = contextvars.ContextVar("sptune_preparing", default=None)


def prepared_dir(task: str, key: dict[str, Any]) -> Path:
    return cache_root() / "prepared" / f"{task}-{digest({'format': PREPARED_FORMAT, **key})}"


def cached_splits(task: str, key: dict[str, Any], build: Callable[[], TaskSplits]) -> TaskSplits:
    """Memory-mapped prepared arrays when present; else ``build()`` (saved first under `preparing`)."""
    directory = prepared_dir(task, key)
    mode = _preparing.get()
    if (directory / "DONE").is_file() and mode != "force":
        return open_prepared(directory)
    splits = build()
    if mode is None:
        return splits
    save_prepared(splits, directory, key)
    return open_prepared(directory)


@contextmanager
def preparing(force: bool = False) -> Iterator[None]:
    """Inside this block, task loads write their prepared cache (what ``prepare`` runs); with ``force``,
    anew even where one exists."""
    token = _preparing.set("force" if force else "fill")
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


def save_prepared(splits: TaskSplits, directory: Path, key: dict[str, Any]) -> None:
    """Write all three splits and their description into ``directory`` (published atomically)."""
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
        _write_description(tmp, splits, key)
        (tmp / "DONE").write_text("")
        publish(tmp, directory, replace=_preparing.get() == "force")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_description(directory: Path, splits: TaskSplits, key: dict[str, Any]) -> None:
    info = dataclasses.asdict(splits.info)
    info["vocab"] = list(info["vocab"])
    (directory / "info.json").write_text(json.dumps(info, indent=1))
    (directory / "vocab.json").write_text(json.dumps(list(splits.info.vocab)))
    meta = {"source": splits.source, "key": key, "skipped": skipped_counts(splits.info.name)}
    (directory / "meta.json").write_text(json.dumps(meta, indent=1, default=str))


def open_prepared(directory: Path) -> TaskSplits:
    """The splits saved in ``directory``, memory-mapped; the test split stays sealed and unread."""
    info_dict = json.loads((directory / "info.json").read_text())
    info_dict["vocab"] = tuple(info_dict["vocab"])
    info = TaskInfo(**info_dict)
    meta = json.loads((directory / "meta.json").read_text())
    restore_skipped(info.name, meta.get("skipped", {}))

    def split(name: str) -> ArraySplit:
        # mode "c" (copy-on-write): pages load lazily and the arrays stay writable for torch.
        x = np.load(directory / f"{name}_x.npy", mmap_mode="c")
        return ArraySplit(x, np.load(directory / f"{name}_y.npy", mmap_mode="c"))

    source = f"{meta['source']} [prepared: {directory}]"
    return TaskSplits(info, split("train"), split("val"), lambda: split("test"), source=source)
