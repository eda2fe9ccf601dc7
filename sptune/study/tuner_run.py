"""One Tuner of the study: run it (or restore it after an interruption, or reuse what it
selected before), select per search, mark the selections in MLflow, record them in the state."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sptune.live_metrics import TrialStateMetrics
from sptune.optuna_storage import OptunaTarget
from sptune.plan import SearchPlan, StudyPlan, TunerPlan
from sptune.selection import Selection, select_best, select_each
from sptune.study.state import SearchRecord, SelectedTrial, StateFile, TunerRun
from sptune.tasks.base import TaskSplits
from sptune.tracking import Tracker, TrialRunLogger
from sptune.tuners import build_tuner, restore_tuner


def _exists(path_or_uri: str) -> bool:
    import pyarrow.fs

    fs, path = pyarrow.fs.FileSystem.from_uri(
        path_or_uri if "://" in path_or_uri else Path(path_or_uri).resolve().as_uri()
    )
    return fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound


def _select(search: SearchPlan, grid: Any) -> list[Selection]:
    """The search's best trial and epoch; for re-runs, each seed's."""
    results = [r for r in grid if (r.config or {}).get("variant") == search.trial_variant]
    return select_each(results, search) if search.phase == "rerun" else [select_best(results, search)]


def _print_selected(search: SearchPlan, record: SearchRecord, start: float) -> None:
    for sel in (picked.selection for picked in record.selected):
        print(
            f"[sptune] {search.label}: best {sel.metric}={sel.score:.4f} at epoch {sel.epoch} "
            f"(lr={sel.config['lr']:.3g}, batch={sel.config['batch_size']}, seed={sel.config.get('seed')}) "
            f"after {time.time() - start:.0f}s",
            flush=True,
        )


class TunerRunner:
    """Runs the study's Tuners one at a time, saving the state after each."""

    def __init__(
        self, plan: StudyPlan, data: TaskSplits, tracker: Tracker, state_file: StateFile, storage: str, resume: bool,
        optuna: OptunaTarget | None = None,
    ) -> None:
        self.plan, self.data, self.tracker = plan, data, tracker
        self.state_file, self.state = state_file, state_file.state
        self.storage, self.resume = storage, resume
        self.optuna = optuna  # where each Optuna search is kept (None: in memory)

    def run(self, tuner: TunerPlan, spt_checkpoints: dict[str, str] | None = None) -> dict[str, SearchRecord]:
        """SearchPlan.label -> what the search selected (reused when an earlier run finished this Tuner)."""
        finished = self._finished(tuner)
        if finished is not None:
            return finished
        start = time.time()
        grid = self._tuner(tuner, spt_checkpoints).fit()
        if self.optuna is not None:
            self.optuna.close(tuner.searches)
        runs = self.tracker.children()
        # Select in every search before recording any, so a search with nothing usable records nothing.
        selections = {search.label: _select(search, grid) for search in tuner.searches}
        for search in tuner.searches:
            record = SearchRecord([SelectedTrial(s, runs.get(s.trial_id)) for s in selections[search.label]])
            for picked in record.selected:
                self._mark_selected(picked)
            self.state.searches[search.label] = record
            _print_selected(search, record, start)
        variants = [search.trial_variant for search in tuner.searches]
        self.state.timeline.append(TunerRun(tuner.experiment, variants, start, time.time(), len(grid)))
        self.state_file.save()
        return {search.label: self.state.searches[search.label] for search in tuner.searches}

    def _finished(self, tuner: TunerPlan) -> dict[str, SearchRecord] | None:
        if not all(search.label in self.state.searches for search in tuner.searches):
            return None
        print(f"[sptune] {tuner.experiment}: already finished, reusing its selections", flush=True)
        return {search.label: self.state.searches[search.label] for search in tuner.searches}

    def _tuner(self, tuner: TunerPlan, spt_checkpoints: dict[str, str] | None) -> Any:
        experiment_dir = f"{self.storage.rstrip('/')}/{tuner.experiment}"
        data = self.plan.training_data(tuner.searches[0], self.data)
        if self.resume and _exists(f"{experiment_dir}/tuner.pkl"):
            print(f"[sptune] {tuner.experiment}: resuming the interrupted Tuner ...", flush=True)
            return restore_tuner(experiment_dir, self.plan, tuner, data, spt_checkpoints)
        params = {search.trial_variant: self._run_params(search) for search in tuner.searches}
        parts = ", ".join(f"{s.trial_variant} {s.n_trials} ({s.searcher})" for s in tuner.searches)
        print(f"[sptune] {tuner.experiment}: {tuner.n_trials} trials: {parts} ...", flush=True)
        logger = TrialRunLogger(self.tracker, params)
        # Live view: trials per state and variant, from the driver (Prometheus scrapes Ray's agent).
        states = TrialStateMetrics(self.plan.spec.name, [(s.trial_variant, s.phase) for s in tuner.searches])
        return build_tuner(self.plan, tuner, data, self.storage, [logger, states], spt_checkpoints, self.optuna)

    def _run_params(self, search: SearchPlan) -> dict[str, Any]:
        """MLflow params of each trial's run besides its config."""
        spec = self.plan.spec
        params = {
            "task": self.plan.training_data(search, self.data).info.name,
            "phase": search.phase,
            "variant": search.trial_variant,
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

    def _mark_selected(self, picked: SelectedTrial) -> None:
        run_id = picked.mlflow_run_id
        if run_id is None:
            return
        client = self.tracker.client
        client.set_tag(run_id, "sptune.selected", "true")
        client.log_metric(run_id, "selected_epoch", picked.selection.epoch)
        client.log_artifacts(run_id, picked.selection.checkpoint_path, artifact_path="selected_checkpoint")
