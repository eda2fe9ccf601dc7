"""Which trial checkpoints a study keeps, decided by sptune instead of Tune's `num_to_keep` (why:
docs/design/tuning.md). Tune keeps every checkpoint as far as it knows, and as each one arrives this
callback deletes every checkpoint of the trial that nothing can need. A trial keeps:

- its best checkpoint: the highest `checkpoint_rank` (the trial's last improvement, the epoch selection
  picks; the earliest of equal ranks, as selection's rule does);
- its latest checkpoint (what a paused, failed or moved trial resumes from);
- the checkpoint that was its latest in the snapshot a resume would read. With `SnapshotBundle` (the
  study's) that snapshot is the bundle, written whole and atomically in the driver step it was taken;
  without one, Tune copies its snapshots to the storage in the background, so the latest checkpoints of
  its last two snapshots are kept.

A deleted checkpoint also leaves Tune's list of the trial's checkpoints, as with Tune's own `num_to_keep`,
so `Result.best_checkpoints` (what selection reads) never names a deleted folder.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from ray import tune

from sptune.tuning.trainable import CHECKPOINT_RANK

log = logging.getLogger(__name__)


class CheckpointPruner(tune.Callback):
    """Deletes a trial's checkpoints that are neither its best, nor its latest, nor named by the
    snapshot a resume reads. `snapshots`: the study's SnapshotBundle (its `written` count says when a
    resumable snapshot was committed), or None for a Tuner without one."""

    def __init__(self, snapshots: Any = None) -> None:
        self.snapshots = snapshots
        self._forget()

    def _forget(self) -> None:
        self._trials: dict[str, Any] = {}  # trial id -> this driver's Trial
        self._named: list[dict[str, str]] = []  # per kept snapshot: trial id -> latest checkpoint it names
        self._bundles_seen = 0
        self._holding: set[str] = set()  # trials with a checkpoint kept only because a snapshot names it

    def __getstate__(self) -> dict:
        return {"snapshots": self.snapshots}  # the rest is this driver's; a restored Tuner rebuilds it

    def __setstate__(self, state: dict) -> None:
        self.snapshots = state["snapshots"]
        self._forget()

    # ------------------------------------------------------------------ Tune's hooks

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info: Any) -> None:
        """Tune calls this just before it registers `checkpoint` as the trial's latest; the trial's last
        result is the epoch the checkpoint holds."""
        # Tune registers the checkpoint only if every callback returns: pruning never stops that.
        try:
            if trial.trial_id not in self._trials:
                self._first_sight(trial)
            self._prune(trial, incoming_rank=_rank((trial.last_result or {}).get(CHECKPOINT_RANK)))
        except Exception:  # a bug here costs disk space, never a checkpoint
            log.exception("could not prune the checkpoints of trial %s", trial.trial_id)

    def get_state(self) -> None:
        """Tune asks every callback for its state while it writes a snapshot, after the trial list, and
        after SnapshotBundle (listed before this callback) has zipped it."""
        if self.snapshots is not None:
            written = int(getattr(self.snapshots, "written", 0))
            if written == self._bundles_seen:
                return None  # no new resumable snapshot: what the last one named stays kept
            self._bundles_seen, keep = written, 1
        else:
            keep = 2  # Tune's own snapshot reaches the storage in the background: keep the one before too
        try:  # an exception here would fail Tune's snapshot, and with it the study
            self._named = [self._latest_paths(), *self._named][:keep]
            for trial_id in list(self._holding):
                self._prune(self._trials[trial_id])
        except Exception:
            log.exception("could not prune checkpoints kept for an older snapshot")
        return None

    # ------------------------------------------------------------------ the rule

    def _first_sight(self, trial: Any) -> None:
        """A trial new to this driver; a restored one resumes from the latest checkpoint its snapshot
        named, so that one stays kept until a newer snapshot names another."""
        self._trials[trial.trial_id] = trial
        latest = _manager(trial).latest_checkpoint_result
        if latest is not None:
            self._named = self._named or [{}]
            self._named[0].setdefault(trial.trial_id, latest.checkpoint.path)

    def _latest_paths(self) -> dict[str, str]:
        paths = {}
        for trial_id, trial in self._trials.items():
            latest = _manager(trial).latest_checkpoint_result
            if latest is not None:
                paths[trial_id] = latest.checkpoint.path
        return paths

    def _prune(self, trial: Any, incoming_rank: float | None = None) -> None:
        """Delete what the trial no longer needs. `incoming_rank`: the rank of a checkpoint about to be
        registered, which becomes the latest (and the best if it ranks above every kept one)."""
        manager = _manager(trial)
        kept = list(manager.best_checkpoint_results)  # Tune's order: worst to best, equal ranks oldest first
        if not kept:
            return
        ranks = [_rank(r.metrics.get(CHECKPOINT_RANK)) for r in kept]
        top = max(ranks)
        named = {n[trial.trial_id] for n in self._named if trial.trial_id in n}  # by a resumable snapshot
        own = set()  # the best and the latest
        if incoming_rank is None or incoming_rank <= top:
            own.add(kept[ranks.index(top)].checkpoint.path)
        if incoming_rank is None and manager.latest_checkpoint_result is not None:
            own.add(manager.latest_checkpoint_result.checkpoint.path)
        doomed = [r for r in kept if r.checkpoint.path not in own | named]
        # Kept only for a snapshot: the next snapshot (get_state) deletes it, even if the trial has ended.
        if any(r.checkpoint.path in named - own for r in kept):
            self._holding.add(trial.trial_id)
        else:
            self._holding.discard(trial.trial_id)
        if doomed:
            _forget_in_tune(manager, doomed)
            for result in doomed:
                _delete(result.checkpoint)


def _manager(trial: Any) -> Any:
    return trial.run_metadata.checkpoint_manager


def _rank(value: Any) -> float:
    try:
        rank = float(value)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if math.isnan(rank) else rank


def _forget_in_tune(manager: Any, doomed: list) -> None:
    """Drop deleted checkpoints from Tune's list of the trial's checkpoints, as Tune's own num_to_keep
    does before it deletes: Result.best_checkpoints and the snapshots then name only folders that exist."""
    if hasattr(manager, "_checkpoint_results"):
        gone = {r.checkpoint.path for r in doomed}
        manager._checkpoint_results = [r for r in manager._checkpoint_results if r.checkpoint.path not in gone]


def _delete(checkpoint: Any) -> None:
    try:
        checkpoint.filesystem.delete_dir(checkpoint.path)
    except FileNotFoundError:
        pass  # already gone: a restored trial's list can name folders a driver before this one deleted
    except OSError as err:  # a storage hiccup costs disk space, never the study
        log.warning("could not delete the superseded checkpoint %s: %s", checkpoint.path, err)
