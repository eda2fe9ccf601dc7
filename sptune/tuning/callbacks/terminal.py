"""What the terminal shows while a Tuner runs: Ray Tune's own CLIReporter, configured, with
one line per variant (in a study's one Tuner: per stage) on top (trials done / running / stopped
early, and its best so far by its own metric).

One Tuner trains several variants that never compete, so Tune's "current best trial" alone
would compare across variants; the per-variant lines say how each variant's own search is doing.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ray.tune import CLIReporter

# Seconds between two reports; 0 (or "off") prints nothing while Tuners run.
PROGRESS_ENV = "SPTUNE_PROGRESS_SECONDS"
DEFAULT_SECONDS = 20.0  # a 2-core terminal stays readable, and printing costs nothing measurable
TABLE_ROWS = 8  # Tune's trial table, best first: the per-variant lines carry the totals


def report_seconds() -> float:
    raw = os.environ.get(PROGRESS_ENV, "").strip().lower()
    if raw in ("off", "none", "false"):
        return 0.0
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_SECONDS
    except ValueError:
        return DEFAULT_SECONDS


def use_tune_reporter() -> None:
    """Ray >= 2.7 defaults to its new output engine, which ignores a RunConfig's progress_reporter
    (it warns and prints its own table); the reporter below needs the classic engine. Only the
    driver reads this, when the Tuner starts, so setting it here reaches every Tuner."""
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"


@dataclass(frozen=True)
class ProgressRow:
    """One line of the report: a variant's (or a stage's) trials, found by their config's `key`."""

    name: str
    planned: int
    epochs: int
    metric: str | None = None  # None: the Tuner's
    mode: str | None = None
    key: str = "variant"  # "stage" in a study's one Tuner (pretraining and re-runs share variant names)


class VariantProgress(CLIReporter):
    """CLIReporter with a per-variant summary above its status header and trial table."""

    def __init__(self, stage: str, rows: list[ProgressRow], metric: str, mode: str, every_s: float) -> None:
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
        self.stage, self.rows = stage, rows
        self.ranked_by, self.ranked_mode = metric, mode

    def _progress_str(self, trials: list, done: bool, *sys_info: str, fmt: str = "psql", delim: str = "\n") -> str:
        per = "stage" if any(row.key == "stage" for row in self.rows) else "variant"
        lines = [f"== sptune {self.stage}: per {per} ({'finished' if done else 'running'}) =="]
        lines += [self.variant_line(row, [t for t in trials if t.config.get(row.key) == row.name]) for row in self.rows]
        return delim.join(lines) + delim + super()._progress_str(trials, done, *sys_info, fmt=fmt, delim=delim)

    def variant_line(self, row: ProgressRow, trials: list) -> str:
        ranked_by, mode = row.metric or self.ranked_by, row.mode or self.ranked_mode
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


def run_config_progress(stage: str, rows: list[ProgressRow], metric: str, mode: str) -> dict[str, Any]:
    """RunConfig keywords: the reporter and the verbosity it needs, or silence when switched off."""
    every = report_seconds()
    if every <= 0:
        return {"verbose": 0}
    use_tune_reporter()
    return {"verbose": 1, "progress_reporter": VariantProgress(stage, rows, metric, mode, every)}
