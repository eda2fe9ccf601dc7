"""Fairness report for a finished study: ``python -m sptune.report RUN_DIR_OR_MLFLOW_RUN``.

The target is a study output directory (or its results.json), or an MLflow run id read through a tracking URI.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

from sptune.errors import SptuneError
from sptune.output_files import FIGURES, REPORT_MD, RESULTS_CSV, RESULTS_JSON
from sptune.report.assemble import build_report
from sptune.report.gather import sqlite_path, unreachable
from sptune.report.records import ReportError

RUN_ID = re.compile(r"^[0-9a-f]{32}$")


def _dir_for_run(uri: str, run_id: str, out: Path | None) -> tuple[Path, str]:
    """The study directory recorded on the parent run (a child run id is mapped to its parent)."""
    client = MlflowClient(tracking_uri=uri)
    try:
        run = client.get_run(run_id)
    except Exception as err:
        raise ReportError(f"run {run_id}", f"not found in {uri} ({type(err).__name__})",
                          "check the run id and --tracking-uri") from err
    parent_id = run.data.tags.get("mlflow.parentRunId")
    if parent_id and run.data.tags.get("sptune.phase"):
        run, run_id = client.get_run(parent_id), parent_id
    recorded = Path(run.data.params.get("output_dir", ""))
    if run.data.params.get("output_dir") and recorded.is_dir():
        return recorded, run_id
    return (out.parent if out else Path.cwd() / f"sptune-report-{run_id[:8]}"), run_id


def _build_from_run_id(run_id: str, tracking_uri: str | None, out: Path | None) -> Path:
    # Check the store before MLflow touches it: a missing SQLite file would be created empty, and an HTTP
    # server that is down costs minutes of MLflow's retries.
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        raise ReportError(run_id, "an MLflow run id needs a tracking store",
                          "add --tracking-uri (e.g. http://127.0.0.1:5000 or sqlite:///DIR/mlflow.db)")
    if sqlite_path(uri) and not sqlite_path(uri).is_file():
        raise ReportError(f"--tracking-uri {uri}", "SQLite file does not exist", "check the path")
    if unreachable(uri):
        raise ReportError(f"--tracking-uri {uri}", unreachable(uri), "start the server or fix the URI")
    run_dir, parent_id = _dir_for_run(uri, run_id, out)
    return build_report(run_dir, uri, out, parent_id)


def build_from_target(target: str, tracking_uri: str | None = None, out: Path | None = None) -> Path:
    """A run directory (or its results.json), or an MLflow run id with a tracking URI."""
    path = Path(target)
    if path.is_file() and path.name == RESULTS_JSON:
        path = path.parent
    if path.is_dir():
        return build_report(path, tracking_uri, out)
    if RUN_ID.match(target):
        return _build_from_run_id(target, tracking_uri, out)
    raise ReportError(target, "neither a study output directory nor an MLflow run id (32 hex characters)",
                      "pass e.g. runs/digits_quick-20250101-120000 or a parent run id with --tracking-uri")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sptune.report", description=__doc__.splitlines()[0])
    p.add_argument("target", help="study output directory (with results.json), or an MLflow parent run id")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: the one recorded in results.json)")
    p.add_argument("--out", type=Path, help="report path (default RUN_DIR/report.html)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (user errors print one line, no traceback)."""
    args = parse_args(argv)
    try:
        path = build_from_target(args.target, args.tracking_uri, args.out)
    except SptuneError as err:
        print(f"sptune.report: error: {err}", file=sys.stderr)
        return err.exit_code
    print(f"Report: {path}\nTables: {path.parent / REPORT_MD} and {path.parent / RESULTS_CSV}\n"
          f"Figures (SVG, PDF, PNG): {path.parent / FIGURES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
