"""SIGINT (Ctrl-C) and SIGTERM (a `timeout`, a scheduler's preemption) end a study with one paragraph and their
own exit code: 130 for SIGINT, 143 for SIGTERM (128 + the signal's number, as a shell reports them).

Outside the Tuner the first signal is recorded and the study stops at its next safe point (`check`: before and after
the Tuner, after the test numbers are saved, after MLflow hears of them, after the results files), never inside a
database write: an exception raised there left MLflow's SQLite store locked. A second signal stops it at once.
Inside the Tuner, Ray Tune catches SIGINT itself: it stops the trials, writes one last snapshot and returns from
`fit()` as if done. `InterruptWatch` wraps Tune's handler so the study learns it was stopped (and hands SIGTERM to
the same graceful stop); the study then raises `StudyInterrupted` instead of going on to select from a half-run
Tuner. Ray's own closing hint (`Tuner.restore(...)`) is filtered out: a study is resumed with `--resume`, which
the paragraph spells out.
"""

from __future__ import annotations

import logging
import shlex
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import tune

from sptune.errors import StudyInterrupted, StudyStopped

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class _Stops:
    received: int | None = None  # the first stop signal of this run
    output: Path | None = None  # what --output names (a study's or a campaign's directory)
    study_dir: Path | None = None  # the study running when it came
    stages: tuple[str, ...] = ()  # the stages its Tuner was given


STOPS = _Stops()


def _stop_now(signum: int, frame: Any) -> None:
    """The first signal is recorded for the next `check`; a second one stops the study where it is."""
    if STOPS.received is None:
        STOPS.received = signum
        return
    raise StudyInterrupted(signum)


def check() -> None:
    """A safe point: `StudyInterrupted` if a stop signal came since the run began."""
    if STOPS.received is not None:
        raise StudyInterrupted(STOPS.received)


class _RayResumeHint(logging.Filter):
    """Drops Tune's closing lines after a stop: its `Tuner.restore(...)` hint and its list of the trials left
    unfinished (which a resume continues), neither of them what a user of sptune does next."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return STOPS.received is None or not ("Tuner.restore(" in text or "Trials did not complete" in text)


@contextmanager
def stop_signals(output: Path | None) -> Iterator[None]:
    """Around a run: SIGINT and SIGTERM end it with `StudyInterrupted` at its next `check` (Tune's graceful stop inside
    its Tuner)."""
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.getsignal(s) for s in SIGNALS} if main else {}
    hint = _RayResumeHint()
    tune_log = logging.getLogger("ray.tune.tune")
    STOPS.received, STOPS.output, STOPS.study_dir, STOPS.stages = None, output, None, ()
    for signum in previous:
        signal.signal(signum, _stop_now)
    tune_log.addFilter(hint)
    try:
        yield
    finally:
        tune_log.removeFilter(hint)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class InterruptWatch(tune.Callback):
    """Set up by Tune after it installs its own SIGINT handler: wraps it to record the signal, and sends SIGTERM to
    the same graceful stop. Tune puts `_stop_now` back for SIGINT after the first; SIGTERM follows it."""

    def setup(self, **info: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        tune_stop = signal.getsignal(signal.SIGINT)
        if not callable(tune_stop) or tune_stop is _stop_now:  # Tune installed none (TUNE_DISABLE_SIGINT_HANDLER)
            return

        def graceful(signum: int, frame: Any) -> None:
            STOPS.received = STOPS.received or signum
            signal.signal(signal.SIGTERM, _stop_now)  # a second signal of either kind: stop at once
            tune_stop(signum, frame)

        for signum in SIGNALS:
            signal.signal(signum, graceful)


@contextmanager
def watched_tuner() -> Iterator[None]:
    """Around Tuner.fit(): the handlers of before it back after it (Tune leaves its own installed when it ends
    normally), then `StudyInterrupted` if Tune stopped because of a signal."""
    check()
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.getsignal(s) for s in SIGNALS} if main else {}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    check()


def _progress() -> tuple[str, str]:
    """Where the study in STOPS stopped, and what of it is saved."""
    from sptune.output_files import TEST_READS
    from sptune.study.state import read_state

    study = STOPS.study_dir
    state = read_state(study) if study is not None else None
    if state is None:
        return "before the study's first stage started", "nothing that a new run would not redo"
    selected = ", ".join(state.searches) or "none yet"
    if state.rows is None and not (study / TEST_READS).exists():
        open_stages = ", ".join(s for s in STOPS.stages if s not in state.searches) or "none"
        where = f"while its Tuner trained (stages not yet selected: {open_stages})"
    elif state.rows is None:
        where = "during the test evaluation of the selected checkpoints"
    else:
        where = "while it recorded the results (MLflow's test metrics, results files)"
    saved = (f"in {study}: the stages selected ({selected}), the Tuner's last snapshot (each unfinished trial "
             "continues from its last checkpoint; early stopping's decisions are kept)"
             + ("; the test numbers (the test split is not read again)" if state.rows is not None else ""))
    return where, saved


def _resume_command(argv: list[str]) -> str:
    args = list(argv)
    if "--output" not in args and not any(a.startswith("--output=") for a in args) and STOPS.output is not None:
        args += ["--output", str(STOPS.output)]
    if "--resume" not in args:
        args.append("--resume")
    return f"python -m sptune.sweep {shlex.join(args)}"


def paragraph(stop: StudyInterrupted, argv: list[str]) -> str:
    """What the user reads last: the signal, the step it stopped, what is saved, the exact command to resume."""
    where, saved = _progress()
    name = signal.Signals(stop.signum).name
    return (f"sptune: interrupted by {name} {where}. Saved {saved}. Resume with: "
            f"{_resume_command(argv)}  (exit status {stop.exit_code})")


def fault_paragraph(stop: StudyStopped, argv: list[str], log: Path | None) -> str:
    """The same paragraph for a fault (`sptune.study.faults`): the path or service and its error, what is
    saved, where the libraries' tracebacks went, what to fix, the exact command to resume."""
    where, saved = _progress()
    fix = ("Free space there (or make it writable)" if stop.kind == "write"
           else "Start the service again (or wait until it answers)")
    logged = f" The libraries' messages and tracebacks are in {log}." if log is not None else ""
    what = "a write failed" if stop.kind == "write" else "a service stopped answering"
    return (f"sptune: stopped {where}: {what}: {stop.where}: {stop.error}. Saved {saved}.{logged} {fix} "
            f"and resume with: {_resume_command(argv)}  (exit status {stop.exit_code})")
