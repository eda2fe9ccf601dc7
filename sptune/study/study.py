"""Runs a planned study: ONE Tuner for everything it trains (`sptune.tuning.stages`): each pretraining objective's
search, every variant's search (each its own searcher, budget and early stopping; an SPT variant's starts once its
pretraining is selected), what makes each variant's pick after it (its LR extension's rounds, seed-robust
selection's candidates), the re-runs per seed of each pick (with `rerun_pretrain` the selected pretraining config
re-pretrained per seed first); then the single test evaluation per selected checkpoint, results and tracking.

Each search's selection is saved to ``study_state.json`` as soon as it is made, so ``--resume`` restores an
interrupted Tuner (or runs only the searches still to select) and never re-reads the test split.
"""

from __future__ import annotations

from pathlib import Path

from sptune.judging.results import ResultRow
from sptune.judging.stage_graph import Stage, StartingCheckpoints, variant_stages
from sptune.output_files import OPTUNA_DB, RAY_RESULTS, RESULT_FILES, TEST_READS
from sptune.plan.study_plan import StudyPlan
from sptune.storage import DriverFileMirror, is_remote
from sptune.study import interrupts
from sptune.study.final_evaluation import Candidate, evaluate_on_test, log_test_metrics
from sptune.study.pretraining import PretrainedWithoutTrials
from sptune.study.publish import publish
from sptune.study.state import StateFile
from sptune.study.tuner_run import TunerRunner
from sptune.tasks.base import TaskSplits
from sptune.tracking.mlflow_tracker import Tracker
from sptune.tracking.optuna_studies import OptunaTarget, follow_move


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
        # A local path or a URI such as s3://bucket/prefix (kept as text: Path would mangle "://").
        storage = storage or str((output_dir / RAY_RESULTS).resolve())
        self.mirror = DriverFileMirror(storage, output_dir)  # the driver's files under a remote storage
        self.state_file = StateFile(output_dir, storage)
        state = self.state_file.state
        if state.output_dir and optuna is not None:  # resumed elsewhere (from the storage alone)
            follow_move(Path(state.output_dir), output_dir)
        state.tracking_uri, state.experiment_id = tracker.uri, tracker.experiment_id
        state.parent_run_id, state.output_dir = tracker.parent_run_id, str(output_dir.resolve())
        self.state_file.save()
        self.tuners = TunerRunner(plan, data, tracker, self.state_file, storage, resume, optuna)
        remote = storage if is_remote(storage) else None
        self.pretrained = PretrainedWithoutTrials(plan, data, output_dir, self.state_file, spt_cache_dir, remote)

    def run(self) -> list[ResultRow]:
        state = self.state_file.state
        if state.published:
            print("[sptune] study already finished; nothing to do", flush=True)
            return state.rows
        if state.rows is None:
            state.rows = evaluate_on_test(self.plan, self.data, self.out, self._run_tuners())
            self.state_file.save()  # the test split has been read: recorded before anything else can fail
            self.mirror.push(TEST_READS)
        interrupts.check()  # a stop signal ends the study between steps, never inside a database write
        log_test_metrics(self.tracker, state.rows)
        interrupts.check()
        publish(self.plan, state, self.out, self.tracker, state.rows, self.data)
        self.mirror.push(*RESULT_FILES)
        state.published = True
        self.state_file.save()
        return state.rows

    def _run_tuners(self) -> list[Candidate]:
        """The study's one Tuner; what each variant will test: its search's pick, or each seed's re-run."""
        stages, checkpoints = self._stages()
        self.tuners.run(stages, checkpoints)
        self.mirror.push(OPTUNA_DB)  # the searches' final database (none with --optuna-storage)
        for pretraining in self.plan.pretrainings():
            self.pretrained.cache(pretraining)
        searches, state = self.plan.variant_searches(), self.state_file.state
        found = {s.label: state.searches[s.label] for s in searches}
        # Each seed's re-run over every look (sequential re-runs: the looks it trained), else the pick.
        labels = {s.label: self.plan.rerun_labels(s) or [self.plan.pick_label(s)] for s in searches}
        return [Candidate(s, found[s.label], picked) for s in searches for label in labels[s.label]
                for picked in state.searches[label].selected]

    def _stages(self) -> tuple[list[Stage], StartingCheckpoints]:
        """Every search still to select, as a stage with what it waits for; the SPT checkpoints known
        without trials. Each pretraining objective runs once; every variant and seed needing it reuses it."""
        seeds, done = tuple(self.plan.rerun_seeds()), self.state_file.state.searches
        per_seed = self.plan.spec.rerun_pretrain
        stages, checkpoints = [], {}
        for pretraining in self.plan.pretrainings():
            path = self.pretrained.given(pretraining)
            if path is None:
                stages.append(Stage(pretraining))
            else:
                checkpoints[pretraining.label] = {None: path}
            if seeds and per_seed:
                given = self.pretrained.given_per_seed(pretraining)
                if given is None:
                    stages.append(Stage.rerun(pretraining, seeds))
                else:
                    checkpoints[pretraining.rerun_label] = dict(given)
        by_label = {p.label: p for p in self.plan.pretrainings()}
        for search in self.plan.variant_searches():
            source = by_label.get(search.init_from) if search.init_from else None
            spt_from = None if source is None else source.rerun_label if per_seed else source.label
            chain = variant_stages(self.plan, search, seeds, spt_from)
            stages += [stage for stage in chain if stage.label not in done]
        return stages, checkpoints
