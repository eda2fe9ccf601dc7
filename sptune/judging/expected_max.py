"""Expected best validation score vs search budget ("Show your work", Dodge et al. 2019): for n = 1..N, the
expected best score of a search that had run only n of the N trials it ran. It answers "would a smaller (or
the same-size) sweep have reached the same conclusion?", and where the curves of two variants cross, the
budget at which their order flips.

The estimator is Tang et al.'s (2020) unbiased one: the expected maximum of n trials drawn *without
replacement* from the N observed scores v(1) <= ... <= v(N),

    E[max of n] = sum over i = n..N of v(i) · C(i-1, n-1) / C(N, n),

since the i-th smallest is the maximum of a random n-subset exactly when the subset holds it and n-1 of the
i-1 below it. (Dodge et al.'s first estimator draws with replacement, which is biased low for n near N; this
one gives the mean at n = 1 and the observed maximum at n = N.) Ties do not matter: tied values are equal.

The weights are built by a product of ratios, never by factorials: no overflow for any N. Pure numpy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np


def _weights(n: int, total: int) -> np.ndarray:
    """P(the i-th smallest of ``total`` is the max of a random n-subset), for i = n..total (1-based)."""
    # At i = total: C(total-1, n-1) / C(total, n) = n / total; one step down multiplies by (i-n)/(i-1).
    i = np.arange(total, n, -1, dtype=float)  # total, total-1, ..., n+1
    ratios = (i - n) / (i - 1)
    descending = (n / total) * np.concatenate(([1.0], np.cumprod(ratios)))
    return descending[::-1]


def expected_max(scores: Sequence[float]) -> list[float]:
    """E[best score of n trials drawn without replacement from ``scores``], for n = 1..len(scores)."""
    v = np.sort(np.asarray(scores, dtype=float))
    if v.size and not np.isfinite(v).all():
        raise ValueError("expected_max needs finite scores (leave out trials without one)")
    total = v.size
    return [float(_weights(n, total) @ v[n - 1:]) for n in range(1, total + 1)]


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def order_flips(curve: Sequence[float], base: Sequence[float]) -> list[int]:
    """The budgets n at which ``curve`` and ``base`` change order (the sign of curve - base differs from the
    last nonzero one before it), over the n both reach. A tie is no flip; an order that returns flips again."""
    flips, last = [], 0
    for n, (a, b) in enumerate(zip(curve, base, strict=False), start=1):
        sign = _sign(a - b)
        if sign and last and sign != last:
            flips.append(n)
        last = sign or last
    return flips


def budget_table(scores: Mapping[str, Sequence[float]], baselines: Mapping[str, str]) -> dict[str, object]:
    """results.json's ``expected_max``: per variant its curve (``by_n``, n = 1..N trials with a score), and per
    variant with a paired baseline the budgets at which their order flips (``order_flips_at``; [] if never)."""
    curves = {v: expected_max(s) for v, s in scores.items()}
    flips = {v: order_flips(curves[v], curves[b]) for v, b in baselines.items() if v in curves and b in curves}
    return {"variants": {v: {"n_trials": len(c), "by_n": c} for v, c in curves.items()},
            "order_vs": dict(baselines), "order_flips_at": flips}


def table_budgets(total: int) -> list[int]:
    """The n a compact table shows: 1, 2, 4, 8, ... and the full budget."""
    if total < 1:
        return []
    shown = [2**k for k in range(int(math.log2(total)) + 1)]
    return shown if shown[-1] == total else [*shown, total]
