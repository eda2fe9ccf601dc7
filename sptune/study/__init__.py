"""Runs a planned study: a pretraining Tuner per objective, one Tuner for all variants'
searches (each its own searcher and early stopping), with `rerun_pretrain` one Tuner per
pretraining of its re-runs per seed, one Tuner of the variants' re-runs per seed, the single
test evaluation per selected checkpoint, results and tracking.

Progress is saved to ``study_state.json`` after every Tuner, so ``--resume`` skips finished
Tuners, restores an interrupted one, and never re-reads the test split.
"""

from __future__ import annotations

from pathlib import Path

from sptune.optuna_storage import OptunaTarget
from sptune.plan import StudyPlan, TunerPlan
from sptune.results import ResultRow
from sptune.study.final_evaluation import Candidate, evaluate_on_test, log_test_metrics
from sptune.study.pretraining import SptCheckpoints
from sptune.study.publish import publish
from sptune.study.reruns import rerun_plan
from sptune.study.state import StateFile, StudyState, read_state
from sptune.study.tuner_run import TunerRunner
from sptune.tasks.base import TaskSplits
from sptune.tracking import Tracker

__all__ = ["Study", "StudyState", "read_state"]


class Study:
    """One study in its output directory: `run()` does whatever the saved state says is left."""

    def __init__(
        self,
        plan: StudyPlan,
        data: TaskSplits,
        output_dir: Path,
        tracker: Tracker,
        resume: bool = False,
        storage: str | None = None,
        spt_cache_dir: Path | None = None,
        optuna: OptunaTarget | None = None,
    ) -> None:
        self.plan, self.data, self.out, self.tracker = plan, data, output_dir, tracker
        self.state_file = StateFile(output_dir)
        state = self.state_file.state
        state.tracking_uri, state.experiment_id = tracker.uri, tracker.experiment_id
        state.parent_run_id = tracker.parent_run_id
        self.state_file.save()
        # A local path or a URI such as s3://bucket/prefix (kept as text: Path would mangle "://").
        storage = storage or str((output_dir / "ray_results").resolve())
        self.tuners = TunerRunner(plan, data, tracker, self.state_file, storage, resume, optuna)
        self.spt = SptCheckpoints(plan, data, output_dir, self.tuners, self.state_file, spt_cache_dir)

    def run(self) -> list[ResultRow]:
        state = self.state_file.state
        if state.published:
            print("[sptune] study already finished; nothing to do", flush=True)
            return state.rows
        if state.rows is None:
            state.rows = evaluate_on_test(self.plan, self.data, self.out, self._run_tuners())
            self.state_file.save()  # the test split has been read: recorded before anything else can fail
        log_test_metrics(self.tracker, state.rows)
        publish(self.plan, state, self.out, self.tracker, state.rows)
        state.published = True
        self.state_file.save()
        return state.rows

    def _run_tuners(self) -> list[Candidate]:
        """Every Tuner, in order; what each variant will test: its search's pick, or each seed's re-run."""
        # Each pretraining objective runs once; every variant and seed that needs it reuses it.
        spt_of = {p.label: self.spt.checkpoint(p) for p in self.plan.pretrainings()}
        searches = self.plan.variant_searches()
        spt_checkpoints = {s.variant: spt_of[s.init_from] for s in searches if s.init_from}
        found = self.tuners.run(TunerPlan("search", tuple(searches)), spt_checkpoints)
        tested = found
        if self.plan.spec.rerun_seeds > 1:
            per_seed, seeds = self._spt_per_seed(spt_of), self.plan.rerun_seeds()
            reruns = tuple(rerun_plan(s, found[s.label].best.selection, seeds, per_seed.get(s.init_from))
                           for s in searches)
            rerun = self.tuners.run(TunerPlan("rerun", reruns), spt_checkpoints)
            tested = {s.label: rerun[r.label] for s, r in zip(searches, reruns, strict=True)}
        return [Candidate(s, found[s.label], picked) for s in searches for picked in tested[s.label].selected]

    def _spt_per_seed(self, spt_of: dict[str, str]) -> dict[str, dict[int, str]]:
        """pretraining label -> re-run seed -> the SPT checkpoint that seed's re-runs start from: the one
        selected checkpoint, or with rerun_pretrain the selected config re-pretrained with that seed."""
        if self.plan.spec.rerun_pretrain:
            return {p.label: self.spt.rerun_checkpoints(p) for p in self.plan.pretrainings()}
        return {label: dict.fromkeys(self.plan.rerun_seeds(), path) for label, path in spt_of.items()}
