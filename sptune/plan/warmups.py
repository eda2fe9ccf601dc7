"""Each search's LR warm-up against its budget: where the warm-up ends (in rounds), which field sets it, and the
warm-ups as long as the whole budget, under which the LR never reaches the peak the search asks for.

A warm-up the spec inherited from its task's defaults (the reference's, sized for the full LRA budgets) is
refused when it swallows the budget (`sptune.preflight.inputs`); one the spec wrote itself is stated in the
plan (`sptune.plan.dry_run_text`): the spec asked for it in so many words.
"""

from __future__ import annotations

from dataclasses import dataclass

from sptune.plan.study_plan import SearchPlan, StudyPlan
from sptune.rules import budgets


@dataclass(frozen=True)
class LongWarmup:
    """A search whose warm-up lasts its whole budget."""

    search: SearchPlan
    field: str  # the spec field that sets the warm-up, e.g. training.warmup_steps
    steps: int  # the warm-up's optimizer steps
    budget_steps: int  # the steps the search's trials train at its largest batch
    inherited: bool  # the value came from the task's defaults, not from the spec


def warmup_field(plan: StudyPlan, search: SearchPlan) -> str | None:
    """The field that sets a search's warm-up in steps (None: a fraction of its budget)."""
    s = plan.spec
    if search.space.warmup_fraction is not None:
        return None
    if search.is_pretraining and s.pretrain is not None and s.pretrain.warmup_steps is not None:
        return "pretrain.warmup_steps"
    return "training.warmup_steps" if s.training.warmup_steps is not None else None


def _warmup_steps(plan: StudyPlan, field: str) -> int:
    s = plan.spec
    return s.pretrain.warmup_steps if field == "pretrain.warmup_steps" else s.training.warmup_steps


def round_steps(plan: StudyPlan, search: SearchPlan) -> float | None:
    """Optimizer steps in one of the search's rounds at its largest batch (None: training rows unknown)."""
    if search.budget is not None and search.budget.unit == "steps":
        return search.budget.eval_every
    if not plan.train_rows:
        return None
    return budgets.steps_per_epoch(plan.train_rows, max(search.space.batch_size.candidates()))


def warmup_rounds(plan: StudyPlan, search: SearchPlan) -> float | None:
    """The round a search's LR warm-up ends at: its warm-up in steps over the steps of a round at its largest
    batch, else warmup_fraction of its rounds; None when steps are given but the training rows are not known."""
    field = warmup_field(plan, search)
    if field is None:
        return plan.spec.training.warmup_fraction * search.epochs
    per_round = round_steps(plan, search)
    return _warmup_steps(plan, field) / per_round if per_round else None


def long_warmups(plan: StudyPlan) -> list[LongWarmup]:
    """The searches (with trials) whose warm-up in steps is at least their whole budget."""
    found = []
    for search in plan.searches:
        field, per_round = warmup_field(plan, search), round_steps(plan, search)
        if not search.n_trials or field is None or not per_round:
            continue
        steps, budget_steps = _warmup_steps(plan, field), int(per_round * search.epochs)
        if steps >= budget_steps:
            found.append(LongWarmup(search, field, steps, budget_steps, field in plan.spec.inherited_defaults))
    return found
