"""``build_report``: gather a study, aggregate over seeds, raise the flags, write the page and the tables."""

from __future__ import annotations

from pathlib import Path

from sptune.report.cells import aggregate
from sptune.report.flags import all_flags
from sptune.report.gather import load_data
from sptune.report.page import render_html
from sptune.report.records import RERUN, SEARCH, ReportData
from sptune.report.tables import REPORT_MD, csv_rows, markdown, write_csv


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


def build_report(run_dir: Path, tracking_uri: str | None = None, out: Path | None = None,
                 parent_run_id: str | None = None) -> Path:
    """Write report.html (default RUN_DIR/report.html) and report.md/results.csv next to it; return its path.

    results.md is the study's own (``sptune.results``, its only writer); the report never rewrites it."""
    run_dir = Path(run_dir)
    data = load_data(run_dir, tracking_uri, parent_run_id)
    tasks, variants, kinds = _order(data)
    cells = aggregate(data.rows, tasks, variants, kinds, data.baseline)
    flags = all_flags(data, cells, tasks, variants, kinds)
    out = Path(out) if out else run_dir / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(data, cells, flags, tasks, variants, kinds), encoding="utf-8")
    (out.parent / REPORT_MD).write_text(markdown(data, cells, flags, tasks, variants), encoding="utf-8")
    write_csv(out.parent / "results.csv", csv_rows(cells))
    return out
