"""Several variants in one Tuner, each with its own search and its own early stopping.

Starting a Tune actor costs ~2.9 s (importing torch and Ray Tune, then torch._dynamo
on the first optimizer), and an actor lives only as long as its Tuner. One Tuner per variant
paid that again for every variant and every re-run (benchmarks/sweep_overhead.py). In one
shared Tuner the reused actors train every variant, while each variant keeps what makes the
comparison fair: its own searcher (its own Optuna study, grid or random stream, its own
trial budget) and its own early stopping (synchronous halving or ASHA), so variants never
compete for promotion.
"""

from __future__ import annotations

import itertools
import math
import pickle
from typing import Any

import numpy as np
from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher

from sptune.plan.seeds import search_seeds
from sptune.tuning.schedulers.halving import trial_index


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


class VariantSearcher(Searcher):
    """Routes each suggestion to one variant's own searcher, round-robin over the variants
    that still have trials left, and routes every result back to the searcher that made it.

    It also limits how many trials run at once (Tune's ConcurrencyLimiter hands that job to
    it through `set_max_concurrency`): unlike the ConcurrencyLimiter it does not count a trial
    paused at a rung of synchronous halving (`on_pause`), which would otherwise hold its slot
    while waiting for trials that could then never start."""

    def __init__(self, searchers: dict[str, Searcher], budgets: dict[str, int], fixed: dict[str, dict]) -> None:
        super().__init__()
        self.searchers, self.budgets, self.fixed = searchers, dict(budgets), fixed
        self.suggested = dict.fromkeys(searchers, 0)
        self.owner: dict[str, str] = {}
        self.turn = 0
        self.max_concurrent: int | None = None
        self.live: set[str] = set()  # suggested, not yet ended
        self.paused: set[str] = set()  # live, but waiting at a rung without a slot

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        self.max_concurrent = max_concurrent
        return True  # we limit, so Ray's ConcurrencyLimiter around us does not

    def on_pause(self, trial_id: str) -> None:
        self.paused.add(trial_id)

    def on_unpause(self, trial_id: str) -> None:
        self.paused.discard(trial_id)

    def _at_limit(self) -> bool:
        return self.max_concurrent is not None and len(self.live - self.paused) >= self.max_concurrent

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return True  # every variant's searcher was built with its own space, metric and mode

    def _open(self) -> list[str]:
        return [n for n in self.searchers if self.suggested[n] < self.budgets[n]]

    def _order(self) -> list[str]:
        """The searchers in the order they are asked: round-robin, from the one after the last to suggest."""
        names = list(self.searchers)
        return names[self.turn :] + names[: self.turn]

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self._at_limit():
            return None if self._open() else Searcher.FINISHED
        names = list(self.searchers)
        for name in self._order():
            if self.suggested[name] >= self.budgets[name]:
                continue
            config = self.searchers[name].suggest(trial_id)
            if config == Searcher.FINISHED:  # ran out before its budget (e.g. a short grid)
                self.budgets[name] = self.suggested[name]
                continue
            if config is None:  # this variant waits for results (its batch): try the next one
                continue
            self.turn = (names.index(name) + 1) % len(names)
            self.suggested[name] += 1
            self.owner[trial_id] = name
            self.live.add(trial_id)
            return {**self.fixed[name], **config}  # a given config (a re-run, a grid repeat) names its own seed
        return None if self._open() else Searcher.FINISHED

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self.owner:
            self.searchers[self.owner[trial_id]].on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self.live.discard(trial_id)
        self.paused.discard(trial_id)
        if trial_id in self.owner:
            self.searchers[self.owner[trial_id]].on_trial_complete(trial_id, result=result, error=error)

    # Tune saves the searcher with the experiment state so Tuner.restore continues each
    # variant's search (Optuna's history included) where it stopped.
    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.__dict__, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.__dict__.update(pickle.load(f))  # our own file, written by save() above
        self.paused = set()  # Tuner.restore queues every unfinished trial to run again


class _VariantTrials:
    """The Tune controller as one variant's scheduler sees it when choosing what to run: only
    that variant's trials still to finish (a FIFO or ASHA scheduler would otherwise resume another
    variant's trial that synchronous halving keeps waiting at a rung). Kept across the controller's
    steps and updated from where it left off: choosing is done every step, and rescanning every
    trial of every variant each time grew with the study's trial count (benchmarks/driver_scale.py)."""

    def __init__(self, tune_controller: Any, variant: str, key: str = "variant") -> None:
        self._controller, self._variant, self._key = tune_controller, variant, key
        # Tune hands schedulers a new wrapper of its controller every step, around the same trial list:
        # the list (it only grows) is what the view follows.
        self._source: list | None = None
        self._seen = 0  # how many of the list's trials were looked at
        self._open: list = []  # this variant's trials, in the controller's order, not yet ended

    def get_trials(self) -> list:
        trials = self._controller.get_trials()
        if trials is not self._source:
            self._source, self._seen, self._open = trials, 0, []
        for trial in trials[self._seen :]:
            if trial.config.get(self._key) == self._variant:
                self._open.append(trial)
        self._seen = len(trials)
        # An ended trial never runs again in this controller: only PENDING and PAUSED ones are chosen.
        self._open = [t for t in self._open if t.status not in (Trial.TERMINATED, Trial.ERROR)]
        return self._open

    def __getattr__(self, name: str) -> Any:
        return getattr(self._controller, name)


class VariantScheduler(FIFOScheduler):
    """One scheduler per variant (synchronous halving, ASHA or FIFO): a trial is only ever
    compared with trials of its own variant. Among what the variants' schedulers would run
    next, the trial created first goes first. `key` is the config entry that names a trial's
    scheduler: its `variant`, or in a study's one Tuner its `stage` (`sptune.tuning.stages`)."""

    _supports_buffered_results = False  # early stopping must see every epoch's result

    def __init__(
        self, schedulers: dict[str, TrialScheduler], max_concurrent: int | None = None, key: str = "variant"
    ) -> None:
        super().__init__()
        self.schedulers, self.max_concurrent, self.key = schedulers, max_concurrent, key

    def _of(self, trial: Any) -> TrialScheduler:
        return self.schedulers[trial.config[self.key]]

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        # A scheduler built with its own search's metric keeps it: in a study's one Tuner the Tuner's
        # metric is bookkeeping only. One built without takes the Tuner's.
        unset = [s for s in self.schedulers.values() if getattr(s, "_metric", None) is None]
        return all([s.set_search_properties(metric, mode, **spec) for s in unset])

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        self._of(trial).on_trial_add(tune_controller, trial)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self._of(trial).on_trial_error(tune_controller, trial)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        return self._of(trial).on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        self._of(trial).on_trial_complete(tune_controller, trial, result)

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        self._of(trial).on_trial_remove(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        picks = [s.choose_trial_to_run(self._view(tune_controller, v)) for v, s in self.schedulers.items()]
        picks = [t for t in picks if t is not None]
        if not picks:
            return None
        trial = min(picks, key=trial_index)
        # Tune starts every PENDING trial anyway; resuming a paused one is ours to hold back
        # while the concurrency limit is reached (several may be promoted at once).
        if trial.status == Trial.PAUSED and self._busy(tune_controller) >= (self.max_concurrent or math.inf):
            return None
        return trial

    def _view(self, tune_controller: Any, variant: str) -> _VariantTrials:
        views = self.__dict__.setdefault("_views", {})  # not in __init__: a scheduler unpickled by restore
        view = views.get(variant)
        if view is None:
            view = views[variant] = _VariantTrials(tune_controller, variant, self.key)
        view._controller = tune_controller  # this step's wrapper; its trial list is the same
        return view

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_views"}  # this driver's controller only

    @staticmethod
    def _busy(tune_controller: Any) -> int:
        return sum(t.status in (Trial.RUNNING, Trial.PENDING) for t in tune_controller.get_trials())

    def debug_string(self) -> str:
        return "\n".join(f"{name}: {s.debug_string()}" for name, s in self.schedulers.items())
