"""What trials read of the plan: each trial's budget, as the plan's searches hold it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sptune.plan.study_plan import build_plan
from sptune.plan.trial_budgets import trial_budgets
from sptune.rules.budgets import Budget
from sptune.spec import load_spec
from sptune.tasks.base import TaskInfo

BASE = Path(__file__).resolve().parents[2] / "search_spaces" / "digits_quick.yaml"
INFO = TaskInfo("digits", "continuous", 64, 10, levels=17)


def test_each_trial_gets_its_search_budget_by_what_its_config_trains():
    plan = build_plan(load_spec(BASE, ["pretrain.epochs=15", "budget=total_matched"]), INFO)
    trials = trial_budgets(plan)
    assert trials.budget({"variant": "scratch"}).amount == 35  # total_matched: the pretraining's 15 added
    assert trials.budget({"variant": "spt"}).amount == 20
    assert trials.budget({"variant": "masked", "objective": "masked"}).amount == 15


def test_the_trial_budgets_are_read_from_the_plan_not_recomputed_from_the_spec():
    plan = build_plan(load_spec(BASE, []), INFO)
    changed = [dataclasses.replace(s, budget=Budget("epochs", 7)) if s.variant == "spt" else s for s in plan.searches]
    trials = trial_budgets(dataclasses.replace(plan, searches=changed))
    assert trials.budget({"variant": "spt"}) == Budget("epochs", 7)
    assert trials.pretraining == plan.pretrainings()[0].budget
