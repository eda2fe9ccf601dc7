"""One Ray Tune Tuner per stage: search space, searcher, ASHA, checkpoints, callbacks."""

from __future__ import annotations

from typing import Any

from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.search import ConcurrencyLimiter
from ray.tune.search.optuna import OptunaSearch

from sptune.plan import StagePlan, StudyPlan
from sptune.spec import ParamSpace
from sptune.tasks.base import TaskSplits
from sptune.trainables import FinetuneTrainable, PretrainTrainable


def _domain(name: str, p: ParamSpace) -> Any:
    cast = int if name == "batch_size" else float
    if p.type == "loguniform":
        return tune.loguniform(p.low, p.high)
    if p.type == "uniform":
        return tune.uniform(p.low, p.high)
    values = [cast(v) for v in p.values]
    return tune.grid_search(values) if p.type == "grid" else tune.choice(values)


def param_space(stage: StagePlan, seed: int) -> dict[str, Any]:
    space = {name: _domain(name, p) for name, p in stage.search.items()}
    return {**space, "stage": stage.stage, "variant": stage.variant, "seed": seed, **stage.static}


def _scheduler(plan: StudyPlan, stage: StagePlan) -> Any:
    s = plan.spec.scheduler
    if s.type == "asha" and stage.stage != "seed":  # seed re-runs train to the end
        # A scheduler per Tuner: ASHA compares trials of this variant only.
        return ASHAScheduler(
            time_attr="training_iteration",
            max_t=stage.epochs,
            grace_period=s.grace_period,
            reduction_factor=s.reduction_factor,
        )
    return FIFOScheduler()


def _tpe_sampler(seed: int, n_trials: int) -> Any:
    """TPE with a start-up phase sized to the sweep: Optuna's default of 10 random trials would
    make every sweep of <= 10 trials a plain random search (benchmarks/asha_efficiency.py)."""
    import optuna

    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(2, min(10, n_trials // 3)))


def _search_alg(plan: StudyPlan, stage: StagePlan) -> Any:
    if stage.searcher == "grid":
        return None  # Ray's BasicVariantGenerator expands grid_search
    if stage.searcher == "optuna":
        alg = OptunaSearch(sampler=_tpe_sampler(plan.spec.seed, stage.n_trials))
    else:
        from ray.tune.search.basic_variant import BasicVariantGenerator

        return BasicVariantGenerator(random_state=plan.spec.seed, max_concurrent=plan.concurrency)
    return ConcurrencyLimiter(alg, max_concurrent=plan.concurrency)


def make_trainable(plan: StudyPlan, stage: StagePlan, data: TaskSplits, spt_checkpoint: str | None = None) -> Any:
    cls = PretrainTrainable if stage.stage == "pretrain" else FinetuneTrainable  # "seed" re-runs finetune
    extra = {"spt_checkpoint": spt_checkpoint} if spt_checkpoint else {}
    res = plan.spec.resources
    # with_parameters puts the (test-free) data in Ray's object store once, not per trial.
    return tune.with_resources(
        tune.with_parameters(cls, spec=plan.spec, data=data.without_test(), **extra),
        {"cpu": res.cpu, "gpu": res.gpu},
    )


def restore_tuner(
    path: str, plan: StudyPlan, stage: StagePlan, data: TaskSplits, spt_checkpoint: str | None = None
) -> tune.Tuner:
    """Continue an interrupted stage: finished trials stay, unfinished ones resume from
    their last checkpoint, errored ones too. (ASHA's rung state is not restored by Ray.)"""
    return tune.Tuner.restore(
        path, trainable=make_trainable(plan, stage, data, spt_checkpoint), resume_unfinished=True, resume_errored=True
    )


def build_tuner(
    plan: StudyPlan,
    stage: StagePlan,
    data: TaskSplits,
    storage: str,
    callbacks: list,
    spt_checkpoint: str | None = None,
) -> tune.Tuner:
    return tune.Tuner(
        make_trainable(plan, stage, data, spt_checkpoint),
        param_space=param_space(stage, plan.spec.seed),
        tune_config=tune.TuneConfig(
            metric=stage.metric,
            mode=stage.mode,
            scheduler=_scheduler(plan, stage),
            search_alg=_search_alg(plan, stage),
            num_samples=stage.num_samples,
            # Grids need Tune's own limit; searchers are wrapped in a ConcurrencyLimiter.
            max_concurrent_trials=plan.concurrency if stage.searcher == "grid" else None,
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name=stage.name,
            storage_path=storage,
            callbacks=callbacks,
            stop={"training_iteration": stage.epochs},
            checkpoint_config=tune.CheckpointConfig(
                num_to_keep=1,  # the best by the stage metric (Ray also keeps the latest for restore)
                checkpoint_score_attribute=stage.metric,
                checkpoint_score_order=stage.mode,
                checkpoint_frequency=1,
            ),
            failure_config=tune.FailureConfig(max_failures=plan.spec.max_failures),
            verbose=0,
        ),
    )
