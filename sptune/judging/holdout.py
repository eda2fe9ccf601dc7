"""Seals the test split until the final evaluation, and audits every read.

Reading test data during search or selection is the classic way to report an
optimistic number. The sweep driver opens the seal only inside
`final_evaluation()`; anything else that touches `TaskSplits.test` raises.
Every read is appended to an audit log so tests can prove when reads happened.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_state = threading.local()


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
            "only sptune.judging.holdout.final_evaluation() may read it"
        )


def record_read(task: str, n_rows: int) -> None:
    path = _audit_path()
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps({"task": task, "rows": n_rows, "time": time.time(), "pid": os.getpid()}) + "\n")
