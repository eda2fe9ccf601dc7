"""The study's one Ray Tune Tuner of all its stages (`sptune.tuning.stages`: pretraining, every variant's
search, the re-runs per seed): built or restored, each stage with its own searcher and early stopping.
Why one Tuner per study: docs/design/tuning.md."""

from __future__ import annotations

import weakref
from typing import Any

import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

from sptune.judging.ledger import Ledger
from sptune.judging.selection import Selection
from sptune.judging.stage_graph import Stage, StageKind, StartingCheckpoints
from sptune.plan.phases import TRAINED_TO_THE_END
from sptune.plan.study_plan import SearchPlan, StudyPlan
from sptune.plan.trial_budgets import trial_budgets
from sptune.storage import moves
from sptune.tasks.base import TaskSplits
from sptune.tracking.optuna_studies import OptunaTarget
from sptune.tuning.callbacks.checkpoint_pruning import CheckpointPruner
from sptune.tuning.callbacks.terminal import ProgressRow, run_config_progress, use_tune_reporter
from sptune.tuning.callbacks.tune_files import result_loggers
from sptune.tuning.generator import StudySearchGenerator
from sptune.tuning.packs.book import PackBook
from sptune.tuning.packs.executor import member_resources
from sptune.tuning.schedulers.by_stage import StageScheduler
from sptune.tuning.schedulers.halving import SuccessiveHalving
from sptune.tuning.schedulers.hyperband import Hyperband
from sptune.tuning.searchers import searcher_for
from sptune.tuning.stages import StagedSearcher
from sptune.tuning.trainable import CHECKPOINT_RANK, StudyTrainable

STUDY_EXPERIMENT = "study"  # the one Tuner's directory under the storage path


def fixed_params(search: SearchPlan, seed: int) -> dict[str, Any]:
    """What every trial of a search carries besides the searched values (plain text: the configs Ray saves)."""
    objective = {"objective": search.objective} if search.objective else {}
    return {"phase": str(search.phase), "variant": search.variant_or_objective, "seed": seed, **objective}


def _scheduler(plan: StudyPlan, search: SearchPlan) -> Any:
    """The search's own early stopping, as the spec's `scheduler` section asks."""
    s = plan.spec.scheduler
    if s.type == "fifo" or search.phase in TRAINED_TO_THE_END:  # re-runs and candidates train to the end
        return FIFOScheduler()
    if s.type == "asha":  # asynchronous: faster, but who survives depends on finish order
        return ASHAScheduler(
            time_attr="training_iteration",
            metric=search.metric,  # its own search's: one Tuner holds stages ranked by different metrics
            mode=search.mode,
            max_t=search.epochs,
            grace_period=s.grace_period,
            reduction_factor=s.reduction_factor,
        )
    halving = Hyperband if s.type == "hyperband" else SuccessiveHalving  # both order-independent
    return halving(search.n_trials, search.epochs, s.grace_period, s.reduction_factor, search.metric, search.mode)


# id(data) -> (the data, the Ray session it was put in, its object): see trial_data.
_SHIPPED: dict[int, tuple[weakref.ref, str, Any]] = {}


def trial_data(data: TaskSplits) -> Any:
    """The (test-free) splits as one object in Ray's object store, put once per Ray session.

    Trials get its arrays as zero-copy read-only views (`TaskSplits.without_test` makes them plain
    ndarrays, which Ray shares instead of unpickling a copy per trial). Once per session, not per Tuner:
    Tune's parameter registry never releases its objects, so each put would pin another copy.
    """
    if not ray.is_initialized():  # tune.with_parameters puts it once Ray starts
        return data.without_test()
    for key, (ref, *_) in list(_SHIPPED.items()):
        if ref() is None:  # that study's data are gone: let its object go too
            del _SHIPPED[key]
    context = ray.get_runtime_context()
    # Objects of an earlier session are gone with it: a new connection is a new job, a new local
    # cluster a new node (which may count jobs from 1 again).
    session = f"{context.get_job_id()}@{context.get_node_id()}"
    hit = _SHIPPED.get(id(data))
    if hit is None or hit[0]() is not data or hit[1] != session:
        hit = _SHIPPED[id(data)] = (weakref.ref(data), session, ray.put(data.without_test()))
    return hit[2]


def staged_search(
    plan: StudyPlan,
    stages: list[Stage],
    checkpoints: StartingCheckpoints,
    selections: dict[str, list[Selection]],
    optuna: OptunaTarget | None = None,
    ranked: dict[str, list[Selection]] | None = None,
    pack_prefix: str = "",
) -> tuple[StagedSearcher, StageScheduler]:
    """Every stage its own searcher (stages of given configs get theirs when released; each Optuna search
    persisted in `optuna`'s database) and its own scheduler, routed by the `stage` each trial's config names; the
    stages' ledger is the searcher's. `selections` (and `ranked`, the best configs of those that rank some) were
    made before (a resumed study). With `resources.pack` > 1 each stage's trials are handed out in packs, their
    executors named under `pack_prefix` (sptune.tuning.packs)."""
    searchers = {s.label: searcher_for(plan, s.search, optuna) for s in stages if s.kind is StageKind.SEARCH}
    fixed = {s.label: {**fixed_params(s.trial_plan, plan.spec.seed), "stage": s.label} for s in stages}
    schedulers = {s.label: _scheduler(plan, s.trial_plan) for s in stages}
    pack = plan.spec.resources.pack
    scheduler = StageScheduler(schedulers, plan.concurrency, packed=pack > 1)
    # The searcher saves the scheduler's decisions with its own state, so a resume restores both at once.
    searcher = StagedSearcher(Ledger(stages, checkpoints, selections, ranked), searchers, fixed, scheduler)
    if pack > 1:
        searcher.pack_trials(pack, pack_prefix)
    return searcher, scheduler


def study_trainable(plan: StudyPlan, data: TaskSplits) -> Any:
    """The one trainable of every stage. Every dataset the study trains on goes into Ray's object store
    once: the study's, and a pretraining's own (spt_cross: its source task) under its stages' labels."""
    own = {}
    for pretraining in plan.pretrainings():
        source = plan.training_data(pretraining, data)
        if source is not data:
            own[pretraining.label] = own[pretraining.rerun_label] = source.without_test()
    res = plan.spec.resources
    return tune.with_resources(
        tune.with_parameters(StudyTrainable, spec=plan.spec, budgets=trial_budgets(plan), data=trial_data(data),
                             stage_data=own, moves=moves()),
        member_resources(plan.spec) if res.pack > 1 else {"cpu": res.cpu, "gpu": res.gpu},
    )


def build_study_tuner(
    plan: StudyPlan,
    data: TaskSplits,
    searcher: StagedSearcher,
    scheduler: StageScheduler,
    storage: str,
    callbacks: list,
) -> tune.Tuner:
    """The study's one Tuner, of the stages `searcher` holds (`staged_search`)."""
    stages = list(searcher.ledger.stages.values())
    return tune.Tuner(
        study_trainable(plan, data),
        tune_config=tune.TuneConfig(
            # Bookkeeping only (every trial reports it): each stage's searcher, scheduler and selection
            # rank by the stage's own metric.
            metric=CHECKPOINT_RANK,
            mode="max",
            scheduler=scheduler,
            # The ConcurrencyLimiter hands the limit to the StagedSearcher: it leaves out trials paused
            # at a rung of synchronous halving.
            search_alg=StudySearchGenerator(searcher, plan.concurrency),
            num_samples=sum(s.budget for s in stages),
            reuse_actors=True,  # one actor per concurrent slot, for trials of every stage
        ),
        run_config=_run_config(plan, stages, storage, callbacks),
    )


def _run_config(plan: StudyPlan, stages: list[Stage], storage: str, callbacks: list) -> tune.RunConfig:
    # The terminal shows a line per stage, each ranked by its own metric (sptune.tuning.callbacks.terminal).
    rows = [ProgressRow(s.label, s.budget, s.search.epochs, s.trial_plan.metric, s.trial_plan.mode) for s in stages]
    return tune.RunConfig(
        name=STUDY_EXPERIMENT,
        storage_path=storage,
        callbacks=[*_with_pruner(callbacks), *_pack_book(plan), *result_loggers()],
        stop={"training_iteration": max(s.search.epochs for s in stages)},  # and each at its own stage's epochs
        checkpoint_config=tune.CheckpointConfig(
            # Every epoch is checkpointed; CheckpointPruner deletes what no trial needs (docs/design/tuning.md).
            num_to_keep=None,
            # Ranking by val_acc itself would put the *latest* of tied epochs first, not the logged best.
            checkpoint_score_attribute=CHECKPOINT_RANK,
            checkpoint_score_order="max",
            checkpoint_frequency=1,
        ),
        failure_config=tune.FailureConfig(max_failures=plan.spec.max_failures),
        **run_config_progress(STUDY_EXPERIMENT, rows, "best_val_acc", "max"),  # the trial table's columns
    )


def _pack_book(plan: StudyPlan) -> list:
    """The driver's side of packed trials (who left each pack), when trials are packed."""
    return [PackBook()] if plan.spec.resources.pack > 1 else []


def _with_pruner(callbacks: list) -> list:
    """The Tuner's callbacks with a CheckpointPruner last (after any SnapshotBundle it watches)."""
    if any(isinstance(c, CheckpointPruner) for c in callbacks):
        return list(callbacks)
    return [*callbacks, CheckpointPruner()]


def restore_study_tuner(path: str, plan: StudyPlan, data: TaskSplits) -> tune.Tuner:
    """Continue the study's interrupted Tuner: the staged searcher comes back with what each stage had
    released and selected, and each stage's searcher with its own state."""
    use_tune_reporter()  # the saved RunConfig's progress reporter prints only with Tune's classic output
    return tune.Tuner.restore(path, trainable=study_trainable(plan, data), resume_unfinished=True, resume_errored=True)
