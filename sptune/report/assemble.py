"""``build_report``: gather a study, aggregate over seeds, raise the flags, draw the figures, render the page from
its template, write the tables, and log the figures and the page to the study's MLflow parent run (the report
reads the child runs and writes only these artifacts, from the driver: the one MLflow writer)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from mlflow.tracking import MlflowClient

from sptune.output_files import FIGURES, FLAGS_JSON, REPORT_HTML, REPORT_MD, RESULTS_CSV
from sptune.plan.phases import Phase
from sptune.report.cells import aggregate
from sptune.report.flags import all_flags
from sptune.report.gather import load_data
from sptune.report.records import ReportData
from sptune.report.tables import csv_rows, markdown, write_csv
from sptune.tracking.optuna_studies import variant_importances

# On the parent run: the figures under figures/, report.html, report.md and results.csv under report/. Logging to
# a FINISHED parent run is allowed and leaves its status as it was.
REPORT_ARTIFACTS = "report"
FIGURE_ARTIFACTS = "figures"


def _order(data: ReportData) -> tuple[list[str], list[str], dict[str, str]]:
    """Tasks and variants in first-seen order, the baseline variant first; variant -> kind."""
    kinds: dict[str, str] = {}
    for r in data.rows:
        kinds.setdefault(r["variant"], str(r["kind"]))
    for t in data.trials:
        if t.phase in (Phase.SEARCH, Phase.RERUN):
            kinds.setdefault(t.variant, t.variant_kind)
    variants = sorted(kinds, key=lambda v: v != data.baseline)  # stable: keeps first-seen order otherwise
    tasks = list(dict.fromkeys([r["task"] for r in data.rows] + [t.task for t in data.trials if t.task]))
    return tasks, variants, kinds


def build_report(run_dir: Path, tracking_uri: str | None = None, out: Path | None = None,
                 parent_run_id: str | None = None,
                 importances: dict[str, dict[str, float]] | None = None) -> Path:
    """Write report.html (default RUN_DIR/report.html), its figures (figures/ next to it, SVG, PDF and PNG) and
    report.md/results.csv/flags.json; log the figures and the page to the study's MLflow parent run if it has one.
    Return the page's path. ``importances`` (variant -> parameter -> importance) defaults to the study's Optuna storage.

    results.md is the study's own (``sptune.judging.results``, its only writer); the report never rewrites it."""
    # Jinja2 and matplotlib only when a report is built: a study's start imports this module.
    from sptune.report.figures import draw_figures
    from sptune.report.page import page_context, render, report_template_dir

    run_dir = Path(run_dir)
    report_template_dir()  # a missing template fails before any work, naming the path
    data = load_data(run_dir, tracking_uri, parent_run_id)
    tasks, variants, kinds = _order(data)
    cells = aggregate(data.rows, tasks, variants, kinds, data.baseline)
    flags = all_flags(data, cells, tasks, variants, kinds)
    out = Path(out) if out else run_dir / REPORT_HTML
    out.parent.mkdir(parents=True, exist_ok=True)
    importances = variant_importances(run_dir) if importances is None else importances
    figures, importance_figures = draw_figures(data, tasks, variants, cells, importances, out.parent)
    context = page_context(data, cells, flags, tasks, variants, kinds, figures, (importances, importance_figures))
    out.write_text(render(context), encoding="utf-8")
    (out.parent / REPORT_MD).write_text(markdown(data, cells, flags, tasks, variants), encoding="utf-8")
    (out.parent / FLAGS_JSON).write_text(json.dumps([asdict(f) for f in flags], indent=2), encoding="utf-8")
    write_csv(out.parent / RESULTS_CSV, csv_rows(cells, data.sequential))
    failed = log_report(data, out, [out.parent / REPORT_MD, out.parent / RESULTS_CSV], out.parent / FIGURES)
    if failed:
        print(f"sptune.report: warning: figures not logged to MLflow run {data.parent_run_id} ({failed}); "
              f"the report on disk is complete", file=sys.stderr)
    return out


def log_report(data: ReportData, report: Path, extra: list[Path], figures_dir: Path) -> str | None:
    """Log the figures and the report files to the parent run, so that the MLflow UI shows them beside the runs;
    returns why they were not logged, or None. A study without a readable MLflow parent run (results.json
    alone, a campaign) has nowhere to log: None."""
    if not (data.tracking_uri and data.parent_run_id):
        return None
    try:
        client = MlflowClient(tracking_uri=data.tracking_uri)
        if any(figures_dir.iterdir()):
            client.log_artifacts(data.parent_run_id, str(figures_dir), FIGURE_ARTIFACTS)
        for path in (report, *extra):
            client.log_artifact(data.parent_run_id, str(path), REPORT_ARTIFACTS)
    except Exception as err:  # noqa: BLE001 - the report on disk is complete; MLflow's copy is a convenience
        return f"{type(err).__name__}: {str(err)[:200]}"
    return None
