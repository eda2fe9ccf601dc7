"""Budget modes (sptune.rules.budgets): finetune_matched gives every variant the same finetuning epochs, SPT's
pretraining on top; total_matched gives each variant that does not start from SPT the pretraining epochs too.
The spec, the plan and the trials all take a variant's epochs from the one rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from sptune.errors import SpecError
from sptune.plan.dry_run_text import describe
from sptune.plan.study_plan import build_plan
from sptune.rules.budgets import Budget, matched, variant_budget
from sptune.spec import SweepSpec, load_spec
from sptune.tasks.base import TaskInfo

BASE = Path(__file__).resolve().parents[2] / "search_spaces" / "digits_quick.yaml"
FROZEN = ("variants.fa={kind: frozen_attn, num_samples: 2, search: {lr: {type: loguniform, low: 1.0e-4, "
          "high: 1.0e-2}, batch_size: {type: choice, values: [32, 64]}}}")
INFO = TaskInfo("digits", "continuous", 64, 10, levels=17)


def _spec(*overrides: str) -> SweepSpec:
    return load_spec(BASE, ["pretrain.epochs=15", *overrides])


def test_finetune_matched_is_the_default_and_gives_every_variant_the_finetuning_epochs():
    spec = _spec(FROZEN)
    assert spec.budget == "finetune_matched"
    assert {v: variant_budget(spec, v).max_iterations for v in spec.variants} == {"scratch": 20, "spt": 20, "fa": 20}


def test_total_matched_adds_the_pretraining_epochs_to_every_variant_not_starting_from_spt():
    spec = _spec(FROZEN, "budget=total_matched")
    assert {v: variant_budget(spec, v).max_iterations for v in spec.variants} == {"scratch": 35, "spt": 20, "fa": 35}
    assert variant_budget(spec, "scratch").added == 15 and variant_budget(spec, "spt").added == 0


def test_total_matched_with_no_pretraining_to_match_changes_nothing():
    spec = _spec("budget=total_matched", "pretrain.epochs=0")
    assert variant_budget(spec, "scratch").max_iterations == 20


def test_the_plan_and_its_trials_take_the_modes_epochs():
    plan = build_plan(_spec("budget=total_matched"), INFO, cluster_cpus=2, train_rows=1258)
    epochs = {s.label: s.epochs for s in plan.searches}
    assert epochs == {"pretrain": 15, "search-scratch": 35, "search-spt": 20}
    text = describe(plan)
    assert "Budget: total_matched" in text
    assert "scratch: 35 epochs (of which 15 for SPT's pretraining budget) = 700–1400 optimizer steps" in text
    assert "spt: 20 epochs = 400–800 optimizer steps at batch 64–32 after pretrain's 15 epochs; 35 epochs in all" \
        in text
    assert "search-scratch" in text and "x <=  35 epochs" in text
    assert "Budget: finetune_matched" in describe(build_plan(_spec(), INFO, cluster_cpus=2))


def test_total_matched_refuses_a_given_checkpoint_whose_budget_is_unknown():
    with pytest.raises(SpecError) as caught:
        _spec("budget=total_matched", "pretrain.checkpoint=/some/state.pt")
    assert caught.value.where == "budget" and "a given checkpoint's is unknown" in str(caught.value)


def test_matched_keeps_a_finetune_cap_in_step():
    finetune = Budget("epochs", 20, patience=3, max_rounds=40)
    assert matched(finetune, Budget("epochs", 10), "total_matched", False) == Budget("epochs", 30, None, 10, 3, 50)
    assert matched(finetune, Budget("epochs", 10), "finetune_matched", False) == finetune
    assert matched(finetune, Budget("epochs", 10), "total_matched", True) == finetune
