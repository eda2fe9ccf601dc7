"""sptune.tuning.callbacks.checkpoint_pruning: which checkpoints a trial keeps once Tune no longer deletes any.

Each test drives the callback as Tune's controller does (`on_checkpoint`, then the trial's real
`_CheckpointManager` registers the checkpoint; `get_state` on every snapshot) over real checkpoint
folders on disk. The trial is the part of Tune's Trial the callback reads: its id, its last result
and its run metadata's checkpoint manager, which is Ray's own.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from ray.train import Checkpoint, CheckpointConfig
from ray.train._internal.checkpoint_manager import _CheckpointManager
from ray.train._internal.session import _TrainingResult

from sptune.tuning.callbacks.checkpoint_pruning import CheckpointPruner
from sptune.tuning.trainable import CHECKPOINT_RANK


def _trial(trial_id: str = "t1") -> SimpleNamespace:
    # The study's CheckpointConfig (sptune.tuning.tuner._run_config): keep everything, order by the rank.
    config = CheckpointConfig(
        num_to_keep=None, checkpoint_score_attribute=CHECKPOINT_RANK, checkpoint_score_order="max"
    )
    manager = _CheckpointManager(config)
    return SimpleNamespace(trial_id=trial_id, last_result={}, run_metadata=SimpleNamespace(checkpoint_manager=manager))


def _epoch(pruner: CheckpointPruner, trial: SimpleNamespace, folder: Path, epoch: int, rank: int) -> str:
    """One reported epoch and its checkpoint, in the order Tune's controller handles them."""
    path = folder / trial.trial_id / f"checkpoint_{epoch:06d}"
    path.mkdir(parents=True)
    (path / "state.pt").write_text(str(epoch))
    trial.last_result = {"epoch": epoch, CHECKPOINT_RANK: rank}
    checkpoint = Checkpoint.from_directory(str(path))
    pruner.on_checkpoint(iteration=epoch, trials=[trial], trial=trial, checkpoint=checkpoint)
    trial.run_metadata.checkpoint_manager.register_checkpoint(_TrainingResult(checkpoint, dict(trial.last_result)))
    return str(path)


def _on_disk(folder: Path, trial_id: str = "t1") -> list[int]:
    return sorted(int(p.name.split("_")[1]) for p in (folder / trial_id).glob("checkpoint_*"))


def _listed(trial: SimpleNamespace) -> list[int]:
    """The epochs of the checkpoints Tune lists for the trial (Result.best_checkpoints)."""
    return sorted(int(r.metrics["epoch"]) for r in trial.run_metadata.checkpoint_manager.best_checkpoint_results)


class Bundle:
    """SnapshotBundle's count of snapshots written (a test writes none: it says when one was)."""

    written = 0


def test_a_trial_keeps_its_best_and_its_latest_checkpoint_and_tune_lists_only_those(tmp_path):
    pruner, trial = CheckpointPruner(Bundle()), _trial()
    # ranks as StudyTrainable reports them: improvements count up, other epochs rank 0
    for epoch, rank in enumerate([1, 2, 0, 3, 0, 0], start=1):
        _epoch(pruner, trial, tmp_path, epoch, rank)
    assert _on_disk(tmp_path) == [4, 6]  # epoch 4 (the last improvement) and the latest
    assert _listed(trial) == [4, 6]
    best = trial.run_metadata.checkpoint_manager.best_checkpoint_result
    assert best.metrics["epoch"] == 4


def test_equal_ranks_keep_the_earliest_as_selection_does(tmp_path):
    """A trial that never improved (every epoch ranks 0: it diverged at once) keeps its first epoch,
    the one sptune.judging.selection's rule (earliest of equals) would name."""
    pruner, trial = CheckpointPruner(Bundle()), _trial()
    for epoch in range(1, 5):
        _epoch(pruner, trial, tmp_path, epoch, 0)
    assert _on_disk(tmp_path) == [1, 4]


def test_the_checkpoint_a_written_snapshot_names_stays_until_a_newer_snapshot_names_another(tmp_path):
    bundle = Bundle()
    pruner, trial = CheckpointPruner(bundle), _trial()
    _epoch(pruner, trial, tmp_path, 1, 1)
    _epoch(pruner, trial, tmp_path, 2, 2)
    _epoch(pruner, trial, tmp_path, 3, 0)
    bundle.written = 1
    pruner.get_state()  # a resume would now restore the trial from epoch 3
    _epoch(pruner, trial, tmp_path, 4, 0)
    _epoch(pruner, trial, tmp_path, 5, 0)
    assert _on_disk(tmp_path) == [2, 3, 5]  # best, named by the snapshot, latest
    pruner.get_state()  # Tune snapshots, but no bundle was written (nothing new a resume can read)
    assert _on_disk(tmp_path) == [2, 3, 5]
    bundle.written = 2
    pruner.get_state()  # the new bundle names epoch 5: epoch 3 goes without waiting for a checkpoint
    assert _on_disk(tmp_path) == [2, 5]
    assert _listed(trial) == [2, 5]


def test_without_a_bundle_the_last_two_tune_snapshots_are_honoured(tmp_path):
    """Tune copies its own snapshot to the storage in the background: the one before the newest may
    be all a resume finds."""
    pruner, trial = CheckpointPruner(), _trial()
    _epoch(pruner, trial, tmp_path, 1, 1)
    _epoch(pruner, trial, tmp_path, 2, 0)
    pruner.get_state()  # names 2
    _epoch(pruner, trial, tmp_path, 3, 0)
    pruner.get_state()  # names 3
    _epoch(pruner, trial, tmp_path, 4, 0)
    assert _on_disk(tmp_path) == [1, 2, 3, 4]
    pruner.get_state()  # names 4: epoch 2 is named by neither of the last two
    assert _on_disk(tmp_path) == [1, 3, 4]


def test_a_restored_trial_keeps_the_checkpoint_it_resumes_from(tmp_path):
    """After Tuner.restore the trial's list comes from the snapshot; its latest is what the trial
    resumed from and what the restored snapshot names, until a newer bundle is written."""
    old_driver, trial = CheckpointPruner(Bundle()), _trial()
    for epoch, rank in [(1, 1), (2, 0), (3, 0)]:
        _epoch(old_driver, trial, tmp_path, epoch, rank)
    assert _on_disk(tmp_path) == [1, 3]
    bundle = Bundle()
    new_driver = CheckpointPruner(bundle)  # a resumed driver: the same trial, a fresh callback
    _epoch(new_driver, trial, tmp_path, 4, 0)
    assert _on_disk(tmp_path) == [1, 3, 4]
    bundle.written = 1
    new_driver.get_state()
    assert _on_disk(tmp_path) == [1, 4]


def test_a_folder_already_deleted_is_no_error_and_trials_are_pruned_independently(tmp_path):
    pruner, first, second = CheckpointPruner(Bundle()), _trial("a"), _trial("b")
    _epoch(pruner, first, tmp_path, 1, 1)
    stale = _epoch(pruner, first, tmp_path, 2, 0)
    _epoch(pruner, second, tmp_path, 1, 1)
    for path in Path(stale).iterdir():
        path.unlink()
    Path(stale).rmdir()  # gone already (a driver before this one deleted it)
    _epoch(pruner, first, tmp_path, 3, 0)
    _epoch(pruner, second, tmp_path, 2, 2)
    assert _on_disk(tmp_path, "a") == [1, 3]
    assert _on_disk(tmp_path, "b") == [2]


def test_the_pruner_pickles_without_this_drivers_trials():
    """Tune pickles callbacks into tuner.pkl; a restored pruner starts with no trial of the old driver."""
    import pickle

    bundle = Bundle()
    pruner = CheckpointPruner(bundle)
    pruner._trials["x"] = object()
    restored = pickle.loads(pickle.dumps(pruner))
    assert restored._trials == {} and isinstance(restored.snapshots, Bundle)


def test_a_pruning_failure_never_reaches_tune(tmp_path, caplog):
    """Tune registers a checkpoint only after every callback's on_checkpoint returns, and fails its
    snapshot if get_state raises: the pruner logs its own errors and lets both go on."""
    pruner = CheckpointPruner()
    broken = SimpleNamespace(trial_id="x", last_result={}, run_metadata=None)  # no checkpoint manager
    checkpoint = Checkpoint.from_directory(str(tmp_path))
    pruner.on_checkpoint(iteration=1, trials=[broken], trial=broken, checkpoint=checkpoint)
    pruner._trials["x"], pruner._holding = broken, {"x"}
    assert pruner.get_state() is None
    assert "could not prune" in caplog.text
