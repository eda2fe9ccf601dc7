"""Optuna's hyperparameter importances for one variant's search, as horizontal bars (largest on top)."""

from __future__ import annotations

from matplotlib.figure import Figure

from sptune.report.plots.canvas import new_figure, styled


@styled
def figure_importances(variant: str, importances: dict[str, float], color: str) -> Figure:
    """Bars of importance per searched parameter (Optuna's fANOVA-style share of the objective's variance)."""
    params = sorted(importances, key=importances.get)  # barh draws bottom-up: the largest ends on top
    fig = new_figure(5.2, 1.2 + 0.35 * len(params))
    ax = fig.add_subplot()
    bars = ax.barh(params, [importances[p] for p in params], color=color, alpha=0.85)
    ax.bar_label(bars, fmt="%.2f", fontsize=8, padding=2)
    ax.set_xlim(0, max([*importances.values(), 0.0]) * 1.2 or 1.0)
    ax.grid(False, axis="y")
    ax.set_xlabel("importance")
    ax.set_title(variant, loc="left")
    return fig
