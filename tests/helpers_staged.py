"""The study's staged searcher driven as Tune drives it, without Ray: what the seed-robust selection and LR
extension tests run their stages through."""

from __future__ import annotations

import random
from types import SimpleNamespace

from ray.tune.search import Searcher

from sptune.judging.selection import TrialOutcome
from sptune.tasks.base import TaskInfo
from sptune.tuning.tuner import staged_search

DIGITS = TaskInfo("digits", "continuous", 64, 10, levels=17)


def run(plan, stages, score, order: int = 0, concurrent: int = 2, selections=None, ranked=None) -> tuple:
    """What Tune does with the staged searcher: ask, run, tell; a live trial picked by `order` ends whenever
    no new one can start. (The stages' ledger, every trial's config by id)."""
    searcher, _ = staged_search(plan, stages, {}, selections or {}, None, ranked)
    pick, live, configs = random.Random(order), [], {}

    def end(trial_id: str) -> None:
        config = configs[trial_id]
        value, diverged = score(config)
        epoch = {"val_acc": value, "val_loss": 1 - value, "epoch": 4}
        index = int(trial_id[1:]) + 1
        metrics = {"trial_id": trial_id, "experiment_tag": f"{index}_x", "training_iteration": 4, "diverged": diverged}
        kept = [] if diverged else [(SimpleNamespace(path=f"/ckpt/{trial_id}"), epoch)]
        searcher.on_trial_complete(trial_id, {**config, "best_val_acc": value})
        searcher.ledger.trial_ended(trial_id, TrialOutcome(config, metrics, None, "", kept))

    while True:
        trial_id = f"t{len(configs):03d}"
        config = searcher.suggest(trial_id) if len(live) < concurrent else None
        if config == Searcher.FINISHED:
            break
        if config is not None:
            configs[trial_id] = config
            live.append(trial_id)
            continue
        assert live, "the searcher waits, but no trial is running: the study would hang"
        end(live.pop(pick.randrange(len(live))))
    for trial_id in live:
        end(trial_id)
    return searcher.ledger, configs
