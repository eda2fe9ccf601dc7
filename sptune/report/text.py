"""How values are written in the page and tables: learning rates, accuracies in percent, CIs, HTML escaping."""

from __future__ import annotations

import html
from typing import Any

from sptune.report.records import as_float
from sptune.report.stats import Summary


def esc(text: Any) -> str:
    """Any value as HTML text (attribute-safe)."""
    return html.escape(str(text), quote=True)


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


def ci_text(ci: tuple[float, float] | None, signed: bool = False) -> str:
    """'95% CI [low, high]' in percent (points with a sign for deltas); empty without a CI."""
    if ci is None:
        return ""
    f = (lambda v: f"{100 * v:+.2f}") if signed else pct
    return f"95% CI [{f(ci[0])}, {f(ci[1])}]"


def mean_std(s: Summary, signed: bool = False) -> str:
    """'mean ± std' in percent (std left out with one seed)."""
    mean = f"{100 * s.mean:+.2f}" if signed else pct(s.mean)
    return mean + (f" ± {100 * s.std:.2f}" if s.std is not None else "")
