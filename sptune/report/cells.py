"""The report's cells: one variant on one task, its per-seed values and their statistics (``sptune.judging.stats``, the
same implementation results.json uses), with Δ against its paired variant on the same task (``sptune.judging.pairing``,
the same rule results.json uses: the study's baseline, or the like-for-like one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sptune.judging.pairing import Pairing, pairings
from sptune.judging.stats import DEFAULT_BASELINE, Summary, paired_delta, summarize, values_by_seed
from sptune.report.records import OBJECTIVE_KEY


@dataclass
class Cell:
    """One variant on one task, over seeds."""

    task: str
    variant: str
    variant_kind: str
    test: dict[str, float]
    val: dict[str, float]
    lrs: dict[str, float]
    test_summary: Summary | None = None
    val_summary: Summary | None = None
    delta: Summary | None = None
    baseline: str | None = None  # the variant Δ is taken against; None for the baseline itself
    pairing: Pairing | None = None  # ... and whether both train the same model


def _cell(task: str, variant: str, variant_kind: str, rows: list[dict[str, Any]]) -> Cell:
    cell = Cell(task, variant, variant_kind, values_by_seed(rows, "test_acc"), values_by_seed(rows, "val_acc"),
                values_by_seed(rows, "lr"))
    cell.test_summary = summarize(list(cell.test.values()))
    cell.val_summary = summarize(list(cell.val.values()))
    return cell


def _pair_deltas(cells: dict[tuple[str, str], Cell], task: str, kinds: dict[str, str], baseline: str,
                 pretrain_objective: str | None) -> None:
    present = {v: kinds[v] for (t, v) in cells if t == task}
    for v, pair in pairings(present, baseline, pretrain_objective).items():
        cell = cells[(task, v)]
        cell.delta = paired_delta(cell.test, cells[(task, pair.baseline)].test)
        cell.baseline, cell.pairing = pair.baseline, pair


def aggregate(rows: list[dict[str, Any]], tasks: list[str], variants: list[str], kinds: dict[str, str],
              baseline: str = DEFAULT_BASELINE) -> dict[tuple[str, str], Cell]:
    """(task, variant) -> its cell, with the Δ against its paired variant on the same task
    (``sptune.judging.pairing``)."""
    cells = {}
    for task in tasks:
        on_task = [r for r in rows if r["task"] == task]
        for v in variants:
            mine = [r for r in on_task if r["variant"] == v]
            if mine:
                cells[(task, v)] = _cell(task, v, kinds[v], mine)
        objective = next((r.get(OBJECTIVE_KEY) for r in on_task if r.get(OBJECTIVE_KEY)), None)
        _pair_deltas(cells, task, kinds, baseline, objective)
    return cells
