"""The study's one Tuner (`sptune.tuning.stages`): run it, or restore it after an interruption. Each stage is
selected while the Tuner runs on, as soon as its last trial ends (`sptune.judging.ledger`); `StageRecorder` then
records the ledger's events in the study's one state (saved at once, so `--resume` never redoes a selection) and
marks final picks in MLflow.

With a remote --storage a resume may run in another process on another machine than the driver that
pickled the Tuner's callbacks (tuner.pkl): `THIS_RUN` tells them, as they are unpickled, where the
running driver writes (its state, output directory and storage), never the old driver's."""

from __future__ import annotations

import time
from typing import Any

from ray import tune

from sptune import storage as stored
from sptune.errors import RuntimeFailure
from sptune.judging.ledger import Event, Ledger, StageFailed, StageReleased, StageSelected
from sptune.judging.stage_graph import Stage, StageKind, StartingCheckpoints
from sptune.output_files import OPTUNA_DB
from sptune.plan.study_plan import SearchPlan, StudyPlan
from sptune.study.faults import FaultWatch
from sptune.study.interrupts import STOPS, InterruptWatch, watched_tuner
from sptune.study.snapshot import SnapshotBundle, restore_consistent
from sptune.study.state import SearchRecord, SelectedTrial, StateFile, StudyState, TunerRun
from sptune.study.this_run import THIS_RUN
from sptune.tasks.base import TaskSplits
from sptune.tracking.mlflow_tracker import Tracker, TrialRunLogger
from sptune.tracking.optuna_studies import OptunaTarget, default_url
from sptune.tuning.callbacks.checkpoint_pruning import CheckpointPruner
from sptune.tuning.callbacks.live_metrics import TrialStateMetrics
from sptune.tuning.callbacks.tune_files import chosen_tune_loggers
from sptune.tuning.outcomes import outcome_of
from sptune.tuning.packs.executor import end_stale
from sptune.tuning.packs.membership import pack_prefix
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
    """Driver-side: hands every ended trial (its results and kept checkpoints) to the stages' ledger and records
    the events it returns, at once: each selection in the state (saved, so `--resume` never redoes it) and, for
    a final pick, in MLflow; each failure in the state. Dependent stages start while the rest of the Tuner runs
    on. Must come after the TrialRunLogger (the selected trial's child run exists)."""

    def __init__(self, ledger: Ledger, tracker: Tracker, state_file: StateFile) -> None:
        self.ledger, self.tracker, self.state_file = ledger, tracker, state_file

    # Pickled into tuner.pkl with the searcher (one pickle: the ledger stays the searcher's on Tuner.restore);
    # MLflow is reconnected, and the state is the running driver's own (`THIS_RUN`), never a copy read back.
    def __getstate__(self) -> dict:
        t = self.tracker
        return {"ledger": self.ledger, "_tracking": (t.uri, t.experiment_id, t.parent_run_id)}

    def __setstate__(self, state: dict) -> None:
        self.ledger = state["ledger"]
        self.tracker = Tracker.attach(*state["_tracking"])
        self.state_file = THIS_RUN["state_file"]  # TunerRunner sets it before it restores the Tuner

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._ended(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._ended(trial)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self._record(self.ledger.take_events())  # e.g. a stage whose searcher ran out early, selected in suggest

    def _ended(self, trial: Any) -> None:
        # Kept checkpoints are recorded as URIs under the storage.
        self._record(self.ledger.trial_ended(trial.trial_id, outcome_of(trial, self.state_file.storage)))

    def _record(self, events: list[Event]) -> None:
        news = [e for e in events if not isinstance(e, StageReleased)]  # a release changes nothing recorded
        if not news:
            return
        state, runs = self.state_file.state, self.tracker.children()
        for event in news:
            if isinstance(event, StageFailed):
                state.failed[event.label] = [event.where, event.problem, event.fix]
                print(f"[sptune] {event.label}: nothing to select ({event.problem})", flush=True)
            else:
                self._selected(event, state, runs)
        self.state_file.save()

    def _selected(self, event: StageSelected, state: StudyState, runs: dict[str, str]) -> None:
        chosen = event.pick
        picked = [SelectedTrial(s, runs.get(s.trial_id)) for s in chosen.picked]
        record = SearchRecord(picked, event.trial_scores, chosen.ranked, chosen.candidates)
        for picked in record.selected if event.final else []:  # a pick a later stage may change is not marked
            mark_selected(self.tracker, picked)
        state.searches[event.label] = record
        trials = len(event.trial_scores)
        state.timeline.append(TunerRun(event.label, [event.variant], event.released_at, time.time(), trials))
        if record.candidates:
            _print_candidates(event.label, record)
        elif event.kind is StageKind.EXTEND and not trials:
            print(f"[sptune] {event.label}: nothing to add (no config the pick may come from is at the edge)",
                  flush=True)
        elif event.kind is StageKind.RERUN and not trials:
            print(f"[sptune] {event.label}: no more seeds (every comparison {event.variant} is in is decided)",
                  flush=True)
        else:
            _print_selected(event.label, record, event.released_at)


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
        STOPS.stages = tuple(s.label for s in stages)
        # A stop signal ends the study here (StudyInterrupted), before anything is selected from a half-run Tuner.
        try:
            with watched_tuner(), chosen_tune_loggers():
                grid = self._tuner(stages, checkpoints).fit()
        finally:  # executors of packs whose members never all ended (an interrupted or failed Tuner)
            end_stale(pack_prefix(stored.join(self.storage, STUDY_EXPERIMENT)))
        if self.resume:
            self._drop_forgotten(grid, started)
        if self.optuna is not None:
            self.optuna.close(tuple(s.search for s in stages if s.kind is StageKind.SEARCH))
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
        # A killed driver's pack executors (detached) would train on beside the resumed members: ended first.
        prefix = pack_prefix(experiment_dir)
        end_stale(prefix)
        if self.resume and stored.exists(stored.join(experiment_dir, "tuner.pkl")):
            session = restore_consistent(experiment_dir)
            since = f" from its snapshot of session {session}" if session else ""
            print(f"[sptune] {STUDY_EXPERIMENT}: resuming the interrupted Tuner{since} ...", flush=True)
            THIS_RUN.update(out=self.state_file.output_dir, storage=self.state_file.storage, experiment=experiment_dir,
                            state_file=self.state_file)
            return restore_study_tuner(experiment_dir, self.plan, self.data)
        selections = {label: [p.selection for p in r.selected] for label, r in self.state.searches.items()}
        ranked = {label: list(r.ranked) for label, r in self.state.searches.items() if r.ranked}
        searcher, scheduler = staged_search(self.plan, stages, checkpoints, selections, self.optuna, ranked, prefix)
        parts = ", ".join(f"{s.label} {s.budget} ({s.trial_plan.searcher})" for s in stages)
        print(f"[sptune] {STUDY_EXPERIMENT}: {sum(s.budget for s in stages)} trials: {parts} ...", flush=True)
        logger = TrialRunLogger(self.tracker, {s.label: self._run_params(s.trial_plan) for s in stages})
        recorder = StageRecorder(searcher.ledger, self.tracker, self.state_file)
        # Live view: trials per state and variant, from the driver (Prometheus scrapes Ray's agent).
        states = TrialStateMetrics(self.plan.spec.name,
                                   [(s.trial_plan.variant_or_objective, s.trial_plan.phase) for s in stages])
        bundle = self._snapshot_bundle(experiment_dir)
        # The pruner after the bundle: it deletes a checkpoint only once a bundle names a newer one.
        # The fault watch first: a trial a full disk failed stops the Tuner before the others count it failed.
        callbacks = [FaultWatch(), logger, recorder, states, bundle, CheckpointPruner(bundle), InterruptWatch()]
        return build_study_tuner(self.plan, self.data, searcher, scheduler, self.storage, callbacks)

    def _drop_forgotten(self, grid: Any, started: float) -> None:
        """A trial the interrupted driver started after Tune's last snapshot was forgotten by the restore
        and started again under a new id: its MLflow child run, made by the old driver, still RUNNING and
        with no epoch logged, is deleted so no trial has two runs. One that had logged epochs stays, ended
        KILLED and tagged, since that compute was spent."""
        known = {str((r.metrics or {}).get("trial_id")) for r in grid}
        # A trial that ended just before the stop (its driver failed between Tune's record of it and MLflow's):
        # restored as ended, it never runs again, so its run is closed here from its last result.
        ended = {str(r.metrics.get("trial_id")): r.metrics for r in grid if r.error is None and r.metrics}
        client, parent = self.tracker.client, self.tracker.parent_run_id
        runs = client.search_runs([self.tracker.experiment_id], f"tags.mlflow.parentRunId = '{parent}'",
                                  max_results=5000)
        for run in runs:
            trial_id = run.data.tags.get("sptune.trial_id")
            if trial_id in ended and run.info.status == "RUNNING":
                last = ended[trial_id]
                for key in ("best_val_acc", "best_val_loss", "best_epoch"):
                    if isinstance(last.get(key), (int, float)):
                        client.log_metric(run.info.run_id, key, float(last[key]), step=0)
                client.set_tag(run.info.run_id, "sptune.status", "finished")
                client.set_terminated(run.info.run_id, status="FINISHED")
                continue
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
        return SnapshotBundle(experiment_dir, out / OPTUNA_DB if own and stored.is_remote(self.storage) else None)

    def _run_params(self, search: SearchPlan) -> dict[str, Any]:
        """MLflow params of each trial's run besides its config."""
        spec = self.plan.spec
        params = {
            "task": self.plan.training_data(search, self.data).info.name,
            "phase": search.phase,
            "variant": search.variant_or_objective,
            "kind": search.variant_kind or search.objective,  # pretraining has no variant kind: name its objective
            "max_epochs": search.epochs,
            **{f"model.{k}": v for k, v in spec.model.model_dump().items()},
        }
        if search.is_pretraining:  # its search or its re-runs per seed
            pretrain = spec.pretrain
            params.update(
                {"objective": search.objective, "mask_ratio": pretrain.mask_ratio, "recon_loss": pretrain.loss}
            )
        return params
