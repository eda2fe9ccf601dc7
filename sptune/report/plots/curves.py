"""Learning curves on one task: validation accuracy per epoch of the runs whose test accuracy is reported, with the
epoch selected on validation marked."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from sptune.plan.phases import Phase
from sptune.report.plots.canvas import MARK_COLOR, finish_accuracy_axes, new_figure, styled
from sptune.report.records import ReportData, Trial


def reported_runs(data: ReportData, task: str) -> list[Trial]:
    """The runs whose test accuracy the table reports (seed re-runs when the study has them), else the search's
    selected trials; only those with a curve."""
    reported = {r.get("mlflow_run_id") for r in data.rows if r["task"] == task}
    sel = [t for t in data.trials if t.task == task and t.run_id in reported and t.curve]
    return sel or [t for t in data.trials if (t.phase, t.task) == (Phase.SEARCH, task) and t.selected and t.curve]


@styled
def figure_curves(data: ReportData, task: str, variants: list[str], colors: dict[str, str]) -> Figure | None:
    """Validation accuracy per epoch of the reported runs on one task; None without curves."""
    sel = reported_runs(data, task)
    if not sel:
        return None
    fig = new_figure()
    ax = fig.add_subplot()
    dashed = False
    for t in sel:
        # Seeds of one variant alternate solid and dashed, so overlapping curves stay apart.
        dash = sorted({s.seed for s in sel if s.variant == t.variant}).index(t.seed) % 2 == 1
        dashed |= dash
        ax.plot([s for s, _ in t.curve], [v for _, v in t.curve], color=colors[t.variant], lw=1.8,
                linestyle="--" if dash else "-")
        chosen = dict(t.curve).get(t.selected_epoch or -1)
        if chosen is not None:
            ax.plot([t.selected_epoch], [chosen], "o", color=colors[t.variant], markersize=6, zorder=3)
    shown = [v for v in variants if any(t.variant == v for t in sel)]
    handles = [Line2D([], [], color=colors[v], lw=2, label=v) for v in shown]
    if dashed:
        handles.append(Line2D([], [], color=MARK_COLOR, lw=1.5, linestyle="--", label="further seeds"))
    handles.append(Line2D([], [], color=MARK_COLOR, marker="o", linestyle="none", label="selected epoch"))
    return finish_accuracy_axes(fig, handles, (0, max(s for t in sel for s, _ in t.curve)),
                                [v for t in sel for _, v in t.curve], "epoch", "validation accuracy")
