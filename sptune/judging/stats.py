"""Statistics over seeds: the one implementation behind results.json / results.md and the report.

The rules, stated once here and printed with every table (``INTERVAL_RULE``, ``delta_rule``):

- Interval of a mean: the Student-t 95 % interval, mean ± t(0.975, n-1)·s/√n, for every n ≥ 2; none for n = 1.
  Why t and not a bootstrap: studies have 1 to ~10 seeds, and a percentile bootstrap of n values never leaves
  [min, max] (with 3 seeds its "95 %" covers the true mean at most 75 % of the time: 1 - 2·(1/2)³). The
  t-interval is exact for normal seed noise and approaches the bootstrap as n grows, so one method serves all n.
- Bounds: an accuracy's interval is clipped to [0, 1], a Δ of accuracies to [-1, 1], and marked
  (``CLIPPED_MARK``) where that changed it. Clipping keeps the t-interval's coverage exactly: the true mean
  lies within the bounds, so it is inside the clipped interval whenever it was inside the unclipped one.
  Why not Wilson / Clopper-Pearson: they model one run's test-set sampling (a binomial count), not the
  spread of accuracies over seeds that this interval is about. Why not a t-interval on logits: it is an
  interval for another quantity (the mean logit), and undefined for a seed at 0 or 1 accuracy.
- Baseline: the variant named by the spec's ``baseline:`` (default ``scratch``). When no variant has that name
  there is no Δ at all (no guessing, e.g. "the first variant of kind scratch"). A variant that trains another
  model than the baseline (causal vs bidirectional) is paired with its like-for-like one: ``sptune.judging.pairing``.
- Δ vs the baseline: paired by seed (t-interval of the per-seed differences) over the seeds both have (its n
  and those seeds are stated with it); with no seed in common, a Welch interval of the difference of means
  (none when either side has a single seed).
- Smallest detectable difference (``min_detectable_effect``): the true Δ that a two-sided paired t-test at
  5 % would find with 80 % power if the per-seed Δs vary as they did, (t(0.975, n-1) + t(0.8, n-1))·s/√n.

Pure numpy (and scipy's t quantile): no torch, no Ray, so the report and the study driver can both import it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

CONFIDENCE = 0.95
POWER = 0.8
DEFAULT_BASELINE = "scratch"
T_METHOD, WELCH_METHOD = "t", "welch"
ACCURACY_BOUNDS, DELTA_BOUNDS = (0.0, 1.0), (-1.0, 1.0)
CLIPPED_MARK = "‡"
INTERVAL_RULE = ("95 % intervals: Student-t interval of the mean over seeds (mean ± t·s/√n); "
                 f"none with a single seed; {CLIPPED_MARK}: clipped to [0, 1] (a Δ to [-1, 1]), which keeps "
                 "its coverage.")


@dataclass(frozen=True)
class Summary:
    """Mean over seeds with its spread; for a Δ, how it was paired."""

    mean: float
    std: float | None  # sample std (ddof=1); None with one value, and for an unpaired Δ (no per-seed values)
    interval: tuple[float, float] | None  # 95 % interval of the mean; None with one value
    n: int  # values summarized (for a Δ: paired seeds, or the variant's seeds when unpaired)
    method: str | None  # T_METHOD, WELCH_METHOD, or None without an interval
    paired: bool | None = None  # Δ only: per-seed differences (True) or a difference of independent means
    n_base: int | None = None  # unpaired Δ only: the baseline's seeds
    clipped: bool = False  # the interval was cut at a bound (ACCURACY_BOUNDS, DELTA_BOUNDS)
    seeds: tuple[str, ...] | None = None  # paired Δ only: the seeds its differences are over

    def to_fields(self, prefix: str) -> dict[str, Any]:
        """Flat, JSON-ready fields (``{prefix}_mean`` …), as results.json stores them."""
        fields = {"mean": self.mean, "std": self.std, "ci95": list(self.interval) if self.interval else None,
                  "ci_method": self.method, "ci_clipped": self.clipped, "n": self.n}
        if self.paired is not None:
            fields.update(paired=self.paired, n_base=self.n_base, seeds=list(self.seeds or ()))
        return {f"{prefix}_{k}": v for k, v in fields.items()}

    @classmethod
    def from_fields(cls, entry: Mapping[str, Any], prefix: str) -> Summary | None:
        """The inverse of ``to_fields``; None when the entry has no such summary."""
        if entry.get(f"{prefix}_mean") is None:
            return None
        ci, seeds = entry.get(f"{prefix}_ci95"), entry.get(f"{prefix}_seeds")
        return cls(entry[f"{prefix}_mean"], entry.get(f"{prefix}_std"), tuple(ci) if ci else None,
                   entry.get(f"{prefix}_n", 1), entry.get(f"{prefix}_ci_method"), entry.get(f"{prefix}_paired"),
                   entry.get(f"{prefix}_n_base"), bool(entry.get(f"{prefix}_ci_clipped")),
                   tuple(seeds) if entry.get(f"{prefix}_paired") else None)


def finite_float(value: Any) -> float | None:
    """A finite float, else None (a NaN accuracy is as unusable as a missing one)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def values_by_seed(rows: Iterable[Mapping[str, Any]], key: str) -> dict[str, float]:
    """seed (as text) -> the row's finite value of ``key``; rows without one are left out."""
    out = {}
    for r in rows:
        value = finite_float(r.get(key))
        if value is not None:
            out[str(r["seed"])] = value
    return out


def t_quantile(df: float, p: float = 0.5 + CONFIDENCE / 2) -> float:
    """The Student-t quantile t(p, df), by default the two-sided 95 % one, t(0.975, df); df may be fractional
    (Welch)."""
    from scipy.special import stdtrit  # here: the preflight imports this module and never needs scipy

    return float(stdtrit(df, p))


MDE_RULE = ("Smallest detectable Δ: (t(0.975, n−1) + t(0.8, n−1))·s/√n, with s the std of the per-seed Δs and n "
            "the seeds they pair: the true difference a two-sided paired t-test at the 5 % level finds with 80 % "
            "power if the seeds vary as they did here. A Δ whose interval spans zero says nothing about differences "
            "smaller than it.")


def min_detectable_effect(sd: float | None, n: int, confidence: float = CONFIDENCE,
                          power: float = POWER) -> float | None:
    """The smallest true paired Δ a two-sided t-test at level 1 - ``confidence`` detects with ``power``, given
    the per-seed Δs' std ``sd`` over ``n`` seeds: (t(1 - α/2, n-1) + t(power, n-1))·sd/√n (the normal-theory
    approximation that ignores the t-distribution's noncentrality). None without a spread (n < 2)."""
    sd = finite_float(sd)
    if sd is None or n < 2:
        return None
    df = n - 1
    return (t_quantile(df, 0.5 + confidence / 2) + t_quantile(df, power)) * sd / math.sqrt(n)


def _t_interval(mean: float, standard_error: float, df: float) -> tuple[float, float]:
    half = t_quantile(df) * standard_error
    return mean - half, mean + half


def _bounded(s: Summary, bounds: tuple[float, float] | None) -> Summary:
    """``s`` with its interval clipped to ``bounds`` (and marked when that changed it)."""
    if s.interval is None or bounds is None:
        return s
    low, high = max(s.interval[0], bounds[0]), min(s.interval[1], bounds[1])
    return replace(s, interval=(low, high), clipped=(low, high) != s.interval)


def summarize(values: Sequence[float], bounds: tuple[float, float] | None = ACCURACY_BOUNDS) -> Summary | None:
    """Mean, sample std and 95 % t-interval of per-seed values (no std or interval for one), the interval
    clipped to ``bounds`` (an accuracy's by default; None: unbounded); None for no values."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return None
    mean = float(x.mean())
    if x.size == 1:
        return Summary(mean, None, None, 1, None)
    std = float(x.std(ddof=1))
    interval = _t_interval(mean, std / math.sqrt(x.size), x.size - 1)
    return _bounded(Summary(mean, std, interval, int(x.size), T_METHOD), bounds)


def welch_delta(values: Sequence[float], base: Sequence[float],
                bounds: tuple[float, float] | None = DELTA_BOUNDS) -> Summary:
    """Difference of two independent means with a Welch 95 % interval (none if either side has one value),
    clipped to ``bounds``."""
    a, b = np.asarray(values, dtype=float), np.asarray(base, dtype=float)
    mean = float(a.mean() - b.mean())
    if a.size < 2 or b.size < 2:
        return Summary(mean, None, None, int(a.size), None, paired=False, n_base=int(b.size))
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    if va + vb == 0:  # no spread on either side: Welch's df is 0/0, the interval a point
        return Summary(mean, None, (mean, mean), int(a.size), WELCH_METHOD, paired=False, n_base=int(b.size))
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    interval = _t_interval(mean, math.sqrt(va + vb), df)
    return _bounded(Summary(mean, None, interval, int(a.size), WELCH_METHOD, paired=False, n_base=int(b.size)),
                    bounds)


def paired_delta(values_by_seed: Mapping[str, float], base_by_seed: Mapping[str, float],
                 bounds: tuple[float, float] | None = DELTA_BOUNDS) -> Summary | None:
    """Δ vs the baseline: per-seed differences over the shared seeds (named in ``seeds``), else Welch; the
    interval clipped to ``bounds``; None if a side is empty."""
    common = [seed for seed in values_by_seed if seed in base_by_seed]
    if common:
        diffs = summarize([values_by_seed[s] - base_by_seed[s] for s in common], bounds)
        return replace(diffs, paired=True, seeds=tuple(common))
    if not values_by_seed or not base_by_seed:
        return None
    return welch_delta(list(values_by_seed.values()), list(base_by_seed.values()), bounds)


def baseline_variant(variants: Collection[str], baseline: str = DEFAULT_BASELINE) -> str | None:
    """The variant every Δ is taken against: the one named ``baseline``; None (no Δ) when there is none."""
    return baseline if baseline in variants else None


def delta_rule(variants: Collection[str], baseline: str = DEFAULT_BASELINE) -> str:
    """One sentence saying what Δ means in this table, or why there is none."""
    if baseline_variant(variants, baseline) is None:
        return (f"No Δ: no variant is named {baseline!r} (the baseline; name another with `baseline:` in the "
                "spec).")
    return (f"Δ vs {baseline!r}: paired by seed (t-interval of the per-seed differences) where the seeds match, "
            "else a Welch interval of the difference of means.")


def interval_label(s: Summary) -> str:
    """What an interval is and what it rests on, e.g. '95 % t-interval, n = 3', 'n = 1: no interval', or for a
    paired Δ '95 % t-interval, paired by seed, n = 2: seeds 1000, 1002'."""
    pairing = {True: "paired by seed, ", False: "unpaired, ", None: ""}[s.paired]
    sizes = f"n = {s.n} vs {s.n_base}" if s.paired is False else f"n = {s.n}"
    if s.seeds:
        sizes += (": seed " if len(s.seeds) == 1 else ": seeds ") + ", ".join(s.seeds)
    if s.interval is None:
        return f"{pairing}{sizes}; no interval" if s.seeds else f"{pairing}{sizes}: no interval"
    kind = "95 % Welch interval" if s.method == WELCH_METHOD else "95 % t-interval"
    return f"{kind}{' clipped' if s.clipped else ''}, {pairing}{sizes}"


def interval_text(s: Summary, fmt: Callable[[float], str]) -> str:
    """'[low, high] (95 % t-interval, n = 3)' with values written by ``fmt`` (``CLIPPED_MARK`` after a clipped
    one); '(n = 1: no interval)' without."""
    if s.interval is None:
        return f"({interval_label(s)})"
    mark = CLIPPED_MARK if s.clipped else ""
    return f"[{fmt(s.interval[0])}, {fmt(s.interval[1])}]{mark} ({interval_label(s)})"
