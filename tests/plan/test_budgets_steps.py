"""Budgets in optimizer steps (pretrain.steps / finetune.steps): every trial of a search does the same steps
whatever its batch size, in evaluation rounds of eval_every steps (the Tune iteration, so halving's rungs keep one
time unit); impossible or ambiguous budgets are refused naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from ray.tune.trainable import trainable as ray_trainable

from sptune.errors import SpecError
from sptune.plan.dry_run_text import describe
from sptune.plan.study_plan import build_plan
from sptune.rules.budgets import variant_budget
from sptune.spec import SweepSpec, load_spec
from sptune.tasks.base import TaskInfo
from tests.helpers_tiny import direct_trainable

BASE = Path(__file__).resolve().parents[2] / "search_spaces" / "digits_quick.yaml"
STEPS = ["finetune.epochs=null", "finetune.steps=400", "finetune.eval_every=40"]
PRE_STEPS = ["pretrain.epochs=null", "pretrain.steps=300", "pretrain.eval_every=30"]


def _spec(*overrides: str) -> SweepSpec:
    return load_spec(BASE, list(overrides))


@pytest.mark.parametrize(
    "overrides, where, says",
    [
        (["finetune.steps=400"], "finetune.epochs", "both steps (400) and epochs are set"),
        (["finetune.eval_every=40"], "finetune.eval_every", "this section's budget is in epochs"),
        (["finetune.epochs=null", "finetune.steps=400", "finetune.eval_every=401"], "finetune.eval_every",
         "exceeds the budget of 400 steps"),
        (["finetune.epochs=null", "finetune.steps=0"], "finetune.steps", "must be >= 1"),
        (["pretrain.steps=300"], "pretrain.epochs", "both steps (300) and epochs are set"),
        ([*STEPS, "budget=total_matched"], "budget", "they must count the same unit"),
        ([*STEPS, "variants.spt.epochs=5"], "variants.spt.epochs", "400 optimizer steps (finetune.steps)"),
        ([*STEPS, "scheduler.grace_period=11"], "scheduler.grace_period", "(10 evaluation rounds)"),
    ],
)
def test_refused_naming_the_field(overrides, where, says):
    with pytest.raises(SpecError) as caught:
        _spec(*overrides)
    assert caught.value.where == where and says in str(caught.value), str(caught.value)


def test_a_steps_budget_is_counted_in_evaluation_rounds():
    spec = _spec(*STEPS, *PRE_STEPS, "budget=total_matched")
    scratch = variant_budget(spec, "scratch")
    assert (scratch.unit, scratch.amount, scratch.added, scratch.rounds) == ("steps", 700, 300, 18)
    assert [scratch.round_steps(k) for k in (1, 17, 18)] == [40, 40, 20]
    assert variant_budget(spec, "spt").rounds == 10 and spec.pretrain_budget().rounds == 10
    default = variant_budget(_spec("finetune.epochs=null", "finetune.steps=95"), "scratch")
    assert (default.eval_every, default.rounds) == (10, 10)  # no eval_every: 10 rounds, as the default epochs


def test_the_plan_counts_rounds_and_states_the_steps():
    plan = build_plan(_spec(*STEPS), TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2,
                      train_rows=1258)
    assert {s.label: s.epochs for s in plan.searches} == {"pretrain": 20, "search-scratch": 10, "search-spt": 10}
    text = describe(plan)
    assert "scratch: 400 optimizer steps (10 evaluation rounds of 40) = 10.2–20.3 epochs at batch 32–64" in text
    assert "grace 5 rounds" in text and "x <=  10 rounds" in text and "trial-rounds" in text


# ---------------------------------------------------------------- a trial of a steps budget

INFO = TaskInfo(name="px", input_kind="continuous", seq_len=16, num_classes=3, levels=17)
SEARCH = {"lr": {"type": "choice", "values": [1e-2]}, "batch_size": {"type": "choice", "values": [4, 16]}}



STEP_SPEC = SweepSpec.model_validate({
    "name": "steps", "task": {"name": "px"},
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "pooling": "mean"},
    "finetune": {"steps": 10, "eval_every": 4, "num_samples": 1},
    "variants": {"scratch": {"search": SEARCH}}, "scheduler": {"type": "fifo"}, "training": {"device": "cpu"},
})


_Direct = direct_trainable(STEP_SPEC, INFO)


@pytest.fixture()
def quiet_trainables(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_trainable, "DEFAULT_STORAGE_PATH", str(tmp_path / "ray_results"))
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("quiet_trainables")
@pytest.mark.parametrize("batch_size", [4, 16])
def test_every_trial_does_the_same_steps_whatever_its_batch_size(batch_size):
    trial = _Direct({"variant": "scratch", "lr": 1e-2, "batch_size": batch_size, "seed": 1})
    results = [trial.train() for _ in range(3)]
    trial.stop()
    assert [r["optimizer_steps"] for r in results] == [4, 8, 10]
    assert [r["done"] for r in results] == [False, False, True]
    assert trial.loop.cfg.steps == 10 and trial.loop.steps_per_epoch == 32 // batch_size


def test_a_pretraining_steps_budget_has_a_spt_cache_key_of_its_own():
    from sptune.study.spt_reuse import cache_key

    def key(*overrides: str) -> str:
        spec = _spec(*overrides)
        plan = build_plan(spec, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)
        return cache_key(spec, plan.pretrainings()[0])

    assert key(*PRE_STEPS) != key() and key(*PRE_STEPS) != key("pretrain.epochs=null", "pretrain.steps=300")
