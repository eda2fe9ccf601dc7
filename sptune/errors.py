"""User-facing errors: one paragraph naming the field or file and the fix."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable


class SptuneError(Exception):
    """An error caused by the user's input or environment, not by a bug.

    The CLI prints ``str(err)`` without a traceback and exits with ``exit_code``.
    """

    exit_code = 2

    def __init__(self, where: str, problem: str, fix: str) -> None:
        self.where = where
        self.problem = problem
        self.fix = fix
        super().__init__(f"{where}: {problem}. Fix: {fix}")


class SpecError(SptuneError):
    """The sweep spec (YAML or --set overrides) is invalid."""


class DataError(SptuneError):
    """A data source is missing, unreadable or malformed."""


class RuntimeFailure(SptuneError):
    """Something failed while running (exit status 1, not a usage error)."""

    exit_code = 1


class StudyInterrupted(BaseException):
    """A stop signal (SIGINT, SIGTERM) ended the study; its exit code is 128 + the signal's number (130, 143), as a
    shell reports them. A BaseException, as KeyboardInterrupt is: no `except Exception` on the way out may take it
    for a failure to recover from. `sptune.study.interrupts` raises it and words its paragraph."""

    def __init__(self, signum: int) -> None:
        import signal

        self.signum, self.exit_code = signum, 128 + signum
        super().__init__(signal.Signals(signum).name)


class StudyStopped(BaseException):
    """A fault stopped the study as an interrupt does (`sptune.study.faults`): a write refused under the output
    folder, the storage or the tracking store (`kind` "write", exit code 74), or a service that stayed away
    longer than its client's retries (`kind` "service", exit code 75). `where`: the path or service; `error`:
    its words. Everything saved before it stays, and ``--resume`` continues the study."""

    EXIT_CODES = {"write": 74, "service": 75}

    def __init__(self, kind: str, where: str, error: str) -> None:
        self.kind, self.where, self.error = kind, where, error
        self.exit_code = self.EXIT_CODES[kind]
        super().__init__(f"{where}: {error}")


def cli_exit_code(action: Callable[[], int], debug: bool = False) -> int:
    """Run a command-line action: an SptuneError becomes its one paragraph on stderr (with the traceback only
    under --debug: it is the user's input, not a bug) and its exit code; anything else propagates."""
    try:
        return action()
    except SptuneError as err:
        if debug:
            traceback.print_exc()
        print(f"sptune: error: {err}", file=sys.stderr)
        return err.exit_code
