"""What selection needs of an ended Tune trial (`sptune.judging.selection.TrialOutcome`), read by the driver while
the study's one Tuner runs on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sptune import storage as stored
from sptune.judging.selection import TrialOutcome
from sptune.tuning.packs.membership import without_pack


@dataclass(frozen=True)
class StoredCheckpoint:
    """A kept checkpoint as selection records it: a local path, or a URI under a remote --storage
    (Ray's own Checkpoint.path drops the scheme and the endpoint options)."""

    path: str


def outcome_of(trial: Any, storage: str | None = None) -> TrialOutcome:
    """What selection needs of an ended Tune trial (as `ResultGrid` would give it, read while it runs);
    `storage`: the study's --storage, whose URI every kept checkpoint's path is given under."""
    error = None
    if trial.status == "ERROR":
        try:
            error = str(trial.get_error() or "the trial failed")
        except Exception:  # the error file went missing: the trial still failed
            error = "the trial failed"
    kept = trial.run_metadata.checkpoint_manager.best_checkpoint_results
    return TrialOutcome(
        config=without_pack(dict(trial.config)),  # a member's record is the unpacked trial's
        metrics=dict(trial.last_result or {}),
        error=error,
        path=str(trial.path) if trial.storage is not None else "",
        best_checkpoints=[(_located(k.checkpoint, storage), dict(k.metrics)) for k in kept],
        # Tune's own count: every failure it retried from the last checkpoint, and the last one if it gave up.
        failures=int(getattr(trial, "num_failures", 0) or 0),
    )


def _located(checkpoint: Any, storage: str | None) -> Any:
    if not stored.is_remote(storage):
        return checkpoint
    return StoredCheckpoint(stored.checkpoint_uri(storage, checkpoint.path))
