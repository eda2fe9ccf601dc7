"""Ray Tune Tuners: the study's one Tuner of all its stages (`sptune.stages`: pretraining, every
variant's search, the re-runs per seed), or a Tuner of given searches (benchmarks, tests); per-stage
searchers and early stopping, checkpoints, callbacks."""

from __future__ import annotations

from typing import Any

from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from sptune.batched_search import BatchedSearcher
from sptune.halving import SuccessiveHalving, rung_epochs
from sptune.plan import SearchPlan, StudyPlan, TunerPlan
from sptune.progress import ProgressRow, run_config_progress, use_tune_reporter
from sptune.selection import Selection
from sptune.spec import ParamSpace
from sptune.stages import Checkpoints, Stage, StagedSearcher
from sptune.tasks.base import TaskSplits
from sptune.trainables import CHECKPOINT_RANK, FinetuneTrainable, PretrainTrainable, StudyTrainable
from sptune.variant_search import FixedConfigs, RandomConfigs, VariantScheduler, VariantSearcher, grid_configs


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
    return {"phase": search.phase, "variant": search.trial_variant, "seed": seed, **objective}


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
    return SuccessiveHalving(
        search.n_trials, search.epochs, s.grace_period, s.reduction_factor, search.metric, search.mode
    )


def _settle_epoch(plan: StudyPlan, search: SearchPlan) -> int | None:
    """Where a batched searcher takes a trial's result: the first rung of early stopping,
    which every trial reaches; None (when it ends) without early stopping."""
    s = plan.spec.scheduler
    if s.type == "fifo" or search.phase == "rerun":
        return None
    rungs = rung_epochs(s.grace_period, s.reduction_factor, search.epochs)
    return rungs[0] if rungs else None


def _tpe_sampler(seed: int, n_trials: int) -> Any:
    """TPE with a start-up phase sized to the sweep: Optuna's default of 10 random trials would
    make every sweep of <= 10 trials a plain random search (benchmarks/asha_efficiency.py)."""
    import optuna

    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(2, min(10, n_trials // 3)))


def _searcher(plan: StudyPlan, search: SearchPlan) -> Searcher:
    seed = plan.spec.seed
    if search.fixed_configs is not None:
        return FixedConfigs(list(search.fixed_configs))
    space = {name: _domain(name, p) for name, p in search.space.items() if p.type != "grid"}
    if search.searcher == "grid":
        return FixedConfigs(grid_configs(space, _grids(search), search.grid_repeats, seed))
    if search.searcher == "random":
        return RandomConfigs(space, seed)
    optuna = OptunaSearch(
        OptunaSearch.convert_search_space(space),
        metric=search.metric,
        mode=search.mode,
        sampler=_tpe_sampler(seed, search.n_trials),
    )
    if plan.spec.searcher.mode == "async":  # told results as trials finish: order-dependent
        return optuna
    return BatchedSearcher(optuna, plan.concurrency, search.n_trials, _settle_epoch(plan, search))


def search_and_schedule(plan: StudyPlan, tuner: TunerPlan) -> tuple[VariantSearcher, VariantScheduler]:
    """Each variant its own searcher and its own scheduler, inside the one Tuner."""
    searches = {s.trial_variant: s for s in tuner.searches}
    searcher = VariantSearcher(
        {v: _searcher(plan, s) for v, s in searches.items()},
        {v: s.n_trials for v, s in searches.items()},
        {v: fixed_params(s, plan.spec.seed) for v, s in searches.items()},
    )
    schedulers = {v: _scheduler(plan, s) for v, s in searches.items()}
    return searcher, VariantScheduler(schedulers, plan.concurrency)


def make_trainable(
    plan: StudyPlan, tuner: TunerPlan, data: TaskSplits, spt_checkpoints: dict[str, str] | None = None
) -> Any:
    cls = PretrainTrainable if tuner.pretraining else FinetuneTrainable  # a pretraining's search or re-runs
    extra = {"spt_checkpoints": spt_checkpoints} if spt_checkpoints else {}
    res = plan.spec.resources
    # with_parameters puts the (test-free) data in Ray's object store once, not per trial.
    return tune.with_resources(
        tune.with_parameters(cls, spec=plan.spec, data=data.without_test(), **extra),
        {"cpu": res.cpu, "gpu": res.gpu},
    )


def restore_tuner(
    path: str, plan: StudyPlan, tuner: TunerPlan, data: TaskSplits, spt_checkpoints: dict[str, str] | None = None
) -> tune.Tuner:
    """Continue an interrupted Tuner: finished trials stay, unfinished ones resume from their
    last checkpoint, errored ones too; each variant's searcher continues from its saved
    state. (Ray restores no scheduler's state: neither ASHA's rungs nor synchronous halving's.)"""
    use_tune_reporter()  # the saved RunConfig's progress reporter prints only with Tune's classic output
    return tune.Tuner.restore(
        path, trainable=make_trainable(plan, tuner, data, spt_checkpoints), resume_unfinished=True, resume_errored=True
    )


def _tuner(plan: StudyPlan, trainable: Any, searcher: Any, scheduler: Any, run: dict[str, Any]) -> tune.Tuner:
    return tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            metric=run["metric"],
            mode=run["mode"],
            scheduler=scheduler,
            search_alg=searcher,
            num_samples=run["n_trials"],
            # Ray wraps the searcher in a ConcurrencyLimiter, which hands the limit to
            # VariantSearcher: it leaves out trials paused at a rung of synchronous halving.
            max_concurrent_trials=plan.concurrency,
            # One actor per concurrent slot, reused by every trial of every variant in the Tuner.
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name=run["name"],
            storage_path=run["storage"],
            callbacks=run["callbacks"],
            stop={"training_iteration": run["epochs"]},  # each trial also stops at its variant's own epochs
            checkpoint_config=tune.CheckpointConfig(
                # The trial's best epoch by sptune.ranking's rule (Ray also keeps the latest for restore):
                # ranking by val_acc itself would keep the *latest* of tied epochs, not the logged best.
                num_to_keep=1,
                checkpoint_score_attribute=CHECKPOINT_RANK,
                checkpoint_score_order="max",
                checkpoint_frequency=1,
            ),
            failure_config=tune.FailureConfig(max_failures=plan.spec.max_failures),
            # Tune's CLIReporter with a line per variant, every SPTUNE_PROGRESS_SECONDS (sptune.progress).
            **run_config_progress(run["name"], run["progress"], *run.get("shown", (run["metric"], run["mode"]))),
        ),
    )


def build_tuner(
    plan: StudyPlan,
    tuner: TunerPlan,
    data: TaskSplits,
    storage: str,
    callbacks: list,
    spt_checkpoints: dict[str, str] | None = None,
) -> tune.Tuner:
    """One Tuner of the given searches (all pretraining or all finetuning)."""
    searcher, scheduler = search_and_schedule(plan, tuner)
    run = {"metric": tuner.metric, "mode": tuner.mode, "n_trials": tuner.n_trials, "name": tuner.experiment,
           "storage": storage, "callbacks": callbacks, "epochs": tuner.epochs,
           "progress": [ProgressRow(s.trial_variant, s.n_trials, s.epochs) for s in tuner.searches]}
    return _tuner(plan, make_trainable(plan, tuner, data, spt_checkpoints), searcher, scheduler, run)


# ---------------------------------------------------------------- the study's one Tuner

STUDY_EXPERIMENT = "study"  # the one Tuner's directory under the storage path


def staged_search(
    plan: StudyPlan, stages: list[Stage], checkpoints: Checkpoints, selections: dict[str, list[Selection]]
) -> tuple[StagedSearcher, VariantScheduler]:
    """Every stage its own searcher (re-runs get theirs when released) and its own scheduler, routed by
    the `stage` each trial's config names."""
    searchers = {s.label: _searcher(plan, s.search) for s in stages if not s.is_rerun}
    fixed = {s.label: {**fixed_params(s.plan, plan.spec.seed), "stage": s.label} for s in stages}
    searcher = StagedSearcher(stages, searchers, fixed, checkpoints, selections)
    schedulers = {s.label: _scheduler(plan, s.plan) for s in stages}
    return searcher, VariantScheduler(schedulers, plan.concurrency, key="stage")


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
        tune.with_parameters(StudyTrainable, spec=plan.spec, data=data.without_test(), stage_data=own),
        {"cpu": res.cpu, "gpu": res.gpu},
    )


def build_study_tuner(
    plan: StudyPlan, data: TaskSplits, searcher: StagedSearcher, scheduler: VariantScheduler, storage: str,
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
    return tune.Tuner.restore(
        path, trainable=study_trainable(plan, data), resume_unfinished=True, resume_errored=True
    )
