"""sptune.tuning.outcomes: what selection reads of an ended Tune trial, from the trial as Tune's controller holds it
(its config, last result, status and error, and Ray's own checkpoint manager with the checkpoints it kept).
Checkpoints under a remote --storage: tests/e2e/test_storage_s3.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from ray.train import Checkpoint, CheckpointConfig
from ray.train._internal.checkpoint_manager import _CheckpointManager
from ray.train._internal.session import _TrainingResult

from sptune.tuning.outcomes import outcome_of
from sptune.tuning.trainable import CHECKPOINT_RANK


def _trial(tmp_path: Path, ranks: list[int], status: str = "TERMINATED", error=None, failures=None, gone=False):
    """A trial that kept one checkpoint per epoch, ranked as the study ranks them (tuner._run_config)."""
    manager = _CheckpointManager(CheckpointConfig(num_to_keep=None, checkpoint_score_attribute=CHECKPOINT_RANK,
                                                  checkpoint_score_order="max"))
    for epoch, rank in enumerate(ranks, 1):
        folder = tmp_path / f"checkpoint_{epoch:06d}"
        folder.mkdir()
        manager.register_checkpoint(_TrainingResult(Checkpoint.from_directory(str(folder)),
                                                    {"epoch": epoch, CHECKPOINT_RANK: rank}))

    def get_error():  # Tune reads the error back from the trial's folder
        if gone:
            raise FileNotFoundError("error.pkl")
        return error

    trial = SimpleNamespace(status=status, get_error=get_error, config={"lr": 0.01, "stage": "search-spt"},
                            last_result={"epoch": len(ranks), "val_acc": 0.5}, path=str(tmp_path), storage=object(),
                            run_metadata=SimpleNamespace(checkpoint_manager=manager))
    if failures is not None:
        trial.num_failures = failures
    return trial


def test_a_finished_trial_gives_its_config_result_and_every_kept_checkpoint(tmp_path):
    outcome = outcome_of(_trial(tmp_path, ranks=[1, 3, 2], failures=2))
    assert outcome.config == {"lr": 0.01, "stage": "search-spt"} and outcome.metrics == {"epoch": 3, "val_acc": 0.5}
    assert outcome.error is None and outcome.path == str(tmp_path) and outcome.failures == 2
    kept = {Path(c.path).name: m["epoch"] for c, m in outcome.best_checkpoints}
    assert kept == {"checkpoint_000001": 1, "checkpoint_000002": 2, "checkpoint_000003": 3}  # local paths, as kept


def test_a_failed_trial_says_why_even_when_its_error_file_is_gone(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    assert outcome_of(_trial(tmp_path / "a", [1], "ERROR", error=RuntimeError("NaN loss"))).error == "NaN loss"
    assert outcome_of(_trial(tmp_path / "b", [1], "ERROR", gone=True)).error == (
        "the trial failed")
    assert outcome_of(_trial(tmp_path / "c", [1], "ERROR", error=None)).error == "the trial failed"


def test_a_trial_tune_never_stored_has_no_path_and_counts_no_failure_it_does_not_know(tmp_path):
    trial = _trial(tmp_path, ranks=[])
    trial.storage = None
    outcome = outcome_of(trial)
    assert outcome.path == "" and outcome.best_checkpoints == [] and outcome.failures == 0
