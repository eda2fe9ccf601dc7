"""What a study's trials read of its plan: the budget each trial trains under, as the plan's searches hold it
(computed once, in `sptune.plan.study_plan.build_plan`), so a trial never derives it from the spec again. The
trainable gets it whole (`sptune.tuning.tuner.study_trainable`); the model and optimiser settings it reads are
the spec's own fields."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sptune.plan.study_plan import StudyPlan
from sptune.rules.budgets import Budget


@dataclass(frozen=True)
class TrialBudgets:
    pretraining: Budget | None  # every pretraining trial's (None: the study pretrains nothing)
    variants: dict[str, Budget]  # each variant's trials' (its search, LR extension, candidates and re-runs)

    def budget(self, config: Mapping[str, Any]) -> Budget:
        """A trial's budget, by what its config trains: a pretraining `objective`, else its `variant`."""
        if "objective" in config:
            return self.pretraining
        return self.variants[config["variant"]]


def trial_budgets(plan: StudyPlan) -> TrialBudgets:
    pretraining = next((search.budget for search in plan.pretrainings()), None)
    return TrialBudgets(pretraining, {search.variant: search.budget for search in plan.variant_searches()})
