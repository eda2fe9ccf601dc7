"""Accuracy vs learning rate per variant on one task: each trial's best validation accuracy, the best per LR (mean
over seeds, min–max band), re-runs of the selected config, test accuracy of the reported checkpoints, and each
variant's searched LR range in a strip under the axis."""

from __future__ import annotations

from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from sptune.plan.phases import Phase
from sptune.report.cells import Cell
from sptune.report.formatting import fmt_lr
from sptune.report.lr_search import CurvePoint, lr_curves, lr_space, space_bounds
from sptune.report.plots.canvas import MARK_COLOR, PERCENT, acc_limits, log_ticks, new_figure, styled
from sptune.report.records import ReportData, Trial


def _legend(trials: list[Trial], curves: dict[str, dict[Any, CurvePoint]], shown: list[str],
            colors: dict[str, str]) -> list[Any]:
    # Only the marks this figure actually draws.
    grey = {"color": MARK_COLOR, "linestyle": "none"}
    handles = [Line2D([], [], color=colors[v], lw=2.2, label=v) for v in shown]
    handles += [Line2D([], [], marker="o", markerfacecolor="none", label="trial (best val)", **grey),
                Line2D([], [], marker="D", label="test, selected", **grey)]
    if any(p.high > p.low for c in curves.values() for p in c.values()):
        handles.append(Patch(color=MARK_COLOR, alpha=0.25, label="seed min–max"))
    if any(t.phase == Phase.RERUN for t in trials):
        handles.append(Line2D([], [], marker="o", markersize=4, label="seed re-run (best val)", **grey))
    if any(t.status in ("diverged", "failed") for t in trials):
        handles.append(Line2D([], [], marker="x", label="diverged/failed", **grey))
    return handles


def _draw_variant(ax: Axes, trials: list[Trial], curve: dict[Any, CurvePoint], color: str) -> None:
    pts = sorted(curve.values(), key=lambda p: p.lr)
    if len(pts) >= 2 and any(p.high > p.low for p in pts):
        ax.fill_between([p.lr for p in pts], [p.low for p in pts], [p.high for p in pts], color=color, alpha=0.18,
                        linewidth=0)
    ax.plot([p.lr for p in pts], [p.mean for p in pts], color=color, lw=2.2)
    done = [t for t in trials if t.completed and t.best_val_acc is not None]
    search = [t for t in done if t.phase == Phase.SEARCH]
    reruns = [t for t in done if t.phase == Phase.RERUN]
    ax.plot([t.lr for t in search], [t.best_val_acc for t in search], "o", markerfacecolor="none", color=color,
            markersize=6, alpha=0.8)
    ax.plot([t.lr for t in reruns], [t.best_val_acc for t in reruns], "o", color=color, markersize=4)
    bad = [t.lr for t in trials if t.status in ("diverged", "failed")]
    if not bad:  # an empty unclipped line still claims a marker's room at (0, 0) in the layout
        return
    # No accuracy to place: drawn on the x axis at its LR.
    ax.plot(bad, [0.0] * len(bad), "x", color=color, markersize=7, mew=2, transform=ax.get_xaxis_transform(),
            clip_on=False)


def _draw_tests(ax: Axes, cell: Cell | None, color: str) -> None:
    if cell is None:
        return
    seeds = [s for s in cell.test if s in cell.lrs]
    ax.plot([cell.lrs[s] for s in seeds], [cell.test[s] for s in seeds], "D", color=color, markersize=7,
            markeredgecolor="white", zorder=4)


def _draw_ranges(strip: Axes, shown: list[str], bounds: dict[str, Any], colors: dict[str, str]) -> None:
    """Each variant's searched LR range as a bar (grid values as ticks), one row per variant."""
    for i, v in enumerate(shown):
        if bounds[v]:
            lo, hi, grid = bounds[v]
            strip.hlines(i, lo, hi, color=colors[v], lw=4, alpha=0.55)
            strip.plot(grid, [i] * len(grid), "|", color=colors[v], markersize=9, mew=1.6)
    strip.set_yticks(range(len(shown)), shown)
    strip.set_ylim(len(shown) - 0.5, -0.5)
    strip.grid(False, axis="y")
    strip.set_ylabel("searched", rotation=0, ha="right", va="center")


@styled
def figure_lr(data: ReportData, task: str, variants: list[str], colors: dict[str, str],
              cells: dict[tuple[str, str], Cell]) -> Figure | None:
    """Accuracy vs learning rate for every variant on one task; None without search trials."""
    trials = [t for t in data.trials if t.task == task and t.phase in (Phase.SEARCH, Phase.RERUN) and t.lr]
    if not trials:
        return None
    curves = lr_curves(trials)
    shown = [v for v in variants if any(t.variant == v for t in trials)]
    bounds = {v: space_bounds(lr_space(data.spec, v)) for v in shown}
    xs = [t.lr for t in trials] + [b for s in bounds.values() if s for b in s[:2]]
    ys = [t.best_val_acc for t in trials if t.best_val_acc is not None and t.completed]
    ys += [c.test_summary.mean for v in shown if (c := cells.get((task, v))) and c.test_summary]
    fig = new_figure(6.4, 4.4 + 0.2 * len(shown))
    ax, strip = fig.subplots(2, 1, sharex=True, height_ratios=[6, 0.5 + 0.4 * len(shown)])
    for v in shown:
        _draw_variant(ax, [t for t in trials if t.variant == v], curves.get(v, {}), colors[v])
        _draw_tests(ax, cells.get((task, v)), colors[v])
    _draw_ranges(strip, shown, bounds, colors)
    # Limits before the log scale: one searched LR would otherwise be autoscaled to a zero-width axis first.
    ax.set_xlim(min(xs) / 1.4, max(xs) * 1.4)
    ax.set_xscale("log")
    ax.set_ylim(*acc_limits(ys))
    ax.yaxis.set_major_formatter(PERCENT)
    ax.set_ylabel("accuracy")
    strip.xaxis.set_major_locator(FixedLocator(log_ticks(*ax.get_xlim())))
    strip.xaxis.set_minor_locator(NullLocator())
    strip.xaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_lr(v)))
    strip.set_xlabel("learning rate (log scale)")
    fig.legend(handles=_legend(trials, curves, shown, colors), loc="outside upper center", ncols=4, frameon=False)
    return fig
