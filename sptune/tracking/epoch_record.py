"""Each trial's per-epoch numbers, as MLflow's time series holds them, and the copy a checkpoint carries.

A checkpoint keeps its trial's epochs so far: a write to MLflow that failed before the study stopped (a full
disk, a killed driver) is lost with the driver's memory, while the trial resumes from its checkpoint and reports
only the epochs after it. Its first result after a restore carries the saved epochs (`REPLAY_KEY`, a JSON string
every Tune logger takes), and the driver writes those its run lacks. No MLflow import: trial workers read this.
"""

from __future__ import annotations

import json
import math
from typing import Any

# Numeric results worth a time series; Ray's bookkeeping fields are left out.
EPOCH_METRICS = (
    "loss",
    "train_acc_running",
    "train_masked_acc",
    "lr",
    "grad_norm",
    "val_acc",
    "val_loss",
    "val_masked_acc",
    "epoch_seconds",
    "tokens_seen",
    "best_val_acc",
    "best_val_loss",
    "trainable_params",
    "total_params",
)
REPLAY_KEY = "replayed_epochs"


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def epoch_row(result: dict) -> dict[str, float]:
    """The numbers of one result MLflow keeps as the epoch's points, with the epoch itself."""
    row = {k: float(result[k]) for k in EPOCH_METRICS if finite(result.get(k))}
    return {**row, "epoch": int(result.get("epoch", result.get("training_iteration", 0)))}


def encode(rows: list[dict[str, float]]) -> str:
    return json.dumps(rows)


def decode(result: dict) -> list[dict[str, float]]:
    """The epochs a restored trial's first result replays (none in any other result)."""
    return json.loads(result[REPLAY_KEY]) if result.get(REPLAY_KEY) else []
