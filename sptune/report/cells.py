"""The report's cells: one variant on one task, its per-seed values and their statistics (``sptune.stats``, the
same implementation results.json uses), with Δ against the study's baseline on the same task."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sptune.stats import DEFAULT_BASELINE, Summary, baseline_variant, paired_delta, summarize, values_by_seed


@dataclass
class Cell:
    """One variant on one task, over seeds."""

    task: str
    variant: str
    kind: str
    test: dict[str, float]
    val: dict[str, float]
    lrs: dict[str, float]
    test_summary: Summary | None = None
    val_summary: Summary | None = None
    delta: Summary | None = None
    baseline: str | None = None  # the variant Δ is taken against; None for the baseline itself


def _cell(task: str, variant: str, kind: str, rows: list[dict[str, Any]]) -> Cell:
    cell = Cell(task, variant, kind, values_by_seed(rows, "test_acc"), values_by_seed(rows, "val_acc"),
                values_by_seed(rows, "lr"))
    cell.test_summary = summarize(list(cell.test.values()))
    cell.val_summary = summarize(list(cell.val.values()))
    return cell


def aggregate(rows: list[dict[str, Any]], tasks: list[str], variants: list[str], kinds: dict[str, str],
              baseline: str = DEFAULT_BASELINE) -> dict[tuple[str, str], Cell]:
    """(task, variant) -> its cell, with the Δ against the variant named ``baseline`` on the same task."""
    cells = {}
    base = baseline_variant(variants, baseline)
    for task in tasks:
        for v in variants:
            mine = [r for r in rows if r["task"] == task and r["variant"] == v]
            if mine:
                cells[(task, v)] = _cell(task, v, kinds[v], mine)
        if base and (task, base) in cells:
            for v in variants:
                if (task, v) in cells and v != base:
                    cells[(task, v)].delta = paired_delta(cells[(task, v)].test, cells[(task, base)].test)
                    cells[(task, v)].baseline = base
    return cells
