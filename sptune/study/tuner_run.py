"""The study's one Tuner (`sptune.tuning.stages`): run it, or restore it after an interruption. Each stage is
selected while the Tuner runs on, as soon as its last trial ends; `StageRecorder` then records the
selection in the state (saved at once, so `--resume` never redoes it) and marks it in MLflow.

With a remote --storage a resume may run in another process on another machine than the driver that
pickled the Tuner's callbacks (tuner.pkl): `THIS_RUN` tells them, as they are unpickled, where the
running driver writes (its output directory and storage), never the old driver's."""

from __future__ import annotations

import time
from typing import Any

from ray import tune

from sptune import storage as stored
from sptune.errors import RuntimeFailure
from sptune.judging.stats import finite_float
from sptune.plan.study_plan import SearchPlan, StudyPlan
from sptune.study.snapshot import SnapshotBundle, restore_consistent
from sptune.study.state import SearchRecord, SelectedTrial, StateFile, TunerRun, read_state
from sptune.study.this_run import THIS_RUN
from sptune.tasks.base import TaskSplits
from sptune.tracking.mlflow_tracker import Tracker, TrialRunLogger
from sptune.tracking.optuna_studies import DB_FILE, OptunaTarget, default_url
from sptune.tuning.callbacks.checkpoint_pruning import CheckpointPruner
from sptune.tuning.callbacks.live_metrics import TrialStateMetrics
from sptune.tuning.callbacks.tune_files import chosen_tune_loggers
from sptune.tuning.outcomes import outcome_of
from sptune.tuning.stages import Stage, StagedSearcher, StartingCheckpoints
from sptune.tuning.tuner import STUDY_EXPERIMENT, build_study_tuner, restore_study_tuner, staged_search


def _print_selected(label: str, record: SearchRecord, start: float) -> None:
    for sel in (picked.selection for picked in record.selected):
        print(
            f"[sptune] {label}: best {sel.metric}={sel.score:.4f} at epoch {sel.epoch} "
            f"(lr={sel.config['lr']:.3g}, batch={sel.config['batch_size']}, seed={sel.config.get('seed')}) "
            f"after {time.time() - start:.0f}s",
            flush=True,
        )


def _print_candidates(label: str, record: SearchRecord) -> None:
    for c in record.candidates or []:
        config = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in c["config"].items())
        mean = "-" if c["mean"] is None else f"{c['mean']:.4f}" + (f" ± {c['std']:.4f}" if c["std"] is not None else "")
        print(f"[sptune] {label}: {config}: val acc {mean} over seeds {c['seeds']} ({c['n_used']} used)"
              f"{'  <- picked' if c['picked'] else ''}", flush=True)


def mark_selected(tracker: Tracker, picked: SelectedTrial) -> None:
    run_id = picked.mlflow_run_id
    if run_id is None:
        return
    client = tracker.client
    client.set_tag(run_id, "sptune.selected", "true")
    client.log_metric(run_id, "selected_epoch", picked.selection.epoch)
    with stored.local_copy(picked.selection.checkpoint_path) as folder:  # a URI under a remote --storage too
        client.log_artifacts(run_id, str(folder), artifact_path="selected_checkpoint")


class StageRecorder(tune.Callback):
    """Driver-side: hands every ended trial (its results and kept checkpoints) to the staged searcher,
    and records each selection the searcher makes, at once: dependent stages start while the rest of
    the Tuner runs on. Must come after the TrialRunLogger (the selected trial's child run exists)."""

    def __init__(self, searcher: StagedSearcher, tracker: Tracker, state_file: StateFile) -> None:
        self.searcher, self.tracker, self.state_file = searcher, tracker, state_file
        self.storage = state_file.storage  # kept checkpoints are recorded as URIs under it

    # Pickled into tuner.pkl with the searcher (one pickle: it stays the same object on Tuner.restore);
    # the state file and MLflow are reconnected in the resuming process.
    def __getstate__(self) -> dict:
        t = self.tracker
        return {
            "searcher": self.searcher,
            "_out": self.state_file.output_dir,
            "_storage": self.storage,
            "_tracking": (t.uri, t.experiment_id, t.parent_run_id),
        }

    def __setstate__(self, state: dict) -> None:
        self.searcher = state["searcher"]
        self.tracker = Tracker.attach(*state["_tracking"])
        self.storage = THIS_RUN.get("storage", state.get("_storage"))
        self.state_file = StateFile(THIS_RUN.get("out", state["_out"]), self.storage)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._ended(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._ended(trial)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self._record(self.searcher.take_news())  # a stage whose searcher ran out early is selected in suggest

    def _ended(self, trial: Any) -> None:
        self.searcher.trial_ended(trial.trial_id, outcome_of(trial, self.storage))
        self._record(self.searcher.take_news())

    def _record(self, labels: list[str]) -> None:
        if not labels:
            return
        state, runs = self.state_file.state, self.tracker.children()
        for label in labels:
            stage = self.searcher.stages[label]
            if label in self.searcher.failed:
                state.failed[label] = list(self.searcher.failed[label])
                print(f"[sptune] {label}: nothing to select ({self.searcher.failed[label][1]})", flush=True)
                continue
            picked = [SelectedTrial(s, runs.get(s.trial_id)) for s in self.searcher.selected[label]]
            record = SearchRecord(picked, self._trial_scores(label, stage.plan.epoch_score),
                                  self.searcher.ranked.get(label), self.searcher.candidates.get(label))
            for picked in record.selected if stage.final else []:  # a pick a later stage may change is not marked
                mark_selected(self.tracker, picked)
            state.searches[label] = record
            start = self.searcher.released_at.get(label, time.time())
            trials = len(self.searcher.outcomes[label])
            state.timeline.append(TunerRun(label, [stage.plan.variant_or_objective], start, time.time(), trials))
            if record.candidates:
                _print_candidates(label, record)
            elif stage.kind == "extend" and not trials:
                print(f"[sptune] {label}: nothing to add (no config the pick may come from is at the edge)", flush=True)
            else:
                _print_selected(label, record, start)
        self.state_file.save()

    def _trial_scores(self, label: str, score: str) -> list[float | None]:
        """Each trial's best epoch score as it last reported it (`sptune.judging.expected_max` reads them)."""
        return [finite_float((o.metrics or {}).get("best_" + score)) for o in self.searcher.outcomes[label].values()]


class TunerRunner:
    """Runs the study's one Tuner; the state records each stage's selection as it is made."""

    def __init__(
        self, plan: StudyPlan, data: TaskSplits, tracker: Tracker, state_file: StateFile, storage: str, resume: bool,
        optuna: OptunaTarget | None = None,
    ) -> None:
        self.plan, self.data, self.tracker = plan, data, tracker
        self.state_file, self.state = state_file, state_file.state
        self.storage, self.resume = storage, resume
        self.optuna = optuna  # where each Optuna search is kept (None: in memory)

    def run(self, stages: list[Stage], checkpoints: StartingCheckpoints) -> None:
        """Run (or restore) the Tuner of `stages`; on return each has its SearchRecord in the state."""
        if not stages:
            return
        self.state.failed.clear()
        self.state_file.save()
        started = time.time()
        with chosen_tune_loggers():
            grid = self._tuner(stages, checkpoints).fit()
        if self.resume:
            self._drop_forgotten(grid, started)
        if self.optuna is not None:
            self.optuna.close(tuple(s.search for s in stages if s.kind == "search"))
        fresh = read_state(self.state_file.output_dir)  # a restored Tuner's recorder wrote its own copy
        if fresh is not None:
            self.state.searches.update(fresh.searches)
            self.state.timeline, self.state.failed = fresh.timeline, fresh.failed
        missing = [s.label for s in stages if s.label not in self.state.searches]
        if missing:
            failed = next((self.state.failed[m] for m in missing if m in self.state.failed), None)
            if failed is not None:
                raise RuntimeFailure(*failed)
            waited = ", ".join(missing)
            raise RuntimeFailure(
                waited,
                "selected nothing: what it needed was never selected",
                "see the errors above, fix the cause and rerun with --resume --output DIR",
            )

    def _tuner(self, stages: list[Stage], checkpoints: StartingCheckpoints) -> Any:
        experiment_dir = stored.join(self.storage, STUDY_EXPERIMENT)
        if self.resume and stored.exists(stored.join(experiment_dir, "tuner.pkl")):
            session = restore_consistent(experiment_dir)
            since = f" from its snapshot of session {session}" if session else ""
            print(f"[sptune] {STUDY_EXPERIMENT}: resuming the interrupted Tuner{since} ...", flush=True)
            THIS_RUN.update(out=self.state_file.output_dir, storage=self.state_file.storage, experiment=experiment_dir)
            return restore_study_tuner(experiment_dir, self.plan, self.data)
        selections = {label: [p.selection for p in r.selected] for label, r in self.state.searches.items()}
        ranked = {label: list(r.ranked) for label, r in self.state.searches.items() if r.ranked}
        searcher, scheduler = staged_search(self.plan, stages, checkpoints, selections, self.optuna, ranked)
        parts = ", ".join(f"{s.label} {s.budget} ({s.plan.searcher})" for s in stages)
        print(f"[sptune] {STUDY_EXPERIMENT}: {sum(s.budget for s in stages)} trials: {parts} ...", flush=True)
        logger = TrialRunLogger(self.tracker, {s.label: self._run_params(s.plan) for s in stages})
        recorder = StageRecorder(searcher, self.tracker, self.state_file)
        # Live view: trials per state and variant, from the driver (Prometheus scrapes Ray's agent).
        states = TrialStateMetrics(self.plan.spec.name, [(s.plan.variant_or_objective, s.plan.phase) for s in stages])
        bundle = self._snapshot_bundle(experiment_dir)
        # The pruner after the bundle: it deletes a checkpoint only once a bundle names a newer one.
        callbacks = [logger, recorder, states, bundle, CheckpointPruner(bundle)]
        return build_study_tuner(self.plan, self.data, searcher, scheduler, self.storage, callbacks)

    def _drop_forgotten(self, grid: Any, started: float) -> None:
        """A trial the interrupted driver started after Tune's last snapshot was forgotten by the restore
        and started again under a new id: its MLflow child run, made by the old driver, still RUNNING and
        with no epoch logged, is deleted so no trial has two runs. One that had logged epochs stays, ended
        KILLED and tagged, since that compute was spent."""
        known = {str((r.metrics or {}).get("trial_id")) for r in grid}
        client, parent = self.tracker.client, self.tracker.parent_run_id
        runs = client.search_runs([self.tracker.experiment_id], f"tags.mlflow.parentRunId = '{parent}'",
                                  max_results=5000)
        for run in runs:
            trial_id = run.data.tags.get("sptune.trial_id")
            if trial_id in known or run.info.status != "RUNNING" or run.info.start_time >= started * 1000:
                continue
            if run.data.metrics:
                client.set_tag(run.info.run_id, "sptune.forgotten_by_resume", "true")
                client.set_terminated(run.info.run_id, status="KILLED")
            else:
                client.delete_run(run.info.run_id)

    def _snapshot_bundle(self, experiment_dir: str) -> SnapshotBundle:
        """Every snapshot whole under the storage; with the default Optuna database under a remote storage,
        its copy too (a server database needs none; a local storage's is the output directory's own)."""
        out = self.state_file.output_dir
        own = self.optuna is not None and self.optuna.url == default_url(out)
        return SnapshotBundle(experiment_dir, out / DB_FILE if own and stored.is_remote(self.storage) else None)

    def _run_params(self, search: SearchPlan) -> dict[str, Any]:
        """MLflow params of each trial's run besides its config."""
        spec = self.plan.spec
        params = {
            "task": self.plan.training_data(search, self.data).info.name,
            "phase": search.phase,
            "variant": search.variant_or_objective,
            "kind": search.kind or search.objective,  # pretraining has no variant kind: name its objective
            "max_epochs": search.epochs,
            **{f"model.{k}": v for k, v in spec.model.model_dump().items()},
        }
        if search.is_pretraining:  # its search or its re-runs per seed
            pretrain = spec.pretrain
            params.update(
                {"objective": search.objective, "mask_ratio": pretrain.mask_ratio, "recon_loss": pretrain.loss}
            )
        return params
