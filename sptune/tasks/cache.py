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
from collections.abc import Callable
from pathlib import Path
from typing import Any


def cache_root() -> Path:
    value = os.environ.get("SPTUNE_CACHE_DIR")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "sptune"


def digest(payload: Any) -> str:
    """Short stable hash of a JSON-able key: the ``<hash>`` of every cache directory name."""
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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


def publish(tmp: Path, final: Path, replace: bool = False) -> None:
    """Rename a completely written ``tmp`` directory to ``final`` (with ``replace``, over a complete one)."""
    if replace and final.exists():
        # Moved aside first: a reader opening ``final`` meanwhile sees the old or the new one, never half.
        old = Path(tempfile.mkdtemp(prefix=f".{final.name}-old-", dir=final.parent))
        os.replace(final, old / "x")
        shutil.rmtree(old, ignore_errors=True)
    try:
        os.replace(tmp, final)
    except OSError:
        # Another process published first (or left a stale partial dir): keep a complete one.
        if not (final / "DONE").is_file():
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
