"""The learning rates a study searched: each variant's LR search space (from spec.yaml) and its best validation
accuracy per LR, with LRs grouped so that variants can be compared at the same LR."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from sptune.plan.phases import Phase
from sptune.report.formatting import fmt_lr
from sptune.report.records import Trial, as_float

BIN_DECADES = 0.25  # LR bin width when variants did not try the same LRs (random/Optuna searches)


def lr_space(spec: dict[str, Any], variant: str) -> dict[str, Any] | None:
    """The variant's ``search.lr`` entry in spec.yaml, if it has one."""
    space = ((((spec.get("variants") or {}).get(variant) or {}).get("search")) or {}).get("lr")
    return space if isinstance(space, dict) else None


def describe_space(space: dict[str, Any]) -> str:
    """'grid [1e-4, 3e-4]' or 'loguniform [1e-5, 1e-2]'."""
    if space.get("values"):
        return f"{space.get('type', 'grid')} [{', '.join(fmt_lr(float(v)) for v in space['values'])}]"
    return f"{space.get('type', 'range')} [{fmt_lr(space.get('low'))}, {fmt_lr(space.get('high'))}]"


def searched_space(space: dict[str, Any] | None, extension: dict[str, Any] | None) -> dict[str, Any] | None:
    """The LR space a variant searched in the end: its spec's, widened by what its LR extension added
    (results.json's `lr_extension`)."""
    if not space or not extension or not extension.get("rounds"):
        return space
    added = [float(x) for lrs in extension["added_lrs"] for x in lrs]
    if space.get("values"):
        return {**space, "values": sorted({*(float(v) for v in space["values"]), *added})}
    low, high = extension["searched_range"]
    return {**space, "low": low, "high": high}


def space_bounds(space: dict[str, Any] | None) -> tuple[float, float, list[float]] | None:
    """(low, high, grid values) of a search space; grid values are empty for a range."""
    if not space:
        return None
    if space.get("values"):
        vals = sorted(float(v) for v in space["values"])
        return vals[0], vals[-1], vals
    low, high = as_float(space.get("low")), as_float(space.get("high"))
    return (low, high, []) if low and high else None


def sig(x: float, digits: int = 4) -> float:
    """x rounded to significant digits, so that LRs differing only by float noise compare equal."""
    return float(f"{x:.{digits - 1}e}")


def usable(t: Trial) -> bool:
    """A finished search trial (or an LR extension's, beyond the search's range) with an LR and a validation
    accuracy to place on an accuracy-vs-LR curve."""
    return (t.phase in (Phase.SEARCH, Phase.EXTEND) and t.completed and t.lr is not None and t.lr > 0
            and t.best_val_acc is not None)


def lr_binner(trials: list[Trial]) -> tuple[Any, bool]:
    """Exact LRs when every variant tried the same, well-separated ones (grids), else log bins of BIN_DECADES."""
    sets: dict[str, set[float]] = {}
    for t in trials:
        if usable(t):
            sets.setdefault(t.variant, set()).add(sig(t.lr))
    distinct = {frozenset(s) for s in sets.values()}
    if len(distinct) == 1:
        vals = sorted(next(iter(distinct)))
        gaps = [math.log10(hi / lo) for lo, hi in zip(vals, vals[1:], strict=False)]
        # Shared but near-identical LRs (a seeded sampler) are one LR in effect: bin them instead.
        if len(vals) <= 24 and min(gaps, default=1.0) >= BIN_DECADES / 2:
            return sig, True
    # The epsilon keeps exact powers of ten in the bin they start.
    return (lambda lr: math.floor(math.log10(lr) / BIN_DECADES + 1e-9)), False


@dataclass
class CurvePoint:
    lr: float  # geometric mean of the variant's LRs in the bin
    mean: float  # per-seed best val acc in the bin, averaged over seeds
    low: float
    high: float
    n: int


def lr_curves(trials: list[Trial]) -> dict[str, dict[Any, CurvePoint]]:
    """variant -> bin -> best validation accuracy at that LR (max over trials in a seed, then over seeds)."""
    key, _ = lr_binner(trials)
    best: dict[tuple[str, Any, str], float] = {}
    lrs: dict[tuple[str, Any], list[float]] = {}
    for t in filter(usable, trials):
        k = (t.variant, key(t.lr), t.seed)
        best[k] = max(best.get(k, -math.inf), t.best_val_acc)
        lrs.setdefault(k[:2], []).append(t.lr)
    curves: dict[str, dict[Any, CurvePoint]] = {}
    for (variant, b), xs in lrs.items():
        vals = [v for (vv, bb, _), v in best.items() if (vv, bb) == (variant, b)]
        lr = float(np.exp(np.mean(np.log(xs))))
        curves.setdefault(variant, {})[b] = CurvePoint(lr, float(np.mean(vals)), min(vals), max(vals), len(vals))
    return curves
