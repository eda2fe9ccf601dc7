"""How values are written in the page and tables: learning rates, accuracies in percent, intervals (the page's
HTML escaping is its template's: Jinja2 with autoescape)."""

from __future__ import annotations

from typing import Any

from sptune.judging.sequential_results import stopped_text
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


def sequential_text(c: dict[str, Any] | None) -> str:
    """A comparison of sequential re-runs beside its Δ: the verdict, the seeds, where validation stopped them, the
    sequential interval and boundary, and the fixed-N design's seeds; "" with fixed re-runs."""
    if not c:
        return ""
    t = c["test"]
    interval = "no interval" if not t["interval"] else (
        f"sequential interval [{signed_pts(t['interval'][0])}, {signed_pts(t['interval'][1])}] pts "
        f"(boundary c = {t['boundary']:.2f})")
    fixed = "" if c["fixed_n"] is None else f"; a fixed-N design needs {c['fixed_n']} seeds"
    return (f"{c['verdict']}: {c['seeds_used']} of {c['max_seeds']} seeds (stopped {stopped_text(c)} on "
            f"validation); {interval}{fixed}")
