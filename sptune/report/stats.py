"""Statistics over seeds: mean, std and bootstrap CIs per variant and task, and deltas against the baseline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sptune.report.records import as_float

BOOTSTRAP_SAMPLES = 5000


@dataclass
class Summary:
    mean: float
    std: float | None  # sample std over seeds; None with one seed
    ci: tuple[float, float] | None  # bootstrap 95 % CI of the mean; None with one seed
    n: int
    paired: bool | None = None  # for deltas: paired by seed, or difference of independent means


def bootstrap_ci(values: list[float], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> tuple[float, float] | None:
    """Percentile CI of the mean over seeds (fixed RNG so the report is reproducible)."""
    if len(values) < 2:
        return None
    x = np.asarray(values, dtype=float)
    means = x[np.random.default_rng(seed).integers(0, len(x), size=(samples, len(x)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def summarize(values: list[float]) -> Summary | None:
    """Mean, sample std and bootstrap CI of per-seed values; None without any."""
    if not values:
        return None
    std = float(np.std(values, ddof=1)) if len(values) > 1 else None
    return Summary(float(np.mean(values)), std, bootstrap_ci(values), len(values))


def paired_delta(values: dict[str, float], base: dict[str, float]) -> Summary | None:
    """Δ vs the baseline: per-seed differences when seeds match, else difference of means."""
    common = sorted(set(values) & set(base))
    if common:
        out = summarize([values[s] - base[s] for s in common])
        out.paired = True
        return out
    if not values or not base:
        return None
    return _unpaired_delta(np.asarray(list(values.values())), np.asarray(list(base.values())))


def _unpaired_delta(a: np.ndarray, b: np.ndarray) -> Summary:
    # Without shared seeds the two means are resampled independently.
    ci = None
    if len(a) > 1 and len(b) > 1:
        rng = np.random.default_rng(0)
        diffs = (a[rng.integers(0, len(a), (BOOTSTRAP_SAMPLES, len(a)))].mean(1)
                 - b[rng.integers(0, len(b), (BOOTSTRAP_SAMPLES, len(b)))].mean(1))
        ci = float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5))
    return Summary(float(a.mean() - b.mean()), None, ci, min(len(a), len(b)), paired=False)


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
    baseline: str | None = None


def _by_seed(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    return {r["seed"]: float(r[key]) for r in rows if as_float(r.get(key)) is not None}


def baseline_variant(variants: list[str], kinds: dict[str, str]) -> str | None:
    """The variant deltas are taken against: the one named scratch, else the first of kind scratch."""
    scratch = [v for v in variants if kinds.get(v) == "scratch"]
    return "scratch" if "scratch" in scratch else (scratch[0] if scratch else None)


def _cell(task: str, variant: str, kind: str, rows: list[dict[str, Any]]) -> Cell:
    cell = Cell(task, variant, kind, _by_seed(rows, "test_acc"), _by_seed(rows, "val_acc"), _by_seed(rows, "lr"))
    cell.test_summary = summarize(list(cell.test.values()))
    cell.val_summary = summarize(list(cell.val.values()))
    return cell


def aggregate(rows: list[dict[str, Any]], tasks: list[str], variants: list[str],
              kinds: dict[str, str]) -> dict[tuple[str, str], Cell]:
    """(task, variant) -> its cell, with the delta against the baseline on the same task."""
    cells = {}
    base = baseline_variant(variants, kinds)
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
