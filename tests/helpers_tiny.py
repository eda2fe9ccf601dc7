"""The tiny study the resume tests kill and compare, and the one uninterrupted run they compare with."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# digits_quick with its LR extension and seed-robust selection off: what tests that count a plain study's trials,
# runs or stages add (whether an LR extension adds trials depends on where the search's pick lands).
PLAIN_PICK = ["selection.top_k=1", "selection.seeds=0", "lr_extend.max_rounds=0"]
PLAIN = [arg for override in PLAIN_PICK for arg in ("--set", override)]


# FIFO keeps these studies' trial counts fixed (no early stopping); halving's decisions are restored too
# (tests/e2e/test_resume_everywhere.py), so either way a resumed study must match an uninterrupted one exactly.
TINY = [
    "--set", "pretrain.epochs=3", "--set", "pretrain.num_samples=2",
    "--set", "finetune.epochs=4", "--set", "variants.scratch.num_samples=3", "--set", "variants.spt.num_samples=3",
    "--set", "scheduler.type=fifo", "--set", "model.n_layers=1", "--set", "rerun_seeds=1", *PLAIN,
    "--set", "model.d_model=32", "--set", "model.d_ff=64",  # half digits_quick's width: an epoch costs ~27 % less
]  # fmt: skip


def tiny_spec(repo_root: str) -> str:
    return str(Path(repo_root) / "search_spaces" / "digits_quick.yaml")


def trial_configs(out: Path) -> list[tuple]:
    """Sorted (stage, lr, batch_size) of every trial Tune recorded in a local study's one Tuner."""
    found = []
    for params in (out / "ray_results" / "study").glob("*/params.json"):
        p = json.loads(params.read_text())
        found.append((p["stage"], round(p["lr"], 12), p["batch_size"]))
    return sorted(found)


def child_runs(out: Path) -> list:
    """Every MLflow child run (one per trial) under a finished study's parent run."""
    from mlflow.tracking import MlflowClient

    mlflow = json.loads((out / "results.json").read_text())["mlflow"]
    client = MlflowClient(mlflow["tracking_uri"])
    return client.search_runs([mlflow["experiment_id"]], f"tags.mlflow.parentRunId = '{mlflow['parent_run_id']}'",
                              max_results=1000)


def trial_checkpointed(out: Path, marker: str) -> bool:
    """Whether a trial whose params.json holds `marker` (its stage or phase, as JSON text) has saved a checkpoint
    under the study's storage."""
    for trial in (out / "ray_results" / "study").glob("*"):
        params = trial / "params.json"
        if list(trial.glob("checkpoint_*")) and params.exists() and marker in params.read_text():
            return True
    return False


def kill_driver_when(ready: Callable[[], bool], argv: list[str], repo_root: str, *, waiting_for: str,
                     extra_env: dict[str, str] | None = None, timeout_s: float = 240) -> None:
    """Run `python -m sptune.sweep ARGV` as a user does and kill -9 it, with the Ray processes it started, as soon
    as `ready()` holds (asked every 50 ms). Fails the test if the driver ends or `timeout_s` passes first.

    `ready` reads the trial folders under the storage (params.json says which stage or phase a trial is in), which
    Tune's driver copies there with each snapshot: by default 10 s or more apart, longer than a tiny search lasts,
    so snapshots are taken every second here (TUNE_GLOBAL_CHECKPOINT_S)."""
    env = {**os.environ, "PYTHONPATH": repo_root, "TUNE_GLOBAL_CHECKPOINT_S": "1", **(extra_env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "sptune.sweep", *argv], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout_s
    try:
        while time.time() < deadline and proc.poll() is None:
            if ready():
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"the study never reached {waiting_for}")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray processes it started
        proc.wait()


def selected_rows(results: dict) -> list[tuple]:
    """What a study concluded, row by row: the selected config and epoch, and its one test number."""
    return [(r["variant"], r["lr"], r["batch_size"], r["best_epoch"], r["test_acc"]) for r in results["rows"]]


# The study a person runs and then browses, run once through the CLI for the suite (conftest's
# `shown_study`): test_ui reads its progress lines and MLflow UI, test_optuna_storage its optuna.db,
# importances (4 trials per variant: Optuna's minimum here) and optuna-dashboard.
SHOWN = [
    "--set", "pretrain.epochs=2", "--set", "pretrain.num_samples=2", "--set", "finetune.epochs=3",
    "--set", "variants.scratch.num_samples=4", "--set", "variants.spt.num_samples=4",
    "--set", "scheduler.grace_period=1", "--set", "model.n_layers=1", "--set", "rerun_seeds=2", *PLAIN,
    "--set", "model.d_model=32", "--set", "model.d_ff=64",  # half digits_quick's width: an epoch costs ~27 % less
]  # fmt: skip
SHOWN_TRIALS = {"pretrain": 2, "scratch": 4, "spt": 4}
SHOWN_RERUN_SEEDS = 2
SHOWN_EPOCHS = 3


def random_splits(info: Any) -> Any:
    """A tiny task's data as trials get it: 32 training and 16 validation rows of random values (3 classes), and a
    test split that fails any test reading it."""
    import numpy as np

    from sptune.tasks.base import ArraySplit, TaskSplits

    def split(n: int, seed: int) -> ArraySplit:
        rng = np.random.default_rng(seed)
        return ArraySplit(rng.integers(0, info.levels, (n, info.seq_len)).astype("int64"), rng.integers(0, 3, n))

    def no_test_split() -> ArraySplit:
        raise AssertionError("trials never read the test split")

    return TaskSplits(info, split(32, 0), split(16, 1), no_test_split)


def direct_trainable(spec: Any, info: Any, data: Any = None, budgets: Any = None) -> type:
    """The study's trainable with its Tuner-supplied arguments (tune.with_parameters) filled in: the plan's budgets
    for `spec` on `info`, and `random_splits` unless `data` is given."""
    from sptune.plan.study_plan import build_plan
    from sptune.plan.trial_budgets import trial_budgets
    from sptune.tuning.trainable import StudyTrainable

    class Direct(StudyTrainable):
        def setup(self, config: dict) -> None:
            super().setup(config, spec=spec, budgets=budgets or trial_budgets(build_plan(spec, info)),
                          data=data if data is not None else random_splits(info))

    return Direct


def run_spec_text(tmp_path: Path, text: str, name: str) -> tuple[Path, Path, dict]:
    """Write a spec and run it through the CLI (it must succeed): the spec's path, its output, its results.json."""
    from sptune.sweep import main

    spec = tmp_path / f"{name}.yaml"
    spec.write_text(text)
    out = tmp_path / "out"
    assert main([str(spec), "--output", str(out)]) == 0
    return spec, out, json.loads((out / "results.json").read_text())
