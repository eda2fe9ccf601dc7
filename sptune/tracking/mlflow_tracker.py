"""MLflow bookkeeping, written from the driver only (one writer, works across nodes).

One parent run per study; one nested child run per trial (tag ``mlflow.parentRunId``),
created and fed by a Ray Tune callback that runs in the driver process.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient
from ray import tune

from sptune.errors import RuntimeFailure
from sptune.storage import moves, relocated
from sptune.tracking.epoch_record import decode, epoch_row, finite
from sptune.tracking.mlflow_db import follow_folder_moves, seed_new_store

# MLflow 3 opens experiments in its GenAI view unless told this is model training.
EXPERIMENT_KIND_TAG = ("mlflow.experimentKind", "custom_model_development")
TRIAL_TAG = "sptune.trial_id"
STAGE_TAG = "stage"  # pretrain / search / rerun: a short name, as it heads its column in the UI
# The config key of a packed trial's pack (sptune.tuning.packs.membership.PACK_KEY, which imports from here
# would invert the layers): logged as the tag PACK_TAG, not as a param.
PACK_CONFIG_KEY = "pack"
PACK_TAG = "sptune.pack"
# The runs table as sptune opens it: MLflow's UI loads a "shared view" (its Share button writes
# the same experiment tag) named in the URL's viewStateShareKey, with these columns selected.
VIEW_KEY = "sptune"
VIEW_COLUMNS = (
    "params.`variant`",
    f"tags.`{STAGE_TAG}`",
    "params.`lr`",
    "params.`batch_size`",
    "metrics.`best_val_acc`",
    "metrics.`test_acc`",
)


def runs_url(base_url: str, experiment_id: str) -> str:
    """The experiment's runs table in MLflow's model-training view (not the GenAI overview),
    with sptune's columns (the experiment's shared view, see runs_view)."""
    query = f"workflowType=machine_learning&viewStateShareKey={VIEW_KEY}"
    return f"{base_url.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def runs_view() -> str:
    """The shared view's state: MLflow's UI reads the selected columns and the search facets from it."""
    return json.dumps(
        {
            "selectedColumns": list(VIEW_COLUMNS),
            "searchFilter": "",
            "orderByKey": "attributes.start_time",
            "orderByAsc": False,
        }
    )


def ui_command(tracking_uri: str, output_dir: Path, experiment_id: str) -> str:
    if tracking_uri.startswith("http"):
        return f"open {runs_url(tracking_uri, experiment_id)}"
    artifacts = (output_dir / "mlartifacts").resolve()
    return (
        f"mlflow ui --backend-store-uri {tracking_uri} --default-artifact-root {artifacts} "
        f"--host 127.0.0.1 --port 5000\n  then open {runs_url('http://127.0.0.1:5000', experiment_id)}"
    )


class Tracker:
    """The study's MLflow experiment and parent run."""

    def __init__(
        self, tracking_uri: str, experiment: str, output_dir: Path, artifact_root: str | None = None
    ) -> None:
        """`artifact_root`: where a new experiment keeps its artifacts (a remote --storage's
        STORAGE/mlflow-artifacts); None: OUTPUT/mlartifacts for a SQLite store, the server's choice else."""
        self.uri = tracking_uri
        seed_new_store(tracking_uri, output_dir / "mlartifacts")  # a new SQLite store without its migrations
        follow_folder_moves(tracking_uri, moves())  # a copied study folder's store: artifacts in the copy
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.experiment_id = self._experiment(experiment, output_dir, artifact_root)
        self.parent_run_id: str | None = None

    @classmethod
    def attach(cls, uri: str, experiment_id: str, parent_run_id: str | None) -> Tracker:
        """A Tracker for an existing experiment and parent run (no lookups, no creation)."""
        tracker = cls.__new__(cls)
        # Pickled by a driver whose study folder has since moved: its SQLite store moved with it.
        tracker.uri, tracker.experiment_id, tracker.parent_run_id = relocated(uri), experiment_id, parent_run_id
        tracker.client = MlflowClient(tracking_uri=tracker.uri)
        return tracker

    def _experiment(self, name: str, output_dir: Path, artifact_root: str | None = None) -> str:
        try:
            found = self.client.get_experiment_by_name(name)
        except Exception as err:  # connection refused, bad URI, ...
            raise RuntimeFailure(
                f"tracking URI {self.uri}",
                f"MLflow tracking store is not reachable ({type(err).__name__}: {str(err).splitlines()[0][:200]})",
                "start the server (mlflow server --host 127.0.0.1) or drop --tracking-uri to use the "
                "embedded SQLite store in the output directory",
            ) from err
        if found is not None:
            exp_id = found.experiment_id
        else:
            # A SQLite store defaults artifacts to ./mlruns of the current directory: pin them
            # inside the study's output directory instead. Servers manage their own artifacts.
            location = None if self.uri.startswith("http") else (output_dir / "mlartifacts").resolve().as_uri()
            location = artifact_root or location
            exp_id = self.client.create_experiment(name, artifact_location=location)
            self.client.set_experiment_tag(exp_id, *EXPERIMENT_KIND_TAG)
        # Every study sets it, so an existing experiment without the view gets it too.
        self.client.set_experiment_tag(exp_id, f"mlflow.sharedViewState.{VIEW_KEY}", runs_view())
        return exp_id

    def start_parent(
        self,
        run_name: str,
        params: dict[str, Any],
        existing_run_id: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> str:
        """The study's parent run, new or (resume) the existing one; ``tags`` are set either way, so a
        resumed study's run names the Ray job that runs it now."""
        tags = tags or {}
        if existing_run_id:
            self.client.update_run(existing_run_id, status="RUNNING")
            for key, value in tags.items():
                self.client.set_tag(existing_run_id, key, value)
            self.parent_run_id = existing_run_id
            return existing_run_id
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags={"sptune.role": "study", **tags})
        self.parent_run_id = run.info.run_id
        self.log_params(self.parent_run_id, params)
        return self.parent_run_id

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        batch = PendingWrites()
        batch.add_params(params)
        batch.write(self.client, run_id)

    def children(self) -> dict[str, str]:
        """trial id -> run id of this study's existing child runs (for resume without duplicates)."""
        runs = self.client.search_runs(
            [self.experiment_id], f"tags.mlflow.parentRunId = '{self.parent_run_id}'", max_results=5000
        )
        return {r.data.tags[TRIAL_TAG]: r.info.run_id for r in runs if TRIAL_TAG in r.data.tags}

    def finish(self, status: str = "FINISHED") -> None:
        if self.parent_run_id:
            self.client.set_terminated(self.parent_run_id, status=status)


# TrialRunLogger's write batching: at most this many results, or seconds, wait unwritten.
FLUSH_RESULTS = 500
FLUSH_SECONDS = 2.0
MAX_METRICS_PER_BATCH = 1000  # MLflow's limit for one log_batch


@dataclass
class PendingWrites:
    """What waits for one run's next write: a single log_batch carries metrics, params and tags
    (MLflow's limits per call: 1000 metrics, 100 params, 100 tags; more are split over calls)."""

    metrics: list[Metric] = field(default_factory=list)
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    def add_params(self, params: dict[str, Any]) -> None:
        self.params.update({k: str(v)[:6000] for k, v in params.items()})

    def write(self, client: MlflowClient, run_id: str) -> None:
        params = [Param(k, v) for k, v in self.params.items()]
        tags = [RunTag(k, v) for k, v in self.tags.items()]
        calls = max(-(-len(self.metrics) // MAX_METRICS_PER_BATCH), -(-len(params) // 100), -(-len(tags) // 100))
        for i in range(calls):
            client.log_batch(
                run_id,
                metrics=self.metrics[i * MAX_METRICS_PER_BATCH : (i + 1) * MAX_METRICS_PER_BATCH],
                params=params[i * 100 : (i + 1) * 100],
                tags=tags[i * 100 : (i + 1) * 100],
            )


class BatchedWrites:
    """Each run's waiting writes (one log_batch per run), flushed once `flush_results` results or `flush_seconds`
    have gathered: one write per result would make MLflow the driver's bottleneck (docs/design/tracking.md)."""

    def __init__(self, client: MlflowClient, flush_results: int, flush_seconds: float) -> None:
        self.client, self.flush_results, self.flush_seconds = client, flush_results, flush_seconds
        self.pending: dict[str, PendingWrites] = {}  # run id -> its next log_batch
        self.results = 0  # results added since the last flush
        self.last_flush = time.monotonic()

    def batch(self, run_id: str) -> PendingWrites:
        return self.pending.setdefault(run_id, PendingWrites())

    def maybe_flush(self) -> None:
        if self.results >= self.flush_results or (
            self.results and time.monotonic() - self.last_flush >= self.flush_seconds
        ):
            self.flush()

    def flush(self) -> None:
        """Write every run's waiting metrics: one log_batch per run (MLflow takes <= 1000 metrics a call)."""
        for run_id in list(self.pending):
            self.flush_run(run_id)
        self.results = 0
        self.last_flush = time.monotonic()

    def flush_run(self, run_id: str) -> None:
        batch = self.pending.pop(run_id, None)
        if batch is not None:
            batch.write(self.client, run_id)


class TrialRunLogger(tune.Callback):
    """Creates a child run per trial and logs per-epoch metrics, from the driver."""

    def __init__(
        self,
        tracker: Tracker,
        static_params: dict[str, dict[str, Any]],
        flush_results: int = FLUSH_RESULTS,
        flush_seconds: float = FLUSH_SECONDS,
    ) -> None:
        self.tracker = tracker
        self.client = tracker.client
        self.static_params = static_params  # stage or variant -> params logged on each of its trials' runs
        self.run_ids: dict[str, str] = {}
        self.last_result: dict[str, dict] = {}  # live trials only: _close drops a trial's entry
        self._known = tracker.children()
        self.flush_results, self.flush_seconds = flush_results, flush_seconds
        self.writes = BatchedWrites(self.client, flush_results, flush_seconds)
        self._logged: dict[str, set[int]] = {}  # run id of a live trial -> the epochs its run holds or will

    # Ray pickles callbacks into the Tuner's state (tuner.pkl); on Tuner.restore we get
    # this object back and must reconnect to MLflow and re-learn the existing child runs.
    def __getstate__(self) -> dict:
        # Unwritten metrics stay out: a restored copy writing them could duplicate what this one flushes;
        # a resumed trial reports again from its checkpoint instead.
        skip = ("tracker", "client", "writes", "_logged")
        state = {k: v for k, v in self.__dict__.items() if k not in skip}
        state["_tracking"] = (self.tracker.uri, self.tracker.experiment_id, self.tracker.parent_run_id)
        return state

    def __setstate__(self, state: dict) -> None:
        uri, experiment_id, parent_run_id = state.pop("_tracking")
        state.setdefault("flush_results", FLUSH_RESULTS)  # a Tuner pickled without the batching settings
        state.setdefault("flush_seconds", FLUSH_SECONDS)
        self.__dict__.update(state, _logged={})
        self.tracker = Tracker.attach(uri, experiment_id, parent_run_id)
        self.client = self.tracker.client
        self.writes = BatchedWrites(self.client, self.flush_results, self.flush_seconds)

    def setup(self, **info: Any) -> None:
        self._known = self.tracker.children()

    def run_for(self, trial: Any) -> str:
        trial_id = trial.trial_id
        if trial_id in self.run_ids:
            return self.run_ids[trial_id]
        run_id = self._known.get(trial_id)
        if run_id is None:
            # One Tuner runs several variants: each trial's config says which phase and variant it is.
            phase, variant = trial.config["phase"], trial.config["variant"]
            tags = {
                "mlflow.parentRunId": self.tracker.parent_run_id,
                TRIAL_TAG: trial_id,
                "sptune.phase": phase,
                "sptune.variant": variant,
                STAGE_TAG: phase,
            }
            if trial.config.get(PACK_CONFIG_KEY):
                slot = trial.config[PACK_CONFIG_KEY]
                tags[PACK_TAG] = f"{slot['name']}#{slot['member']}"
            name = f"{phase}-{variant}-{trial_id}"
            run = self.client.create_run(self.tracker.experiment_id, run_name=name, tags=tags)
            run_id = run.info.run_id
            self._logged[run_id] = set()
        else:
            self.client.update_run(run_id, status="RUNNING")
            self._logged_epochs(run_id)
        # Written with the run's first metrics (one log_batch); again on resume, since a driver that died
        # within FLUSH_SECONDS of creating the run never wrote them (MLflow takes an equal value twice).
        self.writes.batch(run_id).add_params(self._params(trial))
        self.run_ids[trial_id] = run_id
        return run_id

    def _logged_epochs(self, run_id: str) -> set[int]:
        """The epochs run `run_id` holds or will once flushed. A run this driver did not create (a resumed study's)
        is asked once: its trial restarts from a checkpoint and reports, or replays, epochs the run may hold
        already, and MLflow would append a second point for each."""
        if run_id not in self._logged:
            self._logged[run_id] = {m.step for m in self.client.get_metric_history(run_id, "loss")}
        return self._logged[run_id]

    def _params(self, trial: Any) -> dict[str, Any]:
        # The study's one Tuner names each trial's stage: pretrain-on-TASK and pretrain share an objective.
        variant = trial.config["variant"]
        static = self.static_params.get(trial.config.get("stage"), self.static_params.get(variant, {}))
        # A packed trial's pack is how it ran, not what it is: a tag, not a param (the unpacked study's params).
        return {**static, **{k: v for k, v in trial.config.items() if k != PACK_CONFIG_KEY}}

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.run_for(trial)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        run_id = self.run_for(trial)
        now = int(time.time() * 1000)
        batch, logged = self.writes.batch(run_id), self._logged_epochs(run_id)
        # A restored trial's first result replays its checkpoint's epochs: writes lost before a stop come back.
        for row in (*decode(result), epoch_row(result)):
            if row["epoch"] not in logged:
                logged.add(row["epoch"])
                batch.metrics.extend(Metric(k, v, now, row["epoch"]) for k, v in row.items() if k != "epoch")
        self.writes.results += 1
        if result.get("diverged"):
            batch.tags["sptune.status"] = "diverged"
        if result.get("mlflow_params"):  # one-off facts a trial reports (e.g. which parameters train)
            batch.add_params(result["mlflow_params"])
        self.last_result[trial.trial_id] = result
        self.writes.maybe_flush()

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self.writes.maybe_flush()  # every loop of Tune's controller: a quiet spell still flushes on time

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        # Tune calls this however the Tuner ends: finished, interrupted (Ctrl+C), or an error in its loop.
        self.flush()

    def flush(self) -> None:
        self.writes.flush()

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        run_id = self.run_for(trial)
        failures = int(getattr(trial, "num_failures", 0))
        self.client.set_tag(run_id, "sptune.failures", str(failures))
        self.client.set_tag(run_id, "sptune.last_error", str(getattr(trial, "error_file", ""))[:500])

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._close(trial, "FINISHED")

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        run_id = self.run_for(trial)
        self.client.set_tag(run_id, "sptune.status", "failed")
        self._close(trial, "FAILED")

    def _close(self, trial: Any, status: str) -> None:
        run_id = self.run_for(trial)
        last = self.last_result.pop(trial.trial_id, {})  # the state Tune pickles stays O(live trials)
        self._logged.pop(run_id, None)
        batch, now = self.writes.batch(run_id), int(time.time() * 1000)
        batch.metrics.extend(
            Metric(k, float(last[k]), now, 0) for k in ("best_val_acc", "best_val_loss", "best_epoch")
            if finite(last.get(k))
        )
        if last.get("diverged"):
            status = "FAILED"  # tagged sptune.status=diverged in on_trial_result; never selected
        elif status == "FINISHED":
            batch.tags["sptune.status"] = "finished"
        self.writes.flush_run(run_id)  # the run's epochs, params and tags before it is marked ended
        self.client.set_terminated(run_id, status=status)
