"""Seals the test split until the final evaluation, and audits every read.

Reading test data during search or selection is the classic way to report an
optimistic number. The sweep driver opens the seal only inside
`final_evaluation()`; anything else that touches `TaskSplits.test` raises.
Every read is appended to an audit log (which checkpoint it was for, and the sha256 of what was
read) so tests can prove when reads happened, and results.json counts them per checkpoint.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

_state = threading.local()
UNNAMED = "-"  # the checkpoint of a read made outside `reading_for`


class ReadSplit(Protocol):
    """What the audit needs of a split that was read (`sptune.tasks.base.ArraySplit`)."""

    def __len__(self) -> int: ...

    def fingerprint(self) -> str: ...


class SealedSplitError(RuntimeError):
    """The test split was requested outside the final evaluation."""


def _unsealed() -> bool:
    return getattr(_state, "unsealed", False)


def _audit_path() -> Path | None:
    return getattr(_state, "audit_path", None)


@contextmanager
def final_evaluation(audit_path: str | os.PathLike | None = None) -> Iterator[None]:
    """Allow test-split reads inside this block only, recording each one."""
    _state.unsealed = True
    _state.audit_path = Path(audit_path) if audit_path else None
    try:
        yield
    finally:
        _state.unsealed = False
        _state.audit_path = None


def check_allowed(task: str) -> None:
    if not _unsealed():
        raise SealedSplitError(
            f"the test split of task '{task}' was requested before the final evaluation; "
            "only sptune.tasks.holdout.final_evaluation() may read it"
        )


@contextmanager
def reading_for(checkpoint: str) -> Iterator[None]:
    """Test reads inside this block are audited as made for ``checkpoint``."""
    _state.checkpoint = checkpoint
    try:
        yield
    finally:
        _state.checkpoint = None


def record_read(task: str, split: ReadSplit) -> None:
    """Append one audited read; the split is fingerprinted only when audited (a study's final evaluation)."""
    path = _audit_path()
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {"task": task, "rows": len(split), "time": time.time(), "pid": os.getpid(),
             "checkpoint": getattr(_state, "checkpoint", None) or UNNAMED, "sha256": split.fingerprint()}
    with path.open("a") as f:
        f.write(json.dumps(entry) + "\n")


def audited_reads(path: Path) -> list[dict[str, Any]]:
    """Every read the audit log at ``path`` holds, oldest first; none when there is no log."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def reads_per_checkpoint(reads: list[dict[str, Any]]) -> dict[str, int]:
    """checkpoint -> how many times the test split was read for it (more than once: a resume re-read it)."""
    return dict(Counter(r.get("checkpoint", UNNAMED) for r in reads))


def fingerprints_read(reads: list[dict[str, Any]]) -> list[str]:
    """The distinct sha256 of the test split as read, in order (one, unless the data changed between reads)."""
    return list(dict.fromkeys(r["sha256"] for r in reads if r.get("sha256")))
