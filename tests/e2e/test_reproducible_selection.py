"""The same spec and seed select the same configurations, in whatever order trials finish.

The same tiny study (two variants in one Tuner, 6 and 5 Optuna trials, 3 at a time) runs twice
through the CLI, each time with an artificial delay in half of its trials: first those of batch
size 64 are slowed down, then those of batch size 32, so that trials reach rungs and finish in
another order by construction (two runs on a quiet machine race, so they differ only sometimes).
With the default decisions (batched TPE, synchronous halving) both runs must propose the same
trials, stop the same ones at the same epochs and select the same config and epoch per variant.

With the asynchronous ones (`SPTUNE_REPRO_DECISIONS="--set scheduler.type=asha --set
searcher.mode=async"`, what sptune did before) this test fails: with the batch-64 trials slowed,
scratch's first trial (batch 32) reaches ASHA's first rung first and is promoted; with the
batch-32 trials slowed, it arrives after a batch-64 trial that scores higher there and is
stopped, so another config is selected (and Optuna, told results in another order, proposes
other configs).

The delay needs no hook in sptune: the Tuner's trainable is swapped for a subclass made here,
which Ray ships to its workers by value (this module is not importable there).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from ray import cloudpickle

import sptune.tuning.tuner
from sptune.plan.phases import Phase
from sptune.report.mlflow_runs import fetch_trials
from sptune.sweep import main
from sptune.tuning.trainable import StudyTrainable
from tests.helpers_tiny import PLAIN

# Two epochs: halving's first rung (epoch 1), where finish order would decide who goes on, and one more.
EPOCHS = 2
TINY = [
    "--set", "pretrain.epochs=0",  # spt then starts from the untrained (seeded) encoder: no pretraining Tuner
    "--set", f"finetune.epochs={EPOCHS}", "--set", "variants.scratch.num_samples=6",
    "--set", "variants.spt.num_samples=5",
    "--set", "variants.spt.search.lr.low=3.0e-4",  # its own space and budget (the last batch is smaller)
    "--set", "scheduler.grace_period=1", "--set", "scheduler.reduction_factor=2", "--set", "model.n_layers=1",
    "--set", "rerun_seeds=1",
    # Three slots (on 2 CPUs): with two, each variant's first trial would run alone at first, and
    # the first trial to reach a rung is never stopped, so finish order could not matter there.
    "--set", "resources.cpu=0.5", "--set", "resources.max_concurrent=3", *PLAIN,
    "--set", "model.d_model=32", "--set", "model.d_ff=64",  # half digits_quick's width: an epoch costs ~27 % less
]
DEFAULTS = ["--set", "scheduler.type=sha", "--set", "searcher.mode=batched"]  # the shipped spec names asha
DECISIONS = os.environ.get("SPTUNE_REPRO_DECISIONS", "").split() or DEFAULTS

SLOW_EPOCH_S = 2.0


def slowed(batch_size: int) -> type:
    """The study's trainable, sleeping before every epoch of the trials of `batch_size`."""

    class SlowTrials(StudyTrainable):
        def step(self) -> dict:
            if int(self.config["batch_size"]) == batch_size:
                time.sleep(SLOW_EPOCH_S)
            return super().step()

    return SlowTrials


def run_study(spec: str, out: Path, overrides: list[str], slow_batch_size: int) -> dict:
    """Run the study through the CLI with the trials of `slow_batch_size` slowed down."""
    original = sptune.tuning.tuner.StudyTrainable
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers cannot import it
    sptune.tuning.tuner.StudyTrainable = slowed(slow_batch_size)
    try:
        start = time.perf_counter()
        assert main([spec, "--output", str(out), *overrides]) == 0
        wall = time.perf_counter() - start
    finally:
        sptune.tuning.tuner.StudyTrainable = original
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    return {**decisions(out), "wall_s": wall}


def decisions(out: Path) -> dict:
    """Per variant: the selected lr, batch size and epoch, and every search trial's config and epochs.

    The epochs come from the study's MLflow child runs (what the report reads), not from Tune's
    `result.json`: a trial paused at a rung and resumed gets its `result.json` restored from the
    storage copy, which may predate its last lines, so that file can miss an epoch the trial trained
    (CI saw a 4-epoch trial's file with 3 lines).
    """
    results = json.loads((out / "results.json").read_text())
    selected = {r["variant"]: (round(r["lr"], 12), r["batch_size"], r["best_epoch"]) for r in results["rows"]}
    client = MlflowClient(results["mlflow"]["tracking_uri"])
    trials = [
        (t.variant, round(t.lr, 12), int(t.batch_size), len(t.curve))
        for t in fetch_trials(client, results["mlflow"]["parent_run_id"])
        if t.phase == Phase.SEARCH
    ]
    return {"selected": selected, "trials": sorted(trials)}


@pytest.fixture(scope="module")
def spec(repo_root) -> str:
    return str(Path(repo_root) / "search_spaces" / "digits_quick.yaml")


# Heavy: two studies; tests/tuning/test_contract.py drives the real schedulers and searchers in any finish order.
@pytest.mark.heavy
def test_a_delay_in_some_trials_changes_no_decision(ray_session, spec, tmp_path):
    first = run_study(spec, tmp_path / "slow64", TINY + DECISIONS, slow_batch_size=64)
    second = run_study(spec, tmp_path / "slow32", TINY + DECISIONS, slow_batch_size=32)
    for name, run in (("batch 64 slowed", first), ("batch 32 slowed", second)):
        print(f"\n{name}: {run['wall_s']:.0f}s, selected {run['selected']}")
    assert {t[2] for t in first["trials"]} == {32, 64}  # each delay hit some trials, not all
    assert len(first["trials"]) == 11 and any(t[3] < EPOCHS for t in first["trials"])  # halving stopped some
    assert second["trials"] == first["trials"]  # same proposals, same trials stopped at the same epochs
    assert second["selected"] == first["selected"]
