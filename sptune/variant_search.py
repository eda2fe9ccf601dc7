"""Several variants in one Tuner, each with its own search and its own early stopping.

Starting a Tune actor costs ~2.9 s (importing torch and Ray Tune, then torch._dynamo
on the first optimizer), and an actor lives only as long as its Tuner. One Tuner per variant
paid that again for every variant and every re-run (benchmarks/sweep_overhead.py). In one
shared Tuner the reused actors train every variant, while each variant keeps what makes the
comparison fair: its own searcher (its own Optuna study, grid or random stream, its own
trial budget) and its own ASHA brackets, so variants never compete for promotion.
"""

from __future__ import annotations

import itertools
import pickle
from typing import Any

import numpy as np
from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher

from sptune.seeds import search_seeds


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
    that still have trials left, and routes every result back to the searcher that made it."""

    def __init__(self, searchers: dict[str, Searcher], budgets: dict[str, int], fixed: dict[str, dict]) -> None:
        super().__init__()
        self.searchers, self.budgets, self.fixed = searchers, dict(budgets), fixed
        self.suggested = dict.fromkeys(searchers, 0)
        self.owner: dict[str, str] = {}
        self.turn = 0

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return True  # every variant's searcher was built with its own space, metric and mode

    def _open(self) -> list[str]:
        return [n for n in self.searchers if self.suggested[n] < self.budgets[n]]

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        names = list(self.searchers)
        for offset in range(len(names)):
            name = names[(self.turn + offset) % len(names)]
            if self.suggested[name] >= self.budgets[name]:
                continue
            config = self.searchers[name].suggest(trial_id)
            if config == Searcher.FINISHED:  # ran out before its budget (e.g. a short grid)
                self.budgets[name] = self.suggested[name]
                continue
            if config is None:  # this variant is at its concurrency limit: try the next one
                continue
            self.turn = (names.index(name) + 1) % len(names)
            self.suggested[name] += 1
            self.owner[trial_id] = name
            return {**self.fixed[name], **config}  # a given config (a re-run, a grid repeat) names its own seed
        return None if self._open() else Searcher.FINISHED

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self.owner:
            self.searchers[self.owner[trial_id]].on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
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


class VariantScheduler(FIFOScheduler):
    """One scheduler per variant (e.g. ASHA): a trial is only ever compared with trials of its
    own variant. Trials pick up in FIFO order across variants."""

    _supports_buffered_results = False  # ASHA must see every epoch's result

    def __init__(self, schedulers: dict[str, TrialScheduler]) -> None:
        super().__init__()
        self.schedulers = schedulers

    def _of(self, trial: Any) -> TrialScheduler:
        return self.schedulers[trial.config["variant"]]

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        return all([s.set_search_properties(metric, mode, **spec) for s in self.schedulers.values()])

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

    def debug_string(self) -> str:
        return "\n".join(f"{name}: {s.debug_string()}" for name, s in self.schedulers.items())
