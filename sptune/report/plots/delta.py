"""Δ test accuracy per variant on one task, against the variant it is paired with (``sptune.judging.pairing``), with the
95 % interval of the Δ as an error bar and a zero line: an interval that crosses zero is no evidence of a gain."""

from __future__ import annotations

from matplotlib.figure import Figure

from sptune.report.cells import Cell
from sptune.report.plots.canvas import new_figure, styled


@styled
def figure_delta(cells: list[Cell], colors: dict[str, str]) -> Figure | None:
    """One point per variant with a Δ (in points), its interval as an error bar; None when no variant has one."""
    paired = [c for c in cells if c.delta is not None]
    if not paired:
        return None
    fig = new_figure(6.4, 1.6 + 0.55 * len(paired))
    ax = fig.add_subplot()
    for i, c in enumerate(paired):
        mean = 100 * c.delta.mean
        lo, hi = (100 * c.delta.interval[0], 100 * c.delta.interval[1]) if c.delta.interval else (mean, mean)
        ax.errorbar([mean], [i], xerr=[[mean - lo], [hi - mean]], fmt="o", color=colors[c.variant], capsize=5,
                    markersize=7, lw=2)
        note = "" if c.delta.interval else "  (n = 1: no interval)"
        ax.annotate(f"{mean:+.2f}{note}", (mean, i), xytext=(0, 8), textcoords="offset points", ha="center",
                    fontsize=8)
    ax.axvline(0, color="#333333", lw=1)
    ax.set_yticks(range(len(paired)), [f"{c.variant} vs {c.baseline}" for c in paired])
    ax.set_ylim(len(paired) - 0.4, -0.6)
    ax.grid(False, axis="y")
    ax.set_xlabel("Δ test accuracy (points; bars: 95 % interval)")
    # Zero always in view, with room on both sides for the value labels.
    ends = [0.0] + [100 * x for c in paired for x in (c.delta.interval or (c.delta.mean, c.delta.mean))]
    pad = 0.15 * max(max(ends) - min(ends), 1.0)
    ax.set_xlim(min(ends) - pad, max(ends) + pad)
    return fig
