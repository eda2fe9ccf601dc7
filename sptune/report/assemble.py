"""``build_report``: gather a study, aggregate over seeds, raise the flags, draw the figures, render the page from
its template, write the tables, and log the figures and the page to the study's MLflow parent run."""

from __future__ import annotations

import sys
from pathlib import Path

from sptune.report.cells import aggregate
from sptune.report.figures import FIGURES_DIR, draw_figures
from sptune.report.flags import all_flags
from sptune.report.gather import load_data
from sptune.report.mlflow_artifacts import log_report
from sptune.report.page import page_context
from sptune.report.records import RERUN, SEARCH, ReportData
from sptune.report.tables import REPORT_MD, csv_rows, markdown, write_csv
from sptune.report.template import render, report_template_dir


def _order(data: ReportData) -> tuple[list[str], list[str], dict[str, str]]:
    """Tasks and variants in first-seen order, the baseline variant first; variant -> kind."""
    kinds: dict[str, str] = {}
    for r in data.rows:
        kinds.setdefault(r["variant"], str(r["kind"]))
    for t in data.trials:
        if t.phase in (SEARCH, RERUN):
            kinds.setdefault(t.variant, t.kind)
    variants = sorted(kinds, key=lambda v: v != data.baseline)  # stable: keeps first-seen order otherwise
    tasks = list(dict.fromkeys([r["task"] for r in data.rows] + [t.task for t in data.trials if t.task]))
    return tasks, variants, kinds


def study_importances(run_dir: Path) -> dict[str, dict[str, float]]:
    """variant -> hyperparameter -> Optuna importance; empty without an Optuna storage (or too few trials)."""
    from sptune.tracking.optuna_studies import variant_importances  # imports optuna: only when a report is built

    return variant_importances(run_dir)


def build_report(run_dir: Path, tracking_uri: str | None = None, out: Path | None = None,
                 parent_run_id: str | None = None,
                 importances: dict[str, dict[str, float]] | None = None) -> Path:
    """Write report.html (default RUN_DIR/report.html), its figures (figures/ next to it, SVG, PDF and PNG) and
    report.md/results.csv; log the figures and the page to the study's MLflow parent run if it has one. Return
    the page's path. ``importances`` (variant -> parameter -> importance) defaults to the study's Optuna storage.

    results.md is the study's own (``sptune.judging.results``, its only writer); the report never rewrites it."""
    run_dir = Path(run_dir)
    report_template_dir()  # a missing template fails before any work, naming the path
    data = load_data(run_dir, tracking_uri, parent_run_id)
    tasks, variants, kinds = _order(data)
    cells = aggregate(data.rows, tasks, variants, kinds, data.baseline)
    flags = all_flags(data, cells, tasks, variants, kinds)
    out = Path(out) if out else run_dir / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    importances = study_importances(run_dir) if importances is None else importances
    figures, importance_figures = draw_figures(data, tasks, variants, cells, importances, out.parent)
    context = page_context(data, cells, flags, tasks, variants, kinds, figures, (importances, importance_figures))
    out.write_text(render(context), encoding="utf-8")
    (out.parent / REPORT_MD).write_text(markdown(data, cells, flags, tasks, variants), encoding="utf-8")
    write_csv(out.parent / "results.csv", csv_rows(cells))
    failed = log_report(data, out, [out.parent / REPORT_MD, out.parent / "results.csv"], out.parent / FIGURES_DIR)
    if failed:
        print(f"sptune.report: warning: figures not logged to MLflow run {data.parent_run_id} ({failed}); "
              f"the report on disk is complete", file=sys.stderr)
    return out
