"""Faults that stop a study as an interrupt does: a write refused under the output folder, the storage or the
tracking store (a full disk, a read-only folder, a quota: ENOSPC, EROFS, EDQUOT, SQLite's "database or disk is
full"), and a service that stays away longer than its client retries (the MLflow server, the Optuna database).

Nothing is lost: everything a resume needs was saved before the write that failed (the study's state at each
selection, Tune's last whole snapshot, MLflow's runs and the Optuna trials up to then), so the study ends with
one paragraph (the path or service and its error, what is saved, the exact ``--resume`` command) and its own
exit code: 74 for a write fault, 75 for a service outage (sysexits' EX_IOERR and EX_TEMPFAIL). The libraries'
messages and tracebacks go to OUTPUT/libraries.log (`LibraryLog`), not to the terminal.
"""

from __future__ import annotations

import errno
import logging
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import tune

from sptune.errors import StudyStopped

WRITE_ERRNOS = {
    errno.ENOSPC: "no space left on device",
    errno.EROFS: "read-only file system",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
}
# The same faults as libraries word them when the errno is lost on the way (SQLite, pyarrow, torch.save).
WRITE_TEXTS = {
    "database or disk is full": "the disk is full",
    "no space left on device": "no space left on device",
    "disk quota exceeded": "disk quota exceeded",
    "read-only file system": "read-only file system",
    "attempt to write a readonly database": "read-only database",
    "file write failed": "a file write failed",
}
# A service that did not answer through all of its client's retries.
OUTAGE_TEXTS = (
    "max retries exceeded",  # MLflow's HTTP client (urllib3)
    "connection refused",
    "server closed the connection unexpectedly",  # PostgreSQL (psycopg)
    "could not connect to server",
    "connection to server at",
    "terminating connection due to administrator command",
)
LIBRARY_LOG = "libraries.log"
_PATH = re.compile(r"'(/[^']+)'|\"(/[^\"]+)\"|(?<![\w/])(/(?:[\w.+-]+/)*[\w.+-]+)")


@dataclass(frozen=True)
class Fault:
    """What stopped the study: `kind` "write" or "service", `where` the path or service, `error` its words."""

    kind: str
    where: str
    error: str


def _chain(err: BaseException) -> Iterator[BaseException]:
    """The exception and every one it came from (causes, contexts, a Ray task's error's cause)."""
    seen: set[int] = set()
    todo = [err]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        todo += [item.__cause__, item.__context__, getattr(item, "cause", None)]
        todo += [e for e in getattr(item, "exceptions", ()) if isinstance(e, BaseException)]


def fault_in(err: BaseException, stores: dict[str, str] | None = None) -> Fault | None:
    """The write fault or outage behind `err`, if any. `stores`: a word in an error -> the store it names
    (e.g. "sqlite" -> the MLflow store's URI), for errors that name no path."""
    for item in _chain(err):
        found = _write_fault(item, stores or {})
        if found is not None:
            return found
    for item in _chain(err):
        text = str(item).lower()
        if any(t in text for t in OUTAGE_TEXTS):
            return Fault("service", _service(text, stores or {}), _first_line(item))
    return None


def fault_in_text(text: str, stores: dict[str, str] | None = None) -> Fault | None:
    """The write fault named in a trial's error text (what Tune kept of an exception raised in a worker)."""
    lowered = text.lower()
    for key, words in WRITE_TEXTS.items():
        if key in lowered:
            return Fault("write", _path_in(text) or _store(lowered, stores or {}), words)
    return None


def _write_fault(item: BaseException, stores: dict[str, str]) -> Fault | None:
    if isinstance(item, OSError) and item.errno in WRITE_ERRNOS:
        where = item.filename or _path_in(str(item)) or _store(str(item).lower(), stores)
        return Fault("write", str(where), f"{WRITE_ERRNOS[item.errno]} ({_first_line(item)})")
    text = str(item).lower()
    for key, words in WRITE_TEXTS.items():
        if key in text:
            line = next(line for line in str(item).splitlines() if key in line.lower())
            said = f"{type(item).__name__}: {line.strip()[:300]}"
            return Fault("write", _path_in(str(item)) or _store(text, stores), f"{words} ({said})")
    return None


def _path_in(text: str) -> str | None:
    for match in _PATH.finditer(text):
        path = next(g for g in match.groups() if g)
        if path.count("/") > 1:
            return path
    return None


def _store(text: str, stores: dict[str, str]) -> str:
    """The store a write fault's words name; the key "" (in every text, so last) is the output folder."""
    return next((where for key, where in stores.items() if key in text), "the output folder or a store")


def _service(text: str, stores: dict[str, str]) -> str:
    return next((where for key, where in stores.items() if key and key in text), "a service the study writes to")


def _first_line(err: BaseException) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    text = lines[-1] if lines and "Traceback" in lines[0] else (lines[0] if lines else type(err).__name__)
    return f"{type(err).__name__}: {text.strip()[:300]}"


class _FailSafeFile(logging.Handler):
    """Appends to OUTPUT/libraries.log; when that folder refuses the write (the fault itself), to a file in the
    temporary folder instead. Never raises: a log write must not add a fault of its own."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.DEBUG)
        self.path = path
        self.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record) + "\n"
        for _ in range(2):
            try:
                with open(self.path, "a") as f:
                    f.write(text)
                return
            except OSError:
                if self.path.parent == Path(tempfile.gettempdir()):
                    return
                self.path = Path(tempfile.gettempdir()) / f"sptune-{self.path.parent.name}-{LIBRARY_LOG}"


class _KeepOffTerminal(logging.Filter):
    """On the terminal's handlers: once a fault was seen, the libraries' records go to the log file only."""

    def __init__(self, log: LibraryLog) -> None:
        super().__init__()
        self.log = log

    def filter(self, record: logging.LogRecord) -> bool:
        if self.log.fault is None and record.exc_info and record.exc_info[1] is not None:
            self.log.fault = fault_in(record.exc_info[1], self.log.stores)
        if self.log.fault is None and record.levelno >= logging.ERROR:
            self.log.fault = fault_in_text(record.getMessage(), self.log.stores)
        return self.log.fault is None


class LibraryLog:
    """Around a run: every library record (Ray, Tune, MLflow, Optuna, SQLAlchemy, pyarrow) also goes to
    OUTPUT/libraries.log; once one names a write fault, none reaches the terminal any more."""

    LOGGERS = ("", "ray", "ray.tune", "ray.train", "mlflow", "optuna", "sqlalchemy", "alembic")

    def __init__(self, output: Path) -> None:
        self.file = _FailSafeFile(output / LIBRARY_LOG)
        self.fault: Fault | None = None
        self.stores: dict[str, str] = {}
        self._filter = _KeepOffTerminal(self)

    @property
    def path(self) -> Path:
        return self.file.path

    @contextmanager
    def kept(self) -> Iterator[LibraryLog]:
        handlers = {h for name in self.LOGGERS for h in logging.getLogger(name).handlers}
        for handler in handlers:
            handler.addFilter(self._filter)
        for name in self.LOGGERS[:2]:
            logging.getLogger(name).addHandler(self.file)
        hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        try:
            yield self
        finally:
            sys.unraisablehook = hook
            for name in self.LOGGERS[:2]:
                logging.getLogger(name).removeHandler(self.file)
            for handler in handlers:
                handler.removeFilter(self._filter)

    def _unraisable(self, unraisable: Any) -> None:
        """An exception Python could not raise (a finaliser's): to the log, not the terminal."""
        self.file.emit(
            logging.makeLogRecord(
                {
                    "name": "unraisable",
                    "levelno": logging.ERROR,
                    "levelname": "ERROR",
                    "msg": f"{unraisable.err_msg}: {unraisable.exc_value!r}",
                }
            )
        )


class TrialWriteFault(RuntimeError):
    """A trial failed writing (its checkpoint, its results): the study stops before the trial counts as failed."""


class FaultWatch(tune.Callback):
    """First of the Tuner's callbacks: a trial that failed because a write was refused stops the Tuner before any
    later callback (the stages' ledger, MLflow) takes it for a failed trial, so a resume continues it from its last
    checkpoint as if it had been interrupted."""

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._check(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._check(trial)

    @staticmethod
    def _check(trial: Any) -> None:
        text = _trial_error(trial)
        if text and fault_in_text(text) is not None:
            raise TrialWriteFault(f"trial {trial.trial_id}: {text.strip().splitlines()[-1][:500]}")


def _trial_error(trial: Any) -> str:
    """What Tune kept of a trial's error: its exception, else its error file's text ("" if neither is readable)."""
    try:
        error = trial.get_pickled_error() or trial.get_error()
        if error is not None:
            return "\n".join(str(e) for e in _chain(error))
    except Exception:  # noqa: BLE001 - an unreadable error file (the disk that failed) is read as text below
        pass
    try:
        return Path(trial.error_file).read_text() if trial.error_file else ""
    except (OSError, TypeError):
        return ""


def stopped(err: BaseException, log: LibraryLog | None) -> StudyStopped | None:
    """`StudyStopped` for a fault behind `err` (or one the libraries logged before it), else None."""
    stores = log.stores if log is not None else {}
    fault = fault_in(err, stores) or (log.fault if log is not None else None)
    if fault is None:
        return None
    stop = StudyStopped(fault.kind, fault.where, fault.error)
    stop.log = log.path if log is not None else None
    return stop
