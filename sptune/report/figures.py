"""The report's figures, per task: accuracy vs learning rate, learning curves of the reported runs, early-stopping
survival per rung, Δ vs the paired variant and expected best validation accuracy vs search budget; plus Optuna's
hyperparameter importances per variant.

Each figure is drawn with matplotlib (``sptune.report.plots``) and written to
``figures/<task>-<figure>.{svg,pdf,png}``; the page embeds the SVG inline."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from sptune.judging.expected_max import expected_max, order_flips
from sptune.output_files import FIGURES
from sptune.plan.phases import Phase
from sptune.report.cells import Cell
from sptune.report.plots.canvas import PALETTE, SavedFigure, save, slug, variant_colors
from sptune.report.plots.curves import figure_curves
from sptune.report.plots.delta import figure_delta
from sptune.report.plots.importances import figure_importances
from sptune.report.plots.lr import figure_lr
from sptune.report.plots.survival import figure_survival
from sptune.report.records import ReportData, as_float

LR_CAPTION = ("Circles: best validation accuracy of each trial at its LR (early-stopped trials at the epoch they "
              "reached). Line: best per LR, mean over the seeds that searched; band: min–max over those seeds. "
              "Filled dots: the selected config re-trained per seed. Diamonds: test accuracy of the reported "
              "checkpoints. Crosses on the axis: diverged or failed trials. Strip below: each variant's searched "
              "LR range (ticks: grid values).")
CURVES_CAPTION = ("Validation accuracy per epoch of the runs whose test accuracy is reported; dashed lines are "
                  "further seeds; dots mark the epoch chosen on validation.")
SURVIVAL_CAPTION = ("Trials that trained at least that many epochs; a rung a variant barely reaches means few of "
                    "its configurations were trained to the end.")
DELTA_CAPTION = ("Mean Δ test accuracy over seeds against the variant each is paired with (the baseline, or its "
                 "like-for-like kind), with its 95 % interval; an interval that crosses the zero line is no evidence "
                 "of a difference.")
BUDGET_CAPTION = ("Expected best validation accuracy of a search that had run only n of the variant's search "
                  "trials (Tang et al. 2020's unbiased estimator of Dodge et al. 2019's curve; trials stopped early "
                  "or diverged count with the best score they reached). Rings: where a variant's order vs its "
                  "paired variant flips; curves still rising at the right end say a bigger search could change "
                  "the answer.")
IMPORTANCES_CAPTION = ("Optuna's hyperparameter importances over the variant's search trials: the share of the "
                       "variation in the value its searcher was told each searched parameter explains (with early "
                       "stopping, the best validation accuracy up to the first rung, not at the selected epoch; "
                       "the Optuna study's objective name says which).")


@dataclass
class PageFigure:
    """One figure as the page shows it: a title, a caption, and the files it was written to."""

    title: str
    caption: str
    saved: SavedFigure
    details: list[str]  # the numbers behind the figure, as text (screen readers, searching the page)

    def link(self, fmt: str) -> str:
        """The figure file's path relative to report.html."""
        return f"{FIGURES}/{self.saved.paths[fmt].name}"


@dataclass
class TaskFigures:
    task: str
    figures: list[PageFigure]


def halving_rungs(spec: dict[str, Any], max_epochs: int, reached: list[int]) -> list[int]:
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
    groups = {v: data.phase_trials((Phase.SEARCH,), task, v) for v in variants}
    groups.update({f"SPT pretraining ({obj})": ts for obj, ts in data.pretraining(task).items()})
    out = {}
    for name, trials in groups.items():
        if not trials:
            continue
        max_ep = max([t.max_epochs or 0 for t in trials]) or max(t.epochs for t in trials)
        rungs = halving_rungs(data.spec, max_ep, [t.epochs for t in trials])
        out[name] = [(r, sum(t.epochs >= r for t in trials), len(trials)) for r in rungs]
    return out


def budget_curves(data: ReportData, task: str, variants: list[str],
                  cells: dict[tuple[str, str], Cell]) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """Per variant its expected-max curve over its search trials with a validation score, and the budgets at
    which its order vs the variant its Δ is against flips (`sptune.judging.expected_max`)."""
    curves = {}
    for v in variants:
        scores = [t.best_val_acc for t in data.phase_trials((Phase.SEARCH,), task, v) if t.best_val_acc is not None]
        if scores:
            curves[v] = expected_max(scores)
    flips = {}
    for v in curves:
        cell = cells.get((task, v))
        if cell is not None and cell.baseline in curves:
            flips[v] = order_flips(curves[v], curves[cell.baseline])
    return curves, flips


def _budget_figure(data: ReportData, task: str, variants: list[str], colors: dict[str, str],
                   cells: dict[tuple[str, str], Cell], fig_dir: Path, stem: str) -> PageFigure | None:
    from sptune.report.plots.expected_max_curve import figure_budget

    curves, flips = budget_curves(data, task, variants, cells)
    details = [f"{v}: {c[0]:.4f} with 1 trial, {c[-1]:.4f} with {len(c)}" for v, c in curves.items()]
    details += [f"{v} vs {cells[(task, v)].baseline}: order flips at n = {', '.join(map(str, at))}"
                for v, at in flips.items() if at]
    return _keep(figure_budget(curves, flips, colors), fig_dir, f"{stem}-budget",
                 f"{task}: expected best validation accuracy vs search budget", BUDGET_CAPTION, details)


def clear_figures(out_dir: Path) -> Path:
    """A fresh figures directory next to report.html: files of an earlier build must not be logged as this one's."""
    fig_dir = out_dir / FIGURES
    shutil.rmtree(fig_dir, ignore_errors=True)
    fig_dir.mkdir(parents=True)
    return fig_dir


def _keep(fig: Figure | None, fig_dir: Path, stem: str, title: str, caption: str,
          details: list[str] | None = None) -> PageFigure | None:
    return None if fig is None else PageFigure(title, caption, save(fig, fig_dir, stem), details or [])


def _survival_figure(data: ReportData, task: str, variants: list[str], colors: dict[str, str], fig_dir: Path,
                     stem: str) -> PageFigure | None:
    surv = survival(data, task, variants)
    if not surv:
        return None
    details = [f"{group}: {n}/{total} trials reached epoch {r}" for group, pts in surv.items() for r, n, total in pts]
    return _keep(figure_survival(surv, colors), fig_dir, f"{stem}-survival",
                 f"{task}: early-stopping survival per rung", SURVIVAL_CAPTION, details)


def task_figures(data: ReportData, task: str, variants: list[str], colors: dict[str, str],
                 cells: dict[tuple[str, str], Cell], fig_dir: Path) -> TaskFigures:
    """One task's figures, written to fig_dir; a figure without data to draw is left out."""
    stem = slug(task)
    figs = [
        _keep(figure_lr(data, task, variants, colors, cells), fig_dir, f"{stem}-lr",
              f"{task}: accuracy vs learning rate", LR_CAPTION),
        _keep(figure_curves(data, task, variants, colors), fig_dir, f"{stem}-curves",
              f"{task}: learning curves of the selected trials", CURVES_CAPTION),
        _survival_figure(data, task, variants, colors, fig_dir, stem),
        _keep(figure_delta([c for v in variants if (c := cells.get((task, v)))], colors), fig_dir,
              f"{stem}-delta", f"{task}: Δ test accuracy vs the paired variant", DELTA_CAPTION),
        _budget_figure(data, task, variants, colors, cells, fig_dir, stem),
    ]
    return TaskFigures(task, [f for f in figs if f is not None])


def importance_figures(importances: dict[str, dict[str, float]], colors: dict[str, str],
                       fig_dir: Path) -> dict[str, PageFigure]:
    """variant -> its importances as a bar figure (variants without any are left out)."""
    out = {}
    for i, (variant, params) in enumerate(importances.items()):
        if params:
            color = colors.get(variant, PALETTE[i % len(PALETTE)])
            out[variant] = _keep(figure_importances(variant, params, color), fig_dir,
                                 f"importances-{slug(variant)}", f"{variant}: hyperparameter importances",
                                 IMPORTANCES_CAPTION)
    return out


def draw_figures(data: ReportData, tasks: list[str], variants: list[str], cells: dict[tuple[str, str], Cell],
                 importances: dict[str, dict[str, float]],
                 out_dir: Path) -> tuple[list[TaskFigures], dict[str, PageFigure]]:
    """Every figure of a report, written to out_dir/figures: per task (tasks without any figure left out), and the
    importances per variant. One colour per variant across all of them."""
    fig_dir = clear_figures(out_dir)
    colors = variant_colors(variants)
    per_task = [task_figures(data, task, variants, colors, cells, fig_dir) for task in tasks]
    return [t for t in per_task if t.figures], importance_figures(importances, colors, fig_dir)
