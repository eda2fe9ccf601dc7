"""Sequential re-runs: seeds added in groups until each comparison is decided, at a stated error rate.

The design (``SequentialDesign``): looks after ``min``, ``min + step``, ... up to ``max`` seeds. At look k the
paired per-seed Δs (a variant minus its baseline, over the seeds both have) give a *repeated confidence
interval* (RCI), Δ̄ ± c_k·s/√n, whose critical values c_k come from a group-sequential design with a Lan-DeMets
alpha-spending function (O'Brien-Fleming-type by default, or Pocock-type): the probability that *any* look's
interval misses the true mean is at most alpha, so stopping at whichever look decides keeps the error rate.

- z-boundaries: the two-sided boundary at look k spends α(t_k) − α(t_{k−1}) of the error, t_k = n_k/n_max the
  information fraction, by recursive numerical integration of the z-statistics' joint law (Jennison &
  Turnbull 2000, ch. 19: the grid and update of ``gsdesign``, the Python port of R's gsDesign).
- Unknown spread, few seeds: each z-boundary's nominal level p_k is carried to the t-statistic with n_k − 1
  degrees of freedom (Jennison & Turnbull's significance-level approach, §11.4), c_k = t(1 − p_k/2, n_k − 1):
  a z-boundary on a t-statistic with 3 seeds would double the error rate. tests/judging/test_sequential.py
  measures the false-positive rate and the coverage by simulation.
- Verdict (``VERDICTS``): *better* / *worse* when the interval excludes 0 (above / below), else *equivalent*
  when it lies inside ±effect, else the comparison continues; at ``max`` it is *undecided*. A direction takes
  precedence: an interval above 0 and inside ±effect is *better* (by less than the effect).

Pure numpy/scipy (and gsdesign, numpy only): no torch, no Ray; the ledger derives each look's decision from the
stored per-seed scores, so a resumed study re-derives the same one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

from sptune.judging.stats import POWER, t_quantile

OBRIEN_FLEMING, POCOCK = "obrien_fleming", "pocock"
SPENDING = (OBRIEN_FLEMING, POCOCK)
BETTER, WORSE, EQUIVALENT, CONTINUE, UNDECIDED = "better", "worse", "equivalent", "continue", "undecided"
VERDICTS = (BETTER, WORSE, EQUIVALENT, UNDECIDED)
GRID_POINTS = 18  # gsDesign's default: Simpson's rule accurate to ~1e-6 in the crossing probabilities

SEQUENTIAL_RULE = (
    "Sequential re-runs: seeds are added in groups; after each group the paired per-seed Δ gets a "
    "repeated confidence interval Δ̄ ± c·s/√n whose critical value c (the boundary) comes from a "
    "group-sequential design with Lan-DeMets alpha spending, carried to the t-statistic with n − 1 "
    "degrees of freedom: every look's interval together covers the true Δ with probability ≥ 1 − "
    "alpha. A comparison is decided better/worse when the interval excludes 0, equivalent when it "
    "lies inside ±effect, else it goes on, and is undecided at max seeds. The decision that stops "
    "the seeds is taken on the validation Δ (the test split is read once, at the end); the test Δ "
    "gets its own interval at the look its comparison ended."
)


def spent(t: float, alpha: float, spending: str = OBRIEN_FLEMING) -> float:
    """The error spent by information fraction ``t`` (Lan & DeMets 1983): O'Brien-Fleming-type
    2·(1 − Φ(z(1 − α/2)/√t)) spends almost nothing early; Pocock-type α·ln(1 + (e − 1)·t) spends evenly."""
    from scipy.stats import norm  # here: the spec and the preflight import this module without needing scipy

    t = min(max(t, 0.0), 1.0)
    if t == 0.0:
        return 0.0
    if spending == POCOCK:
        return alpha * math.log(1 + (math.e - 1) * t)
    return float(2 * norm.sf(norm.isf(alpha / 2) / math.sqrt(t)))


@dataclass(frozen=True)
class SequentialDesign:
    """Looks after ``looks[k]`` seeds (increasing), two-sided error ``alpha``, the equivalence margin ``effect``."""

    looks: tuple[int, ...]
    alpha: float
    effect: float
    spending: str = OBRIEN_FLEMING

    @property
    def max_seeds(self) -> int:
        return self.looks[-1]

    @cached_property
    def z_bounds(self) -> tuple[float, ...]:
        """Two-sided critical values of the z-statistic at each look (see the module docstring)."""
        from gsdesign import h1, hupdate
        from scipy.stats import norm

        info = [float(n) for n in self.looks]
        cumulative = [spent(n / info[-1], self.alpha, self.spending) for n in info]
        bounds = [float(norm.isf(cumulative[0] / 2))]
        grid = h1(GRID_POINTS, 0.0, info[0], -bounds[0], bounds[0])
        for k in range(1, len(info)):
            z, _, h = grid
            target = cumulative[k] - cumulative[k - 1]
            bounds.append(_next_bound(z * math.sqrt(info[k - 1]), h, info[k], info[k] - info[k - 1], target))
            grid = hupdate(GRID_POINTS, 0.0, info[k], -bounds[k], bounds[k], 0.0, info[k - 1], grid)
        return tuple(bounds)

    def spent_by(self, look: int) -> float:
        """The error spent up to look ``look`` (from 0)."""
        return spent(self.looks[look] / self.max_seeds, self.alpha, self.spending)

    def nominal_level(self, look: int) -> float:
        """The two-sided nominal level of look ``look`` (from 0): 2·(1 − Φ(c_k))."""
        from scipy.stats import norm

        return float(2 * norm.sf(self.z_bounds[look]))

    def t_bound(self, look: int, n: int) -> float | None:
        """The critical value of the t-statistic of ``n`` paired seeds at look ``look`` (None for n < 2)."""
        return _t_bound(self, look, n) if n >= 2 else None


@lru_cache(maxsize=1024)
def _t_bound(design: SequentialDesign, look: int, n: int) -> float:
    return t_quantile(n - 1, 1 - design.nominal_level(look) / 2)


@lru_cache(maxsize=1024)
def _plain_t(n: int) -> float:
    return t_quantile(n - 1)


def _next_bound(shift: np.ndarray, h: np.ndarray, info: float, added: float, target: float) -> float:
    """The z-boundary c at which the probability of crossing ±c first at this look is ``target``, given the
    sub-density ``h`` (Simpson-weighted) of the previous look's statistic on its continuation region (``shift``: its
    grid points times √information) and the information ``added`` since."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    def crossing(c: float) -> float:
        edge, scale = c * math.sqrt(info), math.sqrt(added)
        return float(h @ (norm.cdf((-edge - shift) / scale) + norm.sf((edge - shift) / scale))) - target

    return float(brentq(crossing, 1e-6, 60.0, xtol=1e-10))


@dataclass(frozen=True)
class Look:
    """One comparison at one look: its paired Δs' mean and spread, the boundary, both intervals, the verdict."""

    look: int  # from 1
    n: int  # the paired seeds it rests on
    seeds: tuple[str, ...]
    mean: float | None
    sd: float | None
    bound: float | None  # critical value of the t-statistic (None with fewer than 2 seeds)
    interval: tuple[float, float] | None  # the repeated (sequential-valid) interval
    t_interval: tuple[float, float] | None  # the plain 95 % t-interval, for comparison
    verdict: str  # BETTER, WORSE, EQUIVALENT, CONTINUE (more looks to come) or UNDECIDED (the last look)
    spent: float  # the error spent up to this look

    @property
    def decided(self) -> bool:
        return self.verdict in (BETTER, WORSE, EQUIVALENT)

    def to_json(self) -> dict:
        return {
            "look": self.look,
            "n": self.n,
            "seeds": list(self.seeds),
            "mean": self.mean,
            "sd": self.sd,
            "boundary": self.bound,
            "interval": list(self.interval) if self.interval else None,
            "t_interval": list(self.t_interval) if self.t_interval else None,
            "verdict": self.verdict,
            "alpha_spent": self.spent,
        }


def verdict(interval: tuple[float, float] | None, effect: float, last: bool) -> str:
    """What an interval decides (the module docstring's rule)."""
    if interval is not None:
        low, high = interval
        if low > 0:
            return BETTER
        if high < 0:
            return WORSE
        if -effect < low and high < effect:
            return EQUIVALENT
    return UNDECIDED if last else CONTINUE


def look_at(diffs: Sequence[float], design: SequentialDesign, look: int, seeds: Sequence[str] = ()) -> Look:
    """Look ``look`` (from 0) at the paired per-seed Δs ``diffs``."""
    x = np.asarray(diffs, dtype=float)
    n, last = int(x.size), look == len(design.looks) - 1
    spent_here = design.spent_by(look)
    if n < 2:
        mean = float(x.mean()) if n else None
        return Look(
            look + 1, n, tuple(seeds), mean, None, None, None, None, verdict(None, design.effect, last), spent_here
        )
    mean, sd = float(x.mean()), float(x.std(ddof=1))
    se, bound = sd / math.sqrt(n), design.t_bound(look, n)
    interval, plain = (mean - bound * se, mean + bound * se), (mean - _plain_t(n) * se, mean + _plain_t(n) * se)
    return Look(
        look + 1, n, tuple(seeds), mean, sd, bound, interval, plain, verdict(interval, design.effect, last), spent_here
    )


def comparison(
    values: Mapping[str, float],
    base: Mapping[str, float],
    seeds: Sequence[str],
    design: SequentialDesign,
    upto: int | None = None,
) -> Look:
    """A comparison's state after look ``upto`` (from 0; None: the last): the first look that decided, else look
    ``upto`` (CONTINUE, or UNDECIDED at the last). Look k pairs the seeds among ``seeds[:looks[k]]`` (in the order
    they are added) that both sides have; a seed that diverged or failed on either side is left out."""
    upto = len(design.looks) - 1 if upto is None else upto
    for k in range(upto + 1):
        paired = [s for s in seeds[: design.looks[k]] if s in values and s in base]
        found = look_at([values[s] - base[s] for s in paired], design, k, paired)
        if found.decided or k == upto:
            return found
    raise ValueError("no look")  # unreachable: the loop returns at k == upto


def stop_look(diffs: Sequence[float], design: SequentialDesign) -> Look:
    """Where a comparison of per-seed Δs (in the order seeds are added, all of them available) ends."""
    seeds = [str(i) for i in range(len(diffs))]
    values = dict(zip(seeds, map(float, diffs), strict=True))
    return comparison(values, dict.fromkeys(seeds, 0.0), seeds, design)


FIXED_N_RULE = (
    "Fixed-N: the seeds a fixed design (one paired t-test at the same alpha, 80 % power) needs to "
    "detect a true Δ equal to the effect, given the per-seed Δs' std s: the smallest n with "
    "(t(1 − alpha/2, n − 1) + t(0.8, n − 1))·s/√n ≤ effect."
)


def fixed_n(sd: float | None, effect: float, alpha: float, power: float = POWER, most: int = 100_000) -> int | None:
    """``FIXED_N_RULE``'s n (None without a spread; ``most`` + 1 when even ``most`` seeds would not do)."""
    if sd is None or not math.isfinite(sd):
        return None
    if sd == 0:
        return 2
    from scipy.special import stdtrit

    n = np.arange(2, most + 1)
    detectable = (stdtrit(n - 1, 1 - alpha / 2) + stdtrit(n - 1, power)) * sd / np.sqrt(n)
    enough = np.nonzero(detectable <= effect)[0]
    return int(n[enough[0]]) if enough.size else most + 1
