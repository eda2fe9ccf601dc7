"""Early-stopping survival per rung on one task: how many trials of each variant (and of each SPT pretraining)
trained at least that many epochs."""

from __future__ import annotations

from matplotlib.figure import Figure

from sptune.report.plots.canvas import PRETRAIN_COLORS, new_figure, styled

# group -> [(rung, trials reaching it, trials in the group)], as sptune.report.figures.survival computes it.
Survival = dict[str, list[tuple[int, int, int]]]


@styled
def figure_survival(surv: Survival, colors: dict[str, str]) -> Figure:
    """Grouped bars: trials reaching each rung, one bar per variant or pretraining objective."""
    rungs = sorted({r for pts in surv.values() for r, _, _ in pts})
    greys = iter(PRETRAIN_COLORS * len(surv))
    color = {g: colors[g] if g in colors else next(greys) for g in surv}
    top = max(n for pts in surv.values() for _, _, n in pts)
    fig = new_figure()
    ax = fig.add_subplot()
    width = 0.8 / len(surv)
    for gi, (group, pts) in enumerate(surv.items()):
        xs = [rungs.index(r) - 0.4 + (gi + 0.5) * width for r, _, _ in pts]
        bars = ax.bar(xs, [n for _, n, _ in pts], width * 0.92, color=color[group], alpha=0.85, label=group)
        ax.bar_label(bars, fontsize=8, padding=2)
    ax.set_xticks(range(len(rungs)), [f"≥ {r}" for r in rungs])
    ax.set_ylim(0, top * 1.15)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.grid(False, axis="x")
    ax.set_xlabel("rung (epochs reached ≥)")
    ax.set_ylabel("trials")
    fig.legend(loc="outside upper center", ncols=3, frameon=False)
    return fig
