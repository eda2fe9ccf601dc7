"""Expected best validation accuracy vs search budget on one task (Dodge et al. 2019, with Tang et al. 2020's
unbiased estimator, `sptune.judging.expected_max`): per variant, the best validation accuracy a search of n of
its trials would be expected to reach, with the budgets at which a variant's order vs its paired one flips."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from sptune.report.plots.canvas import MARK_COLOR, finish_accuracy_axes, new_figure, styled


@styled
def figure_budget(curves: dict[str, list[float]], flips: dict[str, list[int]], colors: dict[str, str]) -> Figure | None:
    """One line per variant (n = 1..its trials); a ring where its order vs its paired variant flips. None when no
    variant has two trials (one trial is no curve)."""
    drawn = {v: c for v, c in curves.items() if len(c) >= 2}
    if not drawn:
        return None
    fig = new_figure()
    ax = fig.add_subplot()
    for variant, curve in drawn.items():
        ns = range(1, len(curve) + 1)
        ax.plot(ns, curve, color=colors[variant], lw=2, marker="o", markersize=3)
        at = [n for n in flips.get(variant, []) if n <= len(curve)]
        ax.plot(at, [curve[n - 1] for n in at], "o", markerfacecolor="none", markeredgecolor=colors[variant],
                markersize=11, mew=1.8)
    handles = [Line2D([], [], color=colors[v], lw=2, label=v) for v in drawn]
    if any(flips.get(v) for v in drawn):
        handles.append(Line2D([], [], color=MARK_COLOR, marker="o", markerfacecolor="none", markersize=9,
                              linestyle="none", label="order vs paired variant flips"))
    return finish_accuracy_axes(fig, handles, (0.8, max(len(c) for c in drawn.values()) + 0.2),
                                [v for c in drawn.values() for v in c], "search trials (n)",
                                "expected best validation accuracy")
