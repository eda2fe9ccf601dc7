"""Every per-stage searcher of the study's one Tuner, and how a search picks its own.

A stage's searcher proposes its trials' searched values: a given list (`FixedConfigs`: grids, re-runs per
seed), independent seeded draws (`RandomConfigs`), or Optuna's TPE (`RecordedOptunaSearch`), by default in
batches (`BatchedSearcher`) so that its proposals do not depend on the order trials finish in.
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import numpy as np
import optuna
from ray import tune
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from sptune.plan.phases import Phase
from sptune.plan.study_plan import SearchPlan, StudyPlan
from sptune.rules.rungs import rung_epochs
from sptune.rules.seeds import search_seeds
from sptune.spec import ParamSpace
from sptune.tracking.optuna_studies import OptunaStudyMirror, OptunaTarget, name_value, open_storage


class FixedConfigs(Searcher):
    """Hands out a given list of configs in order (grids, re-runs per seed)."""

    def __init__(self, configs: list[dict[str, Any]]) -> None:
        super().__init__()
        self.configs, self.next = [dict(c) for c in configs], 0

    def suggest(self, trial_id: str) -> dict[str, Any] | str:
        if self.next >= len(self.configs):
            return Searcher.FINISHED
        self.next += 1
        return dict(self.configs[self.next - 1])

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        pass  # the list does not learn from results


class RandomConfigs(Searcher):
    """Independent draws from Tune domains with a seeded stream (the `random` searcher)."""

    def __init__(self, space: dict[str, Any], seed: int) -> None:
        super().__init__()
        self.space, self.rng = space, np.random.RandomState(seed)

    def suggest(self, trial_id: str) -> dict[str, Any]:
        return {name: domain.sample(random_state=self.rng) for name, domain in self.space.items()}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        pass  # independent draws do not learn from results


def grid_configs(space: dict[str, Any], grids: dict[str, list], repeats: int, seed: int) -> list[dict[str, Any]]:
    """Every grid combination, `repeats` times, non-grid parameters drawn per config (as Ray's
    BasicVariantGenerator does for a grid_search with num_samples). Repeat r carries its own
    `seed` (seed + r): repeats of a grid point are distinct trainings, never replays."""
    rng = np.random.RandomState(seed)
    names = list(grids)
    configs = []
    for repeat_seed in search_seeds(seed, repeats):
        for values in itertools.product(*(grids[n] for n in names)):
            drawn = {name: d.sample(random_state=rng) for name, d in space.items()}
            configs.append({**drawn, **dict(zip(names, values, strict=True)), "seed": repeat_seed})
    return configs


class BatchedSearcher(Searcher):
    """Wraps one stage's Optuna searcher so it proposes in batches of `batch_size`: then nothing until every
    trial of the batch has settled (reached `settle_epoch`, or ended), whose results it then tells the inner
    searcher in the order it proposed them, not the order they finished in (docs/design/tuning.md)."""

    def __init__(self, inner: Searcher, batch_size: int, n_trials: int, settle_epoch: int | None) -> None:
        super().__init__(metric=inner.metric, mode=inner.mode)
        self.inner, self.batch_size, self.n_trials = inner, batch_size, n_trials
        self.settle_epoch = settle_epoch  # None: a trial settles when it ends
        self.proposed = 0
        self.batch: list[str] = []  # the current batch's trials, in the order they were proposed
        self.settled: dict[str, tuple[dict | None, bool]] = {}  # trial -> (result, error)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return True  # the inner searcher was built with its own space, metric and mode

    def _batch_full(self) -> bool:
        """The current batch has all its trials (the last batch may be smaller)."""
        first = self.proposed - len(self.batch)
        return len(self.batch) >= min(self.batch_size, self.n_trials - first)

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self.proposed >= self.n_trials:
            return Searcher.FINISHED
        if self._batch_full():
            return None  # waiting for this batch: the caller asks another stage, or later
        config = self.inner.suggest(trial_id)
        if config not in (None, Searcher.FINISHED):
            self.batch.append(trial_id)
            self.proposed += 1
        return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        # Intermediate results are not forwarded: TPE learns from final values only.
        if self.settle_epoch is not None and result.get("training_iteration", 0) >= self.settle_epoch:
            self._settle(trial_id, result, False)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self._settle(trial_id, result, error)  # ignored if it settled at the first rung

    def _settle(self, trial_id: str, result: dict | None, error: bool) -> None:
        if trial_id not in self.batch or trial_id in self.settled:
            return
        self.settled[trial_id] = (dict(result) if result else None, error)
        if self._batch_full() and len(self.settled) == len(self.batch):
            for done in self.batch:  # trial order, not finish order
                result, error = self.settled[done]
                self.inner.on_trial_complete(done, result=result, error=error)
            self.batch, self.settled = [], {}


def tpe_sampler(seed: int, n_trials: int, multivariate: bool = False) -> Any:
    """TPE with a start-up phase sized to the search: Optuna's default of 10 random trials would
    make every search of <= 10 trials a plain random search."""
    startup = max(2, min(10, n_trials // 3))
    with warnings.catch_warnings():  # Optuna marks multivariate TPE experimental; the spec asked for it
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=multivariate)


class RecordedOptunaSearch(OptunaSearch):
    """Ray's OptunaSearch on an in-memory Optuna study (saved with Tune's snapshots, so a resume restores
    exactly the search Tune restores), mirrored trial by trial into the search's persisted study
    (`OptunaStudyMirror`) for optuna-dashboard and the report. Its study names the value it is told
    (`told_value`); its trials also name their Ray trial and the epoch their value was told at."""

    def __init__(self, *args: Any, mirror: OptunaStudyMirror | None = None, value_name: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mirror = mirror
        if value_name is not None:
            name_value(self._ot_study, value_name)

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


def told_value(plan: StudyPlan, search: SearchPlan) -> str:
    """What the search's Optuna study is told of each trial, by its true name: a batched search with early
    stopping is told the best-so-far score at the first rung, not at the epoch selection later picks."""
    at = settle_epoch(plan, search) if plan.spec.searcher.mode == "batched" else None
    if at is None:
        return f"{search.metric} when the trial ended"
    unit = "round" if search.budget is not None and search.budget.unit == "steps" else "epoch"
    return f"{search.metric} at {unit} {at} (the first rung)"


def _optuna(plan: StudyPlan, search: SearchPlan, space: dict, target: OptunaTarget | None) -> OptunaSearch:
    """The search's own Optuna study, in memory; mirrored into the target's database when there is one."""
    mirror, value = None, told_value(plan, search)
    if target is not None:
        target.create(search, value)  # named and described
        mirror = OptunaStudyMirror(open_storage(target.url), target.study_name(search))
    return RecordedOptunaSearch(
        OptunaSearch.convert_search_space(space),
        metric=search.metric,
        mode=search.mode,
        sampler=tpe_sampler(plan.spec.seed, search.n_trials, plan.spec.searcher.multivariate),
        mirror=mirror,
        value_name=value,
    )


def _domain(name: str, p: ParamSpace) -> Any:
    """A searched parameter as a Tune domain (grids are expanded by `grid_configs`)."""
    cast = int if name == "batch_size" else float
    if p.type == "loguniform":
        return tune.loguniform(p.low, p.high)
    if p.type == "uniform":
        return tune.uniform(p.low, p.high)
    return tune.choice([cast(v) for v in p.values])


def _grids(search: SearchPlan) -> dict[str, list]:
    cast = {"batch_size": int}
    return {n: [cast.get(n, float)(v) for v in p.values] for n, p in search.space.items() if p.type == "grid"}


def settle_epoch(plan: StudyPlan, search: SearchPlan) -> int | None:
    """Where a batched searcher takes a trial's result: the first rung of early stopping, which every trial
    reaches (with hyperband too: no bracket's first rung comes before it); None (when it ends) without."""
    s = plan.spec.scheduler
    if s.type == "fifo" or search.phase == Phase.RERUN:
        return None
    rungs = rung_epochs(s.grace_period, s.reduction_factor, search.epochs)
    return rungs[0] if rungs else None


def searcher_for(plan: StudyPlan, search: SearchPlan, target: OptunaTarget | None = None) -> Searcher:
    """The search's own searcher, as its spec section asks; an Optuna search is persisted in `target`'s
    database (None: in memory only)."""
    seed = plan.spec.seed
    if search.fixed_configs is not None:
        return FixedConfigs(list(search.fixed_configs))
    space = {name: _domain(name, p) for name, p in search.space.items() if p.type != "grid"}
    if search.searcher == "grid":
        return FixedConfigs(grid_configs(space, _grids(search), search.grid_repeats, seed))
    if search.searcher == "random":
        return RandomConfigs(space, seed)
    tpe = _optuna(plan, search, space, target)
    if plan.spec.searcher.mode == "async":  # told results as trials finish: order-dependent
        return tpe
    return BatchedSearcher(tpe, plan.spec.searcher.batch_size, search.n_trials, settle_epoch(plan, search))
