"""Where task caches live, how their keys are made, and the generated-dataset cache.

Caches live under ``SPTUNE_CACHE_DIR`` (default ``~/.cache/sptune``). This module holds
``generated/<kind>-<hash>/``: offline datasets written by a generator in the *official* file
layout, keyed by the generator's parameters, then read back by the same reader as real data.
The prepared-array cache beside it is `sptune.tasks.prepared`.

A cache directory is written into a temporary sibling and renamed into place (`publish`), so
concurrent trials never see half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def cache_root() -> Path:
    value = os.environ.get("SPTUNE_CACHE_DIR")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "sptune"


def digest(payload: Any) -> str:
    """Short stable hash of a JSON-able key: the ``<hash>`` of every cache directory name."""
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
    """Directory holding the generated dataset for ``params``, writing it on first use."""
    final = cache_root() / "generated" / f"{kind}-{digest(params)}"
    if (final / "DONE").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=final.parent))
    try:
        write(tmp)
        (tmp / "params.json").write_text(json.dumps(params, indent=1, sort_keys=True))
        (tmp / "DONE").write_text("")
        publish(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def publish(tmp: Path, final: Path) -> None:
    """Rename a completely written ``tmp`` directory to ``final``."""
    try:
        os.replace(tmp, final)
    except OSError:
        # Another process published first (or left a stale partial dir): keep a complete one.
        if not (final / "DONE").is_file():
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
