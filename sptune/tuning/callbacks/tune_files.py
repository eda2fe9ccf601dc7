"""Which of Ray Tune's per-trial result files a study writes: `result.json` only, by default.

Tune adds three logger callbacks to every Tuner (JSON, CSV and TensorBoardX), called on every result.
sptune's record of every epoch is MLflow and only `result.json` is read back, so the CSV and TensorBoard
copies (driver time on every result) are off unless `SPTUNE_TUNE_LOGGERS=all` asks for Tune's defaults.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from ray.tune import Callback
from ray.tune.logger import JsonLoggerCallback

LOGGERS_ENV = "SPTUNE_TUNE_LOGGERS"
TUNE_AUTO_LOGGERS_ENV = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"  # read by Tune's driver when fit() starts


def wants_all_tune_loggers() -> bool:
    return os.environ.get(LOGGERS_ENV, "").strip().lower() == "all"


def result_loggers() -> list[Callback]:
    """The logger callbacks to add to a Tuner's RunConfig: Tune's JSON logger, or none when Tune is to
    add its own three (a restored Tuner's saved RunConfig already holds what its first run had)."""
    return [] if wants_all_tune_loggers() else [JsonLoggerCallback()]


@contextmanager
def chosen_tune_loggers() -> Iterator[None]:
    """Wrap `Tuner.fit()`: Tune reads its switch when fit() starts, and a process-wide variable left
    set would silently drop the CSV/TensorBoard files of any other Tuner the user runs later."""
    before = os.environ.get(TUNE_AUTO_LOGGERS_ENV)
    if wants_all_tune_loggers():
        os.environ.pop(TUNE_AUTO_LOGGERS_ENV, None)
    else:
        os.environ[TUNE_AUTO_LOGGERS_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(TUNE_AUTO_LOGGERS_ENV, None)
        else:
            os.environ[TUNE_AUTO_LOGGERS_ENV] = before
