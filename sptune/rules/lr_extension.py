"""LR ranges that bracket the optimum (`search.lr.extend: true`): when a variant's selected LR sits at a bound of
its searched LRs, its search adds LRs beyond that bound, half a decade per round, up to `lr_extend.max_rounds`
rounds (default 2: one decade beyond the bound).

At a bound: a grid's (or choice's) end value, i.e. less than one grid step from the bound; a range's LR within
EDGE_FACTOR of a bound (the report's "Best LR on the edge" rule, defined here once). Each round adds, beyond the
bound (the last round's outermost LR after the first):

- a grid or choice: the next points at the list's own log spacing at that end (clamped to 0.1–0.5 decade), as
  many as fit in half a decade;
- a range: 2 points, at a quarter and half a decade.

With seed-robust selection (`selection.top_k` > 1) any of the search's top-k configs may become the pick, so a
round extends from the best-ranked of them that sits at a bound, not from the search's best alone.
Round r > 1 runs only if one of those after round r - 1 is its outermost LR (still at the edge). Everything is a
pure function of the space, the pick and the round, so the configs and picks never depend on finish order, and
the results can say what was added from the picks alone. Stdlib only: the spec, the plan and the study use it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

EDGE_FACTOR = 1.5  # a range whose best LR is within this factor of a bound has not bracketed the optimum
ROUND_DECADES = 0.5
RANGE_POINTS = 2
MAX_ROUND_POINTS = 5  # a grid finer than 0.1 decade is extended at 0.1-decade steps
MAX_EXTENSION_ROUNDS = 6  # three decades: beyond that the search space itself is wrong
SIDES = ("low", "high")


class LrRange(Protocol):
    """What these rules read of an LR search space (`sptune.spec.ParamSpace`)."""

    low: float | None
    high: float | None
    values: list[float] | None


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6)


def _listed(space: LrRange) -> list[float] | None:
    return sorted({float(v) for v in space.values}) if space.values is not None else None


def edge_side(lr: float, space: LrRange) -> str | None:
    """'low' or 'high' when `lr` sits at that bound of the space (the low one first), else None."""
    values = _listed(space)
    if values is not None:
        if len(values) < 2:
            return None
        return "low" if _close(lr, values[0]) else "high" if _close(lr, values[-1]) else None
    if lr <= space.low * EDGE_FACTOR:
        return "low"
    return "high" if lr >= space.high / EDGE_FACTOR else None


def _step(space: LrRange, side: str) -> float:
    """The log10 spacing of the LRs a round adds on `side`."""
    values = _listed(space)
    if values is None:
        return ROUND_DECADES / RANGE_POINTS
    pair = values[:2] if side == "low" else values[-2:]
    spacing = math.log10(pair[1] / pair[0])
    return min(max(spacing, ROUND_DECADES / MAX_ROUND_POINTS), ROUND_DECADES)


def _points(space: LrRange, side: str) -> int:
    return math.floor(ROUND_DECADES / _step(space, side) + 1e-9)


def round_trials(space: LrRange) -> int:
    """The most LRs one round adds (either side)."""
    return max(_points(space, side) for side in SIDES)


def round_lrs(space: LrRange, side: str, round_: int) -> list[float]:
    """The LRs round `round_` (from 1) adds beyond the `side` bound, outermost last (4 significant digits)."""
    values = _listed(space)
    bound = (values[0] if side == "low" else values[-1]) if values is not None else \
        (space.low if side == "low" else space.high)
    sign, step, n = (-1 if side == "low" else 1), _step(space, side), _points(space, side)
    return [float(f"{bound * 10 ** (sign * step * k):.4g}") for k in range((round_ - 1) * n + 1, round_ * n + 1)]


def extension_lrs(space: LrRange, pick: float, round_: int) -> list[float]:
    """The LRs round `round_` adds given the pick so far ([]: the pick does not sit at the edge)."""
    if round_ == 1:
        side = edge_side(pick, space)
        return round_lrs(space, side, 1) if side else []
    for side in SIDES:
        if _close(pick, round_lrs(space, side, round_ - 1)[-1]):
            return round_lrs(space, side, round_)
    return []


def extension_step(space: LrRange, ranked: Sequence[float], round_: int) -> tuple[int, list[float]] | None:
    """(index in `ranked`, the LRs round `round_` adds) for the best-ranked LR that sits at the edge; None if none
    does. `ranked`: the LRs the pick may still come from, best first (the pick alone without top_k)."""
    for index, lr in enumerate(ranked):
        lrs = extension_lrs(space, lr, round_)
        if lrs:
            return index, lrs
    return None


def _bounds(space: LrRange) -> list[float]:
    values = _listed(space)
    return [values[0], values[-1]] if values is not None else [space.low, space.high]


def extension_record(space: LrRange, ranked: Sequence[Sequence[float]], max_rounds: int) -> dict[str, Any]:
    """results.json's `lr_extension` of a variant: `ranked[0]` its search's LRs the pick may come from (best first;
    the pick alone without top_k), `ranked[r]` those after round r. The rounds that added LRs, what each added, the
    range searched in the end, and whether the final pick's set still sits at its edge (it would have extended
    again, had rounds been left)."""
    stages = [[float(x) for x in r] for r in ranked]
    added, side, start = [], None, None
    for r, lrs_so_far in enumerate(stages[:max_rounds], 1):
        step = extension_step(space, lrs_so_far, r)
        if step is None or r >= len(stages):
            break
        if start is None:  # the search's LR the first round extended from, and its rank (0: the search's pick)
            start, side = {"lr": lrs_so_far[step[0]], "rank": step[0]}, edge_side(lrs_so_far[step[0]], space)
        added.append(step[1])
    everything = _bounds(space) + [lr for lrs in added for lr in lrs]
    final = stages[len(added)]
    original = {"values": _listed(space)} if space.values is not None else {"low": space.low, "high": space.high}
    return {"original": original, "max_rounds": max_rounds, "rounds": len(added), "side": side, "extended_from": start,
            "added_lrs": added, "searched_range": [min(everything), max(everything)], "final_lr": final[0],
            "final_at_edge": extension_step(space, final, len(added) + 1) is not None}
