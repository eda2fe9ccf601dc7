"""The plan's budget lines: the mode, and each search's budget in epochs and optimizer steps.

Steps per epoch depend on the batch size, which a search may vary: the lines give the range over the
searched batch sizes (results.json states the selected one's, sptune.judging.budget_report).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sptune.plan.phases import Phase
from sptune.rules.budgets import MODE_TEXT, Budget, steps_per_epoch


def _batch_sizes(search: Any) -> list[int]:
    return sorted({int(b) for b in search.space.batch_size.candidates()})


def _conversion(budget: Budget, batches: list[int], rows: int) -> str:
    """' = 340–680 optimizer steps at batch 64–32' (epochs) or ' = 29.7–59.4 epochs at batch 32–64' (steps)."""
    if not rows or not batches or not budget.amount:
        return ""
    if budget.unit == "epochs":
        counts = sorted({budget.amount * steps_per_epoch(rows, b) for b in batches})
        span = "–".join(str(c) for c in dict.fromkeys([counts[0], counts[-1]]))
        return f" = {span} optimizer steps at batch {'–'.join(map(str, dict.fromkeys([batches[-1], batches[0]])))}"
    passes = [budget.amount * b / rows for b in batches]
    span = "–".join(f"{p:.1f}" for p in dict.fromkeys([passes[0], passes[-1]]))
    return f" = {span} epochs at batch {'–'.join(map(str, dict.fromkeys([batches[0], batches[-1]])))}"


def _in_all(budget: Budget, pretraining: Budget | None) -> str:
    """What a variant's model trains in all: its finetuning (up to its cap with until_converged), plus the
    pretraining it starts from."""
    if pretraining is not None and pretraining.amount and pretraining.unit != budget.unit:
        return f"; in all {pretraining.describe()} + {budget.describe()}"
    before = pretraining.amount if pretraining is not None else 0
    most = f"–{before + budget.max_rounds}" if budget.max_rounds else ""
    return f"; {before + budget.amount}{most} {budget.unit} in all"


def _search_line(search: Any, by_label: dict[str, Any], rows: int) -> str:
    budget = search.budget
    other_task = search.pretrain_source is not None and search.pretrain_source.task is not None
    conversion = _conversion(budget, _batch_sizes(search), 0 if other_task else rows)
    if search.is_pretraining:
        return f"  {search.label}: {budget.describe()}{conversion}"
    pretraining = by_label[search.init_from].budget if search.init_from in by_label else None
    start = f" after {search.init_from}'s {pretraining.amount} {pretraining.unit}" if pretraining else ""
    added = f" (of which {budget.added} for SPT's pretraining budget)" if budget.added else ""
    return f"  {search.variant}: {budget.describe()}{added}{conversion}{start}{_in_all(budget, pretraining)}"


def describe_budgets(mode: str, searches: Sequence[Any], train_rows: int) -> list[str]:
    """The mode and one line per search (its SearchPlan: label, budget, space, init_from)."""
    trained = [s for s in searches if s.budget is not None and s.phase in (Phase.PRETRAIN, Phase.SEARCH)]
    by_label = {s.label: s for s in trained if s.is_pretraining}
    rows = f" on {train_rows} training rows" if train_rows else ""
    lines = [f"Budget: {mode} ({MODE_TEXT[mode]}); per trial{rows}:"]
    guard = ("  a tested checkpoint selected in the last 10 % of its budget is marked 'may be unconverged' "
             "(results and report)")
    return lines + [_search_line(s, by_label, train_rows) for s in trained] + [guard]
