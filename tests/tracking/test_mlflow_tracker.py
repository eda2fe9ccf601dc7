"""TrialRunLogger batches its MLflow writes: every epoch of every trial still reaches MLflow,
when a trial fails, and when the study is interrupted mid-way (real Ray Tune, real SQLite store)."""

from __future__ import annotations

import os
import pickle
import signal
from types import SimpleNamespace
from typing import Any

from mlflow.tracking import MlflowClient
from ray import tune

from sptune.tracking.epoch_record import EPOCH_METRICS, REPLAY_KEY, encode
from sptune.tracking.mlflow_tracker import Tracker, TrialRunLogger

EPOCHS = 6


def _trainable(fail_lr: float | None = None, slow_after: int | None = None) -> type:
    """A Trainable reporting sptune's per-epoch keys; one config may fail at epoch 3."""

    class Reporter(tune.Trainable):
        def setup(self, config: dict) -> None:
            self.lr, self.epoch = float(config["lr"]), 0

        def reset_config(self, new_config: dict) -> bool:
            self.setup(new_config)  # a reused actor starts the next trial afresh
            return True

        def save_checkpoint(self, checkpoint_dir: str) -> None:
            pass  # nothing to keep: the epoch counter restarts with the trial

        def load_checkpoint(self, checkpoint: Any) -> None:
            pass

        def step(self) -> dict:
            import time

            self.epoch += 1
            if fail_lr is not None and self.lr == fail_lr and self.epoch == 3:
                raise RuntimeError("this trial fails at epoch 3")
            if slow_after is not None and self.epoch > slow_after:
                time.sleep(5)  # the study is interrupted while these run
            acc = self.epoch / 10 + self.lr
            return {
                "epoch": self.epoch,
                "loss": 1 / self.epoch,
                "val_acc": acc,
                "val_loss": 1 - acc,
                "lr": self.lr,
                "best_val_acc": acc,
                "best_epoch": self.epoch,
                "diverged": 0,
            }

    return Reporter


class Counter(tune.Callback):
    """The results Tune delivered to the driver (what MLflow must end up holding)."""

    def __init__(self, interrupt_after: int | None = None) -> None:
        self.results: dict[str, int] = {}
        self.interrupt_after = interrupt_after

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        self.results[trial.config["lr"]] = self.results.get(trial.config["lr"], 0) + 1
        if self.interrupt_after is not None and sum(self.results.values()) == self.interrupt_after:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl+C: Tune's own handler ends the run


def _run(tmp_path, trainable: type, lrs: list[float], counter: Counter) -> tuple[MlflowClient, Tracker]:
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "batched", tmp_path)
    tracker.start_parent("study", {})
    # Nothing flushes on its own here: every write comes from a trial ending or the study ending.
    logger = TrialRunLogger(tracker, {"scratch": {"task": "digits"}}, flush_results=10**9, flush_seconds=1e9)
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 0.5}),
        param_space={"lr": tune.grid_search(lrs), "phase": "search", "variant": "scratch"},
        tune_config=tune.TuneConfig(max_concurrent_trials=2, reuse_actors=True),
        run_config=tune.RunConfig(
            storage_path=str(tmp_path / "ray"),
            name="t",
            callbacks=[counter, logger],
            stop={"training_iteration": EPOCHS},
            verbose=0,
        ),
    )
    tuner.fit()
    return tracker.client, tracker


def _runs(client: MlflowClient, tracker: Tracker) -> dict[float, Any]:
    runs = client.search_runs([tracker.experiment_id], f"tags.mlflow.parentRunId = '{tracker.parent_run_id}'")
    return {float(r.data.params["lr"]): r for r in runs}


def _steps(client: MlflowClient, run: Any, key: str) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run.info.run_id, key))


def test_every_epoch_reaches_mlflow_with_batching_and_a_failed_trial_keeps_its_epochs(ray_session, tmp_path):
    lrs = [0.001, 0.002, 0.003]
    counter = Counter()
    client, tracker = _run(tmp_path, _trainable(fail_lr=0.002), lrs, counter)
    runs = _runs(client, tracker)
    assert sorted(runs) == lrs
    for lr in (0.001, 0.003):
        run = runs[lr]
        assert run.info.status == "FINISHED" and run.data.tags["sptune.status"] == "finished"
        for key in ("loss", "val_acc", "val_loss", "lr"):
            assert _steps(client, run, key) == list(range(1, EPOCHS + 1)), key
        # best_val_acc: every epoch, and once more at step 0 as the run's summary
        assert _steps(client, run, "best_val_acc") == list(range(EPOCHS + 1))
        assert run.data.metrics["best_epoch"] == EPOCHS  # the summary at the run's end
    failed = runs[0.002]
    assert failed.info.status == "FAILED" and failed.data.tags["sptune.status"] == "failed"
    assert _steps(client, failed, "val_acc") == [1, 2]  # what it reported before it raised
    assert {"loss", "val_acc"} <= set(EPOCH_METRICS)


def test_an_interrupted_study_flushes_every_result_it_had(ray_session, tmp_path):
    lrs = [0.001, 0.002, 0.003, 0.004]
    counter = Counter(interrupt_after=5)
    client, tracker = _run(tmp_path, _trainable(slow_after=2), lrs, counter)
    runs = _runs(client, tracker)
    delivered = counter.results
    assert sum(delivered.values()) >= 5 and len(delivered) < len(lrs)  # interrupted before the end
    for lr, n in delivered.items():
        run = runs[float(lr)]
        assert run.info.status == "RUNNING"  # unfinished: --resume continues it
        assert _steps(client, run, "val_acc") == list(range(1, n + 1))
        assert _steps(client, run, "loss") == list(range(1, n + 1))


# The replay a trial restored from its epoch-2 checkpoint carries in its first result (tracking.epoch_record).
REPLAY_1_2 = encode([{"epoch": 1, "loss": 1.0, "val_acc": 0.1}, {"epoch": 2, "loss": 0.5, "val_acc": 0.2}])


def _one_trial(tmp_path, name: str) -> tuple[Tracker, SimpleNamespace]:
    """A study's parent run in a fresh SQLite store, and one search trial to log under it."""
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", name, tmp_path)
    tracker.start_parent("study", {})
    return tracker, SimpleNamespace(trial_id="t_1", config={"lr": 0.01, "phase": "search", "variant": "scratch"})


def _child(tracker: Tracker) -> Any:
    (run,) = tracker.client.search_runs([tracker.experiment_id], f"tags.mlflow.parentRunId = '{tracker.parent_run_id}'")
    return run


def _losses(tracker: Tracker, run: Any) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in tracker.client.get_metric_history(run.info.run_id, "loss"))


def test_a_resumed_trial_adds_only_the_epochs_its_run_lacks(tmp_path):
    """After a driver dies, the resumed trial restarts from the checkpoint the last snapshot named and
    reports the epochs since then again; its run keeps one point per epoch, and gets its params even
    if the old driver died before writing them."""
    tracker, trial = _one_trial(tmp_path, "resume")
    first = TrialRunLogger(tracker, {"scratch": {"task": "digits"}})
    saved = pickle.dumps(first)  # what tuner.pkl holds: the logger as the Tuner was built
    for epoch in (1, 2, 3):
        first.on_trial_result(0, [trial], trial, {"epoch": epoch, "loss": 1 / epoch})
    first.flush()  # the old driver wrote epochs 1-3, then died without closing the run

    resumed = pickle.loads(saved)
    resumed.setup()
    for epoch in (2, 3, 4, 5):  # restored from its epoch-1 checkpoint
        resumed.on_trial_result(0, [trial], trial, {"epoch": epoch, "loss": 1 / epoch + 0.5})
    resumed.on_trial_complete(0, [trial], trial)

    run = _child(tracker)
    assert _steps(tracker.client, run, "loss") == [1, 2, 3, 4, 5]
    assert run.data.params["lr"] == "0.01" and run.data.params["task"] == "digits"
    assert run.info.status == "FINISHED"


def test_a_restored_trials_replayed_epochs_fill_the_writes_a_stopped_driver_lost(tmp_path):
    """A full disk stops the driver before its batched writes reach MLflow; the trial resumes from its
    epoch-2 checkpoint, whose first result replays epochs 1-2: the run ends with every epoch once."""
    tracker, trial = _one_trial(tmp_path, "lost")
    first = TrialRunLogger(tracker, {})
    saved = pickle.dumps(first)
    first.on_trial_start(0, [trial], trial)
    first.flush()  # the run exists; epochs 1-2 waited in the batch when the driver stopped

    resumed = pickle.loads(saved)
    resumed.setup()
    resumed.on_trial_result(0, [trial], trial, {"epoch": 3, "loss": 0.25, "val_acc": 0.3, REPLAY_KEY: REPLAY_1_2})
    resumed.on_trial_result(0, [trial], trial, {"epoch": 4, "loss": 0.125, "val_acc": 0.4})
    resumed.on_trial_complete(0, [trial], trial)

    run = _child(tracker)
    assert _losses(tracker, run) == [(1, 1.0), (2, 0.5), (3, 0.25), (4, 0.125)]
    assert _steps(tracker.client, run, "val_acc") == [1, 2, 3, 4]


def test_a_trial_recovered_within_one_driver_replays_epochs_its_run_already_has_without_logging_them_twice(tmp_path):
    """A trial fails after epoch 3 and Tune restores it, in the same driver, from its epoch-2 checkpoint: its first
    result replays epochs 1-2 (already logged) and re-reports epoch 3; the run keeps each epoch once, epoch 3 with
    the value the driver logged first."""
    tracker, trial = _one_trial(tmp_path, "recovered")
    logger = TrialRunLogger(tracker, {})
    logger.on_trial_start(0, [trial], trial)
    for epoch in (1, 2, 3):
        logger.on_trial_result(0, [trial], trial, {"epoch": epoch, "loss": 1.0 / epoch, "val_acc": 0.1 * epoch})
    logger.flush()
    logger.on_trial_result(0, [trial], trial, {"epoch": 3, "loss": 0.3, "val_acc": 0.3, REPLAY_KEY: REPLAY_1_2})
    logger.on_trial_result(0, [trial], trial, {"epoch": 4, "loss": 0.25, "val_acc": 0.4})
    logger.on_trial_complete(0, [trial], trial)

    run = _child(tracker)
    assert _losses(tracker, run) == [(1, 1.0), (2, 0.5), (3, 1.0 / 3), (4, 0.25)]
    assert _steps(tracker.client, run, "val_acc") == [1, 2, 3, 4]


def test_a_driver_restored_from_a_logger_pickled_after_its_trial_started_asks_mlflow_what_the_run_holds(tmp_path):
    """The pickled logger already maps the trial to its run (Tune saved it mid-trial): the resumed driver still
    reads the run's epochs from MLflow before writing the replay, so epoch 1, flushed before the stop, stays once."""
    tracker, trial = _one_trial(tmp_path, "pickled")
    first = TrialRunLogger(tracker, {})
    first.on_trial_start(0, [trial], trial)
    first.on_trial_result(0, [trial], trial, {"epoch": 1, "loss": 1.0, "val_acc": 0.1})
    first.flush()
    resumed = pickle.loads(pickle.dumps(first))
    resumed.setup()
    resumed.on_trial_start(0, [trial], trial)
    resumed.on_trial_result(0, [trial], trial, {"epoch": 3, "loss": 0.25, "val_acc": 0.3, REPLAY_KEY: REPLAY_1_2})
    resumed.on_trial_complete(0, [trial], trial)

    assert _steps(tracker.client, _child(tracker), "loss") == [1, 2, 3]
