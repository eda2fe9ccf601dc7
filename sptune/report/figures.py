"""The report's figures, per task: accuracy vs learning rate, learning curves of the reported runs, and early-stopping
survival per rung; each an inline SVG with its caption."""

from __future__ import annotations

import math
from typing import Any

from sptune.report.cells import Cell
from sptune.report.lr_search import CurvePoint, describe_space, lr_curves, lr_space, space_bounds
from sptune.report.records import RERUN, SEARCH, ReportData, Trial, as_float
from sptune.report.svg import LegendItem, Plot, log_ticks, nice_ticks
from sptune.report.text import esc, fmt_lr

PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#8C564B", "#000000")
PRETRAIN_COLORS = ("#7f7f7f", "#b5b5b5")
LR_CAPTION = ("Circles: best validation accuracy of each trial at its LR (early-stopped trials at the epoch they "
              "reached). Line: best per LR, mean over the seeds that searched; band: min–max over those seeds. "
              "Filled dots: the selected config re-trained per seed. Diamonds: test accuracy of the reported "
              "checkpoints. Bars under the axis: each variant's searched LR range (ticks: grid values).")
CURVES_CAPTION = ("Validation accuracy per epoch of the runs whose test accuracy is reported; dashed lines are "
                  "further seeds; dots mark the epoch chosen on validation.")
SURVIVAL_CAPTION = ("Trials that trained at least that many epochs; a rung a variant barely reaches means few of "
                    "its configurations were trained to the end.")


def variant_colors(variants: list[str]) -> dict[str, str]:
    """One colour-blind-safe colour per variant, the same in every figure."""
    return {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(variants)}


def _acc_limits(values: list[float]) -> tuple[float, float]:
    # Whole tens of percent around the data, at least 10 points tall.
    values = [v for v in values if v is not None] or [0.0, 1.0]
    lo, hi = math.floor(min(values) * 10 - 1e-9) / 10, math.ceil(max(values) * 10 + 1e-9) / 10
    return max(0.0, lo), min(1.0, max(hi, lo + 0.1))


def _pct_tick(v: float) -> str:
    return f"{100 * v:.0f}%"


def _int_tick(v: float) -> str:
    return f"{v:g}"


# ---------------------------------------------------------------- accuracy vs learning rate


def _lr_legend(trials: list[Trial], curves: dict[str, dict[Any, CurvePoint]], shown: list[str],
               colors: dict[str, str]) -> list[LegendItem]:
    # Only the marks this figure actually draws.
    legend = [LegendItem(v, colors[v], "line") for v in shown] + [
        LegendItem("trial (best val)", "#555", "hollow"), LegendItem("test, selected", "#555", "diamond")]
    if any(p.high > p.low for c in curves.values() for p in c.values()):
        legend.append(LegendItem("seed min–max", "#555", "band"))
    if any(t.phase == RERUN for t in trials):
        legend.append(LegendItem("seed re-run (best val)", "#555", "dot"))
    if any(t.status in ("diverged", "failed") for t in trials):
        legend.append(LegendItem("diverged/failed", "#555", "cross"))
    return legend


def figure_lr(data: ReportData, task: str, variants: list[str], colors: dict[str, str],
              cells: dict[tuple[str, str], Cell]) -> str | None:
    """Accuracy vs learning rate for every variant on one task; None without search trials."""
    trials = [t for t in data.trials if t.task == task and t.phase in (SEARCH, RERUN) and t.lr]
    if not trials:
        return None
    curves = lr_curves(trials)
    shown = [v for v in variants if any(t.variant == v for t in trials)]
    spaces = {v: space_bounds(lr_space(data.spec, v)) for v in shown}
    xs = [t.lr for t in trials] + [b for s in spaces.values() if s for b in s[:2]]
    ys = [t.best_val_acc for t in trials if t.best_val_acc is not None and t.completed]
    ys += [c.test_summary.mean for v in shown if (c := cells.get((task, v))) and c.test_summary]
    plot = Plot((min(xs) / 1.4, max(xs) * 1.4), _acc_limits(ys), logx=True,
                legend=_lr_legend(trials, curves, shown, colors), rug_rows=len(shown))
    for i, v in enumerate(shown):
        _draw_variant_lr(plot, [t for t in trials if t.variant == v], curves.get(v, {}), colors[v])
        _draw_tests(plot, cells.get((task, v)), colors[v])
        if spaces[v]:
            lo, hi, pts = spaces[v]
            plot.rug(i, lo, hi, pts, colors[v], f"{v}: searched LR {describe_space(lr_space(data.spec, v))}")
    plot.frame(log_ticks(*plot.xlim), nice_ticks(*plot.ylim), "learning rate (log scale; bars below: searched range)",
               "accuracy", fmt_lr, _pct_tick)
    return plot.svg(f"Accuracy vs learning rate on {task}")


def _draw_variant_lr(plot: Plot, trials: list[Trial], curve: dict[Any, CurvePoint], color: str) -> None:
    pts = sorted(curve.values(), key=lambda p: p.lr)
    plot.band([p.lr for p in pts], [p.low for p in pts], [p.high for p in pts], color)
    plot.line([(p.lr, p.mean) for p in pts], color)
    for t in trials:
        what = "seed re-run" if t.phase == RERUN else "trial"
        tip = f"{t.variant} {what} seed {t.seed} lr {fmt_lr(t.lr)} batch {t.batch_size}: {t.status}, {t.epochs} epochs"
        if t.completed and t.best_val_acc is not None:
            mark, size = ("dot", 2.8) if t.phase == RERUN else ("hollow", 3.5)
            plot.mark(mark, t.lr, t.best_val_acc, color, f"{tip}, best val {100 * t.best_val_acc:.1f}%", size)
        elif t.status in ("diverged", "failed"):
            plot.mark("cross", t.lr, plot.ylim[0], color, tip)  # no accuracy: drawn on the axis at its LR


def _draw_tests(plot: Plot, cell: Cell | None, color: str) -> None:
    if cell is None:
        return
    for seed, acc in cell.test.items():
        if seed in cell.lrs:
            plot.mark("diamond", cell.lrs[seed], acc, color,
                      f"{cell.variant} seed {seed}: test {100 * acc:.2f}% at lr {fmt_lr(cell.lrs[seed])}", 4.5)


# ---------------------------------------------------------------- learning curves


def figure_curves(data: ReportData, task: str, variants: list[str], colors: dict[str, str]) -> str | None:
    """Validation accuracy per epoch of the reported runs on one task; None without curves."""
    # The runs whose test accuracy the table reports (seed re-runs when the study has them).
    reported = {r.get("mlflow_run_id") for r in data.rows if r["task"] == task}
    sel = [t for t in data.trials if t.task == task and t.run_id in reported and t.curve]
    sel = sel or [t for t in data.trials if (t.phase, t.task) == (SEARCH, task) and t.selected and t.curve]
    if not sel:
        return None
    shown = [v for v in variants if any(t.variant == v for t in sel)]
    legend = [LegendItem(v, colors[v], "line") for v in shown] + [LegendItem("selected epoch", "#555", "dot")]
    max_ep = max(s for t in sel for s, _ in t.curve)
    plot = Plot((0, max_ep), _acc_limits([v for t in sel for _, v in t.curve]), legend=legend)
    for t in sel:
        dash = sorted({s.seed for s in sel if s.variant == t.variant}).index(t.seed) % 2 == 1
        plot.line([(float(s), v) for s, v in t.curve], colors[t.variant], dash=dash, width=2)
        chosen = dict(t.curve).get(t.selected_epoch or -1)
        if chosen is not None:
            plot.mark("dot", t.selected_epoch, chosen, colors[t.variant],
                      f"{t.variant} seed {t.seed}: val {100 * chosen:.1f}% at epoch {t.selected_epoch}")
    plot.frame(nice_ticks(0, max_ep, 6), nice_ticks(*plot.ylim), "epoch", "validation accuracy", _int_tick, _pct_tick)
    return plot.svg(f"Validation accuracy per epoch of the selected trials on {task}")


# ---------------------------------------------------------------- ASHA survival


def asha_rungs(spec: dict[str, Any], max_epochs: int, reached: list[int]) -> list[int]:
    """Halving rungs (grace × rf^k below max_t: synchronous halving's, every Hyperband bracket's from some k on, and
    ASHA's as Ray places them) plus max_t; else (FIFO) distinct epochs reached."""
    sched = spec.get("scheduler") or {}
    grace, rf = as_float(sched.get("grace_period")), as_float(sched.get("reduction_factor"))
    if sched.get("type", "sha") not in ("sha", "hyperband", "asha") or not grace or not rf or rf <= 1 or not max_epochs:
        return sorted(set(reached))
    rungs, r = [], grace
    while r < max_epochs:
        rungs.append(int(round(r)))
        r *= rf
    return rungs + [max_epochs]


def survival(data: ReportData, task: str, variants: list[str]) -> dict[str, list[tuple[int, int, int]]]:
    """group -> [(rung, trials reaching it, trials in the group)]: each variant's LR search, then each SPT
    pretraining objective (seed re-runs are not early-stopped, so they are left out)."""
    groups = {v: data.phase_trials((SEARCH,), task, v) for v in variants}
    groups.update({f"SPT pretraining ({obj})": ts for obj, ts in data.pretraining(task).items()})
    out = {}
    for name, trials in groups.items():
        if not trials:
            continue
        max_ep = max([t.max_epochs or 0 for t in trials]) or max(t.epochs for t in trials)
        rungs = asha_rungs(data.spec, max_ep, [t.epochs for t in trials])
        out[name] = [(r, sum(t.epochs >= r for t in trials), len(trials)) for r in rungs]
    return out


def figure_survival(data: ReportData, task: str, variants: list[str], colors: dict[str, str]) -> str | None:
    """Grouped bars: trials reaching each ASHA rung, per variant and pretraining objective; None without any."""
    surv = survival(data, task, variants)
    if not surv:
        return None
    rungs = sorted({r for pts in surv.values() for r, _, _ in pts})
    greys = iter(PRETRAIN_COLORS * len(surv))
    color = {g: colors[g] if g in colors else next(greys) for g in surv}
    top = max(n for pts in surv.values() for _, _, n in pts)
    plot = Plot((0, len(rungs)), (0, top * 1.15), legend=[LegendItem(g, color[g], "bar") for g in surv])
    slot = (plot.x(1) - plot.x(0)) * 0.8 / len(surv)
    for gi, (group, pts) in enumerate(surv.items()):
        for r, n, total in pts:
            x = plot.x(rungs.index(r)) + (plot.x(1) - plot.x(0)) * 0.1 + gi * slot
            _survival_bar(plot, x, slot, n, color[group], f"{group}: {n}/{total} trials reached epoch {r}")
    plot.frame([i + 0.5 for i in range(len(rungs))], nice_ticks(0, top, min(top, 5)), "rung (epoch reached ≥)",
               "trials", lambda v: f"≥ {rungs[int(v)]}", _int_tick)
    return plot.svg(f"Early-stopping survival per rung on {task}")


def _survival_bar(plot: Plot, x: float, slot: float, n: int, color: str, tip: str) -> None:
    y0, y1 = plot.y(0), plot.y(n)
    plot.parts.append(f'<rect x="{x:.1f}" y="{y1:.1f}" width="{slot - 2:.1f}" height="{y0 - y1:.1f}" '
                      f'fill="{color}" fill-opacity="0.85"><title>{esc(tip)}</title></rect>')
    plot.parts.append(f'<text x="{x + slot / 2 - 1:.1f}" y="{y1 - 4:.1f}" text-anchor="middle" class="bar">{n}</text>')


# ---------------------------------------------------------------- all figures of a report


def _figure(svg: str | None, caption: str, note: str) -> str:
    if svg is None:
        return ""
    return f"<figure>{svg}<figcaption>{esc(caption)}</figcaption><div class='cap'>{esc(note)}</div></figure>"


def figures_html(data: ReportData, tasks: list[str], variants: list[str], colors: dict[str, str],
                 cells: dict[tuple[str, str], Cell]) -> str:
    """Each task's three figures with captions, as HTML; a note when there are no MLflow trials to draw."""
    groups = []
    for task in tasks:
        figs = [
            _figure(figure_lr(data, task, variants, colors, cells), f"{task}: accuracy vs learning rate", LR_CAPTION),
            _figure(figure_curves(data, task, variants, colors), f"{task}: learning curves of the selected trials",
                    CURVES_CAPTION),
            _figure(figure_survival(data, task, variants, colors), f"{task}: early-stopping survival per rung",
                    SURVIVAL_CAPTION),
        ]
        if any(figs):
            # One block per task so a task's three figures stay together.
            groups.append(f'<h3>{esc(task)}</h3><div class="figs">{"".join(figs)}</div>')
    return "".join(groups) or '<p class="note">No MLflow trial runs: no figures.</p>'
