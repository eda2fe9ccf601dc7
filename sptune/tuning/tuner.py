"""The study's one Ray Tune Tuner of all its stages (`sptune.tuning.stages`: pretraining, every
variant's search, the re-runs per seed): built or restored, with per-stage searchers and early
stopping, checkpoints and callbacks."""

from __future__ import annotations

import warnings
import weakref
from typing import Any

import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from sptune.judging.selection import Selection
from sptune.plan.rungs import rung_epochs
from sptune.plan.study_plan import SearchPlan, StudyPlan
from sptune.spec import ParamSpace
from sptune.tasks.base import TaskSplits
from sptune.tracking.optuna_studies import OptunaTarget, StudyMirror, open_storage
from sptune.tuning.callbacks.checkpoint_pruning import CheckpointPruner
from sptune.tuning.callbacks.terminal import ProgressRow, run_config_progress, use_tune_reporter
from sptune.tuning.callbacks.tune_files import result_loggers
from sptune.tuning.routing import FixedConfigs, RandomConfigs, grid_configs
from sptune.tuning.schedulers.by_stage import StageScheduler
from sptune.tuning.schedulers.halving import SuccessiveHalving
from sptune.tuning.schedulers.hyperband import Hyperband
from sptune.tuning.searchers import BatchedSearcher
from sptune.tuning.stages import Stage, StagedSearcher, StartingCheckpoints
from sptune.tuning.trainable import CHECKPOINT_RANK, StudyTrainable


def _domain(name: str, p: ParamSpace) -> Any:
    cast = int if name == "batch_size" else float
    if p.type == "loguniform":
        return tune.loguniform(p.low, p.high)
    if p.type == "uniform":
        return tune.uniform(p.low, p.high)
    return tune.choice([cast(v) for v in p.values])


def _grids(search: SearchPlan) -> dict[str, list]:
    cast = {"batch_size": int}
    return {n: [cast.get(n, float)(v) for v in p.values] for n, p in search.space.items() if p.type == "grid"}


def fixed_params(search: SearchPlan, seed: int) -> dict[str, Any]:
    """What every trial of a search carries besides the searched values."""
    objective = {"objective": search.objective} if search.objective else {}
    return {"phase": search.phase, "variant": search.variant_or_objective, "seed": seed, **objective}


def _scheduler(plan: StudyPlan, search: SearchPlan) -> Any:
    s = plan.spec.scheduler
    if s.type == "fifo" or search.phase == "rerun":  # re-runs train to the end
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


def _settle_epoch(plan: StudyPlan, search: SearchPlan) -> int | None:
    """Where a batched searcher takes a trial's result: the first rung of early stopping,
    which every trial reaches (with hyperband too: each bracket's first rung is one of sha's
    rungs, never before the first, and its last bracket trains to the end); None (when it
    ends) without early stopping."""
    s = plan.spec.scheduler
    if s.type == "fifo" or search.phase == "rerun":
        return None
    rungs = rung_epochs(s.grace_period, s.reduction_factor, search.epochs)
    return rungs[0] if rungs else None


def _tpe_sampler(seed: int, n_trials: int, multivariate: bool = False) -> Any:
    """TPE with a start-up phase sized to the sweep: Optuna's default of 10 random trials would
    make every sweep of <= 10 trials a plain random search (benchmarks/asha_efficiency.py)."""
    import optuna

    startup = max(2, min(10, n_trials // 3))
    with warnings.catch_warnings():  # Optuna marks multivariate TPE experimental; the spec asked for it
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=multivariate)


class RecordedOptunaSearch(OptunaSearch):
    """Ray's OptunaSearch on an in-memory Optuna study (saved with Tune's snapshots, so a resume restores
    exactly the search Tune restores), mirrored trial by trial into the search's persisted study
    (`StudyMirror`) for optuna-dashboard and the report. Its trials also name their Ray trial and the
    epoch their value was told at (the first rung of early stopping, with batches)."""

    def __init__(self, *args: Any, mirror: StudyMirror | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mirror = mirror

    def _frozen(self, trial_id: str) -> Any:
        return self._ot_study.get_trials(deepcopy=False)[self._ot_trials[trial_id].number]

    def suggest(self, trial_id: str) -> dict | None:
        config = super().suggest(trial_id)
        self._ot_trials[trial_id].set_user_attr("ray_trial_id", trial_id)
        if self.mirror is not None:
            self.mirror.asked(self._frozen(trial_id))
        return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        super().on_trial_result(trial_id, result)
        if self.mirror is not None and trial_id not in self._completed_trials:
            self.mirror.reported(self._ot_trials[trial_id].number, result["training_iteration"], result[self.metric])

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if result and trial_id not in self._completed_trials:
            self._ot_trials[trial_id].set_user_attr("told_at_epoch", result.get("training_iteration"))
        super().on_trial_complete(trial_id, result=result, error=error)
        frozen = self._frozen(trial_id)
        if self.mirror is not None and frozen.state.is_finished():
            self.mirror.told(frozen)


def _optuna(plan: StudyPlan, search: SearchPlan, space: dict, target: OptunaTarget | None) -> OptunaSearch:
    """The search's own Optuna study, in memory; mirrored into the target's database when there is one."""
    mirror = None
    if target is not None:
        target.create(search)  # named and described
        mirror = StudyMirror(open_storage(target.url), target.study_name(search))
    return RecordedOptunaSearch(
        OptunaSearch.convert_search_space(space),
        metric=search.metric,
        mode=search.mode,
        sampler=_tpe_sampler(plan.spec.seed, search.n_trials, plan.spec.searcher.multivariate),
        mirror=mirror,
    )


def _searcher(plan: StudyPlan, search: SearchPlan, target: OptunaTarget | None = None) -> Searcher:
    seed = plan.spec.seed
    if search.fixed_configs is not None:
        return FixedConfigs(list(search.fixed_configs))
    space = {name: _domain(name, p) for name, p in search.space.items() if p.type != "grid"}
    if search.searcher == "grid":
        return FixedConfigs(grid_configs(space, _grids(search), search.grid_repeats, seed))
    if search.searcher == "random":
        return RandomConfigs(space, seed)
    optuna = _optuna(plan, search, space, target)
    if plan.spec.searcher.mode == "async":  # told results as trials finish: order-dependent
        return optuna
    return BatchedSearcher(optuna, plan.concurrency, search.n_trials, _settle_epoch(plan, search))


# id(data) -> (the data, the Ray session it was put in, its object): see trial_data.
_SHIPPED: dict[int, tuple[weakref.ref, str, Any]] = {}


def trial_data(data: TaskSplits) -> Any:
    """The (test-free) splits as one object in Ray's object store, put once per Ray session.

    Trials get its arrays as zero-copy read-only views (`TaskSplits.without_test` makes them
    plain ndarrays, which Ray shares instead of unpickling a copy per trial), so concurrent
    trials on a node read one copy. Every Tuner of a study ships the same data; putting it per
    Tuner would pin another copy each time (Tune's parameter registry never releases its objects).
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


def _tuner(plan: StudyPlan, trainable: Any, searcher: Any, scheduler: Any, run: dict[str, Any]) -> tune.Tuner:
    return tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            metric=run["metric"],
            mode=run["mode"],
            scheduler=scheduler,
            search_alg=searcher,
            num_samples=run["n_trials"],
            # Ray wraps the searcher in a ConcurrencyLimiter, which hands the limit to the
            # StagedSearcher: it leaves out trials paused at a rung of synchronous halving.
            max_concurrent_trials=plan.concurrency,
            # One actor per concurrent slot, reused by every trial of every variant in the Tuner.
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name=run["name"],
            storage_path=run["storage"],
            callbacks=[*_with_pruner(run["callbacks"]), *result_loggers()],
            stop={"training_iteration": run["epochs"]},  # each trial also stops at its variant's own epochs
            checkpoint_config=tune.CheckpointConfig(
                # Every epoch is checkpointed and CheckpointPruner deletes what no trial needs (its best
                # epoch by sptune.judging.ranking's rule, its latest, the one a resume's snapshot names): Tune's
                # num_to_keep would force a snapshot of the whole experiment per checkpoint.
                num_to_keep=None,
                # Tune's order of a trial's checkpoints: ranking by val_acc itself would put the *latest*
                # of tied epochs first, not the logged best.
                checkpoint_score_attribute=CHECKPOINT_RANK,
                checkpoint_score_order="max",
                checkpoint_frequency=1,
            ),
            failure_config=tune.FailureConfig(max_failures=plan.spec.max_failures),
            # Tune's CLIReporter with a line per stage (sptune.tuning.callbacks.terminal).
            **run_config_progress(run["name"], run["progress"], *run.get("shown", (run["metric"], run["mode"]))),
        ),
    )


def _with_pruner(callbacks: list) -> list:
    """The Tuner's callbacks with a CheckpointPruner last (after any SnapshotBundle it watches)."""
    if any(isinstance(c, CheckpointPruner) for c in callbacks):
        return list(callbacks)
    return [*callbacks, CheckpointPruner()]


# ---------------------------------------------------------------- the study's one Tuner

STUDY_EXPERIMENT = "study"  # the one Tuner's directory under the storage path


def staged_search(
    plan: StudyPlan,
    stages: list[Stage],
    checkpoints: StartingCheckpoints,
    selections: dict[str, list[Selection]],
    optuna: OptunaTarget | None = None,
) -> tuple[StagedSearcher, StageScheduler]:
    """Every stage its own searcher (re-runs get theirs when released; each Optuna search persisted in
    `optuna`'s database) and its own scheduler, routed by the `stage` each trial's config names."""
    searchers = {s.label: _searcher(plan, s.search, optuna) for s in stages if not s.is_rerun}
    fixed = {s.label: {**fixed_params(s.plan, plan.spec.seed), "stage": s.label} for s in stages}
    searcher = StagedSearcher(stages, searchers, fixed, checkpoints, selections)
    schedulers = {s.label: _scheduler(plan, s.plan) for s in stages}
    return searcher, StageScheduler(schedulers, plan.concurrency)


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
        tune.with_parameters(StudyTrainable, spec=plan.spec, data=trial_data(data), stage_data=own),
        {"cpu": res.cpu, "gpu": res.gpu},
    )


def build_study_tuner(
    plan: StudyPlan,
    data: TaskSplits,
    searcher: StagedSearcher,
    scheduler: StageScheduler,
    storage: str,
    callbacks: list,
) -> tune.Tuner:
    """The study's one Tuner. Its metric is bookkeeping only (every trial reports it): each stage's
    searcher, scheduler and selection rank by the stage's own metric."""
    stages = list(searcher.stages.values())
    # The terminal shows a line per stage, each ranked by its own metric.
    rows = [ProgressRow(s.label, s.budget, s.search.epochs, s.plan.metric, s.plan.mode, "stage") for s in stages]
    run = {"metric": CHECKPOINT_RANK, "mode": "max", "n_trials": sum(s.budget for s in stages),
           "name": STUDY_EXPERIMENT, "storage": storage, "callbacks": callbacks,
           "epochs": max(s.search.epochs for s in stages), "progress": rows,
           "shown": ("best_val_acc", "max")}  # the trial table's columns; each row names its own metric
    return _tuner(plan, study_trainable(plan, data), searcher, scheduler, run)


def restore_study_tuner(path: str, plan: StudyPlan, data: TaskSplits) -> tune.Tuner:
    """Continue the study's interrupted Tuner: the staged searcher comes back with what each stage had
    released and selected, and each stage's searcher with its own state."""
    use_tune_reporter()  # the saved RunConfig's progress reporter prints only with Tune's classic output
    return tune.Tuner.restore(path, trainable=study_trainable(plan, data), resume_unfinished=True, resume_errored=True)
