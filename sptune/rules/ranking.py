"""One rule for "better", used for epochs within a trial and for trials within a search, so the
epoch a trial logs as its best, the checkpoint Ray keeps, the trial the search selects and the
checkpoint tested are always the same one.

Finetuning: higher validation accuracy, then lower validation loss, then the earlier epoch, then
the lower trial index. Pretraining: lower validation loss, then the earlier epoch, then the lower
trial index. Earlier wins a tie because a later epoch with the same numbers adds nothing but
compute, and the lower trial index because it does not depend on which trial finished first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

RankKey = tuple[float, ...]
TIE_RULE = "higher val_acc, then lower val_loss, then the earlier epoch, then the lower trial index"


def _number(value: Any, worst: float) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return worst


def rank_key(metrics: Mapping[str, Any], metric: str, trial_index: int = 0) -> RankKey:
    """Smaller is better. ``metric`` is the phase's score: "val_acc" (higher is better) or
    "val_loss" (lower is better); missing or non-finite numbers rank last."""
    loss = _number(metrics.get("val_loss"), math.inf)
    epoch = _number(metrics.get("epoch", metrics.get("training_iteration")), math.inf)
    if metric == "val_acc":
        return (-_number(metrics.get("val_acc"), -math.inf), loss, epoch, float(trial_index))
    if metric == "val_loss":
        return (loss, epoch, float(trial_index))
    raise ValueError(f"no ranking rule for metric {metric!r}")


def creation_index(experiment_tag: str | None) -> int:
    """The order in which the Tuner created a trial: its experiment tag starts with it
    ("3_lr=0.001,..."). Within a variant this is its own searcher's order, whatever the timing."""
    head = str(experiment_tag or "").split("_", 1)[0]
    return int(head) if head.isdigit() else 0
