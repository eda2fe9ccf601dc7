"""What the terminal shows while the study's Tuner runs: one line per stage (trials done / running / stopped
early / waiting / failed, and its best so far by its own metric), printed by Ray Tune's own CLIReporter.
Stages never compete, so Tune's "current best trial" alone would compare across them. With --verbose
(`show_library_output`) Tune's status header and trial table follow the stage lines, and Optuna's and Ray's
INFO logs print too; without, the libraries print only their warnings and errors.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

import optuna
from ray.tune import CLIReporter

# Seconds between two reports; 0 (or "off") prints nothing while Tuners run.
PROGRESS_ENV = "SPTUNE_PROGRESS_SECONDS"
DEFAULT_SECONDS = 60.0  # often enough to follow a study, rarely enough that its own result lines stand out
TABLE_ROWS = 8  # Tune's trial table, best first: the per-stage lines carry the totals


def report_seconds() -> float:
    raw = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if raw in ("off", "none", "false"):
        return 0.0
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_SECONDS
    except ValueError:
        return DEFAULT_SECONDS


class _Shown:
    tune_tables = False  # --verbose: read when each report prints, so a restored Tuner's reporter obeys it too


class _DropRestoredLogWarning(logging.Filter):
    """Tune warns when a trial resumed from a rung of synchronous halving has no result.json to restore yet:
    that copy is Tune's own log; sptune records every epoch in MLflow and selects from the trial objects."""

    def filter(self, record: logging.LogRecord) -> bool:
        return _Shown.tune_tables or not record.getMessage().startswith("Remote file not found")


_RESTORED_LOG_FILTER = _DropRestoredLogWarning()


def show_library_output(verbose: bool) -> None:
    """--verbose: Tune's status and trial tables under sptune's stage lines, and Optuna's INFO lines ("A new
    study created ..."); without it only sptune's own lines and the libraries' warnings and errors.
    (Ray's own INFO logs: `sptune.study.ray_session.ensure_running`.)"""
    _Shown.tune_tables = verbose
    optuna.logging.set_verbosity(optuna.logging.INFO if verbose else optuna.logging.WARNING)
    logging.getLogger("ray.tune.logger.logger").addFilter(_RESTORED_LOG_FILTER)  # once: the same filter


def use_tune_reporter() -> None:
    """Ray >= 2.7 defaults to its new output engine, which ignores a RunConfig's progress_reporter
    (it warns and prints its own table); the reporter below needs the classic engine. Only the
    driver reads this, when the Tuner starts, so setting it here reaches every Tuner."""
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"


@dataclass(frozen=True)
class ProgressRow:
    """One line of the report: a stage's trials (those whose config names it as their `stage`)."""

    name: str
    planned: int
    epochs: int
    metric: str
    mode: str


class StageProgress(CLIReporter):
    """CLIReporter with a per-stage summary above its status header and trial table."""

    def __init__(self, title: str, rows: list[ProgressRow], metric: str, mode: str, every_s: float) -> None:
        super().__init__(
            metric_columns={
                "training_iteration": "epoch",
                metric.removeprefix("best_"): "val",
                metric: metric.removeprefix("best_") + " best",
            },
            parameter_columns={"variant": "variant", "lr": "lr", "batch_size": "batch"},
            max_progress_rows=TABLE_ROWS,
            print_intermediate_tables=True,  # with verbose=1 Tune would print the table only at the end
            max_report_frequency=int(max(1, every_s)),
            sort_by_metric=True,
        )
        self.title, self.rows = title, rows

    def _progress_str(self, trials: list, done: bool, *sys_info: str, fmt: str = "psql", delim: str = "\n") -> str:
        lines = [f"== sptune {self.title}: per stage ({'finished' if done else 'running'}) =="]
        lines += [self.stage_line(row, [t for t in trials if t.config.get("stage") == row.name]) for row in self.rows]
        if not _Shown.tune_tables:
            return delim.join(lines)
        return delim.join(lines) + delim + super()._progress_str(trials, done, *sys_info, fmt=fmt, delim=delim)

    @staticmethod
    def stage_line(row: ProgressRow, trials: list) -> str:
        ranked_by, mode = row.metric, row.mode
        counts = Counter(_state(t, row.epochs) for t in trials)
        scores = [t.last_result[ranked_by] for t in trials if _number(t.last_result.get(ranked_by))]
        best = (max if mode == "max" else min)(scores) if scores else None
        best_text = f"{best:.4f}" if best is not None else "-"
        return (
            f"{row.name:<16} {counts['done']:>3} done  {counts['running']:>2} running  "
            f"{counts['stopped']:>3} stopped early  {counts['waiting']:>3} waiting  {counts['failed']:>2} failed"
            f"  of {row.planned:<3}  best {ranked_by.removeprefix('best_')} {best_text}"
        )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _state(trial: Any, epochs: int) -> str:
    """done: trained all its epochs; stopped: ended before them (early stopping, or diverged)."""
    if trial.status == "RUNNING":
        return "running"
    if trial.status == "ERROR":
        return "failed"
    if trial.status == "TERMINATED":
        reached = int((trial.last_result or {}).get("training_iteration", 0))
        return "done" if reached >= epochs and not trial.last_result.get("diverged") else "stopped"
    return "waiting"  # PENDING, or PAUSED at a rung of synchronous halving


def run_config_progress(title: str, rows: list[ProgressRow], metric: str, mode: str) -> dict[str, Any]:
    """RunConfig keywords: the reporter and the verbosity it needs, or silence when switched off.
    `metric` and `mode` order Tune's own trial table; each stage's line ranks by its own."""
    every = report_seconds()
    if every <= 0:
        return {"verbose": 0}
    use_tune_reporter()
    return {"verbose": 1, "progress_reporter": StageProgress(title, rows, metric, mode, every)}
