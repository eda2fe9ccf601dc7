"""The plan says what will happen, and only what is true."""

from __future__ import annotations

from pathlib import Path

from sptune.plan import build_plan, describe
from sptune.spec import load_spec
from sptune.tasks.base import TaskInfo

DIGITS = TaskInfo("digits", "continuous", 64, 10, levels=17)


def _describe(repo_root: str, *overrides: str) -> str:
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", list(overrides))
    return describe(build_plan(spec, DIGITS, cluster_cpus=2))


def test_the_plan_warns_when_early_stopping_decides_during_the_warm_up(repo_root):
    assert "Note: the first early-stopping rung" not in _describe(repo_root)
    warned = _describe(repo_root, "training.warmup_fraction=0.3")  # warm-up to epoch 6, first rung at 5
    assert "Note: the first early-stopping rung (epoch 5) comes before the LR warm-up ends" in warned
    assert "Note:" not in _describe(repo_root, "training.warmup_fraction=0.3", "scheduler.type=fifo")


def test_the_plan_states_the_one_ranking(repo_root):
    text = _describe(repo_root)
    assert "rank best_val_acc (max)" in text and "rank best_val_loss (min)" in text
    assert "ties: higher val_acc, then lower val_loss, then the earlier epoch" in text
