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
from typing import Any

import numpy as np
from ray.tune.search import Searcher

from sptune.plan.seeds import search_seeds


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
