"""How values are written in the page and tables: learning rates, accuracies in percent, intervals (the page's
HTML escaping is its template's: Jinja2 with autoescape)."""

from __future__ import annotations

from typing import Any

from sptune.judging.stats import Summary, interval_text
from sptune.report.records import as_float
from sptune.rules.seeds import SPREAD_TEXT


def spread_sentence(spread: str | None) -> str:
    """What the spread over seeds covers, as results.json records it; "" for studies that predate the record."""
    return SPREAD_TEXT.get(spread or "", "")


def fmt_lr(x: float | None) -> str:
    """A learning rate as 3e-4 style (no trailing zeros); "-" when unknown."""
    if x is None:
        return "-"
    mant, exp = f"{x:.2e}".split("e")
    mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{int(exp)}"


def pct(x: float) -> str:
    """An accuracy fraction in percent, two decimals."""
    return f"{100 * x:.2f}"


def fmt_pct(v: Any) -> str:
    """A logged accuracy in percent; "-" when missing or not a number."""
    x = as_float(v)
    return "-" if x is None else pct(x)


def signed_pts(x: float) -> str:
    """A difference of accuracy fractions in points, with its sign."""
    return f"{100 * x:+.2f}"


def interval_pct(s: Summary, signed: bool = False) -> str:
    """'[low, high] (95 % t-interval, n = 3)' in percent (signed points for a Δ); 'n = 1: no interval' without."""
    return interval_text(s, signed_pts if signed else pct)


def mean_std(s: Summary, signed: bool = False) -> str:
    """'mean ± std' in percent (std left out with one seed)."""
    mean = signed_pts(s.mean) if signed else pct(s.mean)
    return mean + (f" ± {100 * s.std:.2f}" if s.std is not None else "")
