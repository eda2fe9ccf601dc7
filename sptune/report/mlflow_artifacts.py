"""The report's files on the study's MLflow parent run, so that the MLflow UI shows them beside the runs:
the figures under ``figures/``, report.html (and report.md, results.csv) under ``report/``.

The report reads the child runs and writes only these artifacts, from the driver (the one MLflow writer);
logging to a FINISHED parent run is allowed and leaves its status as it was."""

from __future__ import annotations

from pathlib import Path

from sptune.report.records import ReportData

REPORT_ARTIFACTS = "report"
FIGURE_ARTIFACTS = "figures"


def log_report(data: ReportData, report: Path, extra: list[Path], figures_dir: Path) -> str | None:
    """Log the figures and the report files to the parent run; returns why they were not logged, or None.

    A study without a readable MLflow parent run (results.json alone, a campaign) has nowhere to log: None."""
    if not (data.tracking_uri and data.parent_run_id):
        return None
    try:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=data.tracking_uri)
        if any(figures_dir.iterdir()):
            client.log_artifacts(data.parent_run_id, str(figures_dir), FIGURE_ARTIFACTS)
        for path in (report, *extra):
            client.log_artifact(data.parent_run_id, str(path), REPORT_ARTIFACTS)
    except Exception as err:  # noqa: BLE001 - the report on disk is complete; MLflow's copy is a convenience
        return f"{type(err).__name__}: {str(err)[:200]}"
    return None
