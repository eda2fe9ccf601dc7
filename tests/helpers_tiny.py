"""The tiny study the resume tests kill and compare, and the one uninterrupted run they compare with."""

from __future__ import annotations

import json
from pathlib import Path

# digits_quick with its LR extension and seed-robust selection off: what tests that count a plain study's trials,
# runs or stages add (whether an LR extension adds trials depends on where the search's pick lands).
PLAIN_PICK = ["selection.top_k=1", "selection.seeds=0", "lr_extend.max_rounds=0"]
PLAIN = [arg for override in PLAIN_PICK for arg in ("--set", override)]


# FIFO: Ray restores no scheduler's rung state (neither synchronous halving's nor ASHA's), so after a
# resume early stopping may stop different trials and change what Optuna is told (documented in the
# README). With FIFO every decision is restored (the batched searcher's state included), so the resumed
# study must match exactly.
TINY = [
    "--set", "pretrain.epochs=3", "--set", "pretrain.num_samples=2",
    "--set", "finetune.epochs=4", "--set", "variants.scratch.num_samples=3", "--set", "variants.spt.num_samples=3",
    "--set", "scheduler.type=fifo", "--set", "model.n_layers=1", "--set", "rerun_seeds=1", *PLAIN,
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
]  # fmt: skip
SHOWN_TRIALS = {"pretrain": 2, "scratch": 4, "spt": 4}
SHOWN_RERUN_SEEDS = 2
SHOWN_EPOCHS = 3
