"""The same spec and seed select the same configurations, in whatever order trials finish.

The same tiny study (two variants in one Tuner, 6 and 5 Optuna trials, 3 at a time) runs twice
through the CLI: once as it is, once with every trial of batch size 32 slowed down, so that
trials reach rungs and finish in another order. With the default decisions (batched TPE,
synchronous halving) both runs must propose the same trials, stop the same ones at the same
epochs and select the same config and epoch per variant.

With the asynchronous ones (`SPTUNE_REPRO_DECISIONS="--set scheduler.type=asha --set
searcher.mode=async"`, what sptune did before) this test fails: on a quiet machine scratch's
first trial (batch 32) reaches ASHA's first rung first and is promoted, slowed down it arrives
after a batch-64 trial that scores higher there and is stopped, so another config is selected.

The delay needs no hook in sptune: the Tuner's trainable is swapped for a subclass defined
here, which Ray ships to its workers by value (this module is not importable there).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from ray import cloudpickle

import sptune.tuners
from sptune.sweep import main
from sptune.trainables import FinetuneTrainable

TINY = [
    "--set", "pretrain.epochs=0",  # spt then starts from the untrained (seeded) encoder: no pretraining Tuner
    "--set", "finetune.epochs=4", "--set", "variants.scratch.num_samples=6", "--set", "variants.spt.num_samples=5",
    "--set", "variants.spt.search.lr.low=3.0e-4",  # its own space and budget (the last batch is smaller)
    "--set", "scheduler.grace_period=1", "--set", "scheduler.reduction_factor=2", "--set", "model.n_layers=1",
    "--set", "rerun_seeds=1",
    # Three slots (on 2 CPUs): with two, each variant's first trial would run alone at first, and
    # the first trial to reach a rung is never stopped, so finish order could not matter there.
    "--set", "resources.cpu=0.5", "--set", "resources.max_concurrent=3",
]
DEFAULTS = ["--set", "scheduler.type=sha", "--set", "searcher.mode=batched"]  # the shipped spec names asha
DECISIONS = os.environ.get("SPTUNE_REPRO_DECISIONS", "").split() or DEFAULTS

SLOW_BATCH_SIZE = 32  # about half the trials
SLOW_EPOCH_S = 2.0


class SlowTrials(FinetuneTrainable):
    """A finetuning trial that sleeps before every epoch when its batch size is SLOW_BATCH_SIZE."""

    def step(self) -> dict:
        if int(self.config["batch_size"]) == SLOW_BATCH_SIZE:
            time.sleep(SLOW_EPOCH_S)
        return super().step()


def run_study(spec: str, out: Path, overrides: list[str], slow: bool) -> dict:
    """Run the study through the CLI; with `slow`, on SlowTrials. Returns what it decided."""
    # Pickled by value: Ray's workers cannot import this module.
    original = sptune.tuners.FinetuneTrainable
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    sptune.tuners.FinetuneTrainable = SlowTrials if slow else original
    try:
        start = time.perf_counter()
        assert main([spec, "--output", str(out), *overrides]) == 0
        wall = time.perf_counter() - start
    finally:
        sptune.tuners.FinetuneTrainable = original
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    return {**decisions(out), "wall_s": wall}


def decisions(out: Path) -> dict:
    """Per variant: the selected lr, batch size and epoch, and every trial's config and epochs."""
    rows = json.loads((out / "results.json").read_text())["rows"]
    selected = {r["variant"]: (round(r["lr"], 12), r["batch_size"], r["best_epoch"]) for r in rows}
    trials = []
    for result in (out / "ray_results" / "search").glob("*/result.json"):
        lines = [json.loads(line) for line in result.read_text().splitlines()]
        config = lines[0]["config"]
        trials.append((config["variant"], round(config["lr"], 12), config["batch_size"], len(lines)))
    return {"selected": selected, "trials": sorted(trials)}


@pytest.fixture(scope="module")
def spec(repo_root) -> str:
    return str(Path(repo_root) / "search_spaces" / "digits_quick.yaml")


def test_a_delay_in_some_trials_changes_no_decision(ray_session, spec, tmp_path):
    quiet = run_study(spec, tmp_path / "quiet", TINY + DECISIONS, slow=False)
    loaded = run_study(spec, tmp_path / "loaded", TINY + DECISIONS, slow=True)
    print(f"\nquiet  {quiet['wall_s']:.0f}s selected {quiet['selected']}")
    print(f"loaded {loaded['wall_s']:.0f}s selected {loaded['selected']}")
    slowed = [t for t in quiet["trials"] if t[2] == SLOW_BATCH_SIZE]
    assert 0 < len(slowed) < len(quiet["trials"])  # the delay hit some trials, not all
    assert len(quiet["trials"]) == 11 and any(t[3] < 4 for t in quiet["trials"])  # halving stopped some
    assert loaded["trials"] == quiet["trials"]  # same proposals, same trials stopped at the same epochs
    assert loaded["selected"] == quiet["selected"]
