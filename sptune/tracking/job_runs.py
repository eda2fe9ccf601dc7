"""The job service's queries of MLflow: which parent runs a Ray job made, and ending those a stopped job left
running. Read by `python -m sptune.jobs` (status, stop), apart from the driver's writer (`mlflow_tracker`), so
the job commands need neither Ray Tune nor the writer."""

from __future__ import annotations

from pathlib import Path

from mlflow.tracking import MlflowClient

from sptune.errors import RuntimeFailure

JOB_TAG = "sptune.ray_job_id"  # on a study's parent run: the Ray job (submission id) that runs it


def job_runs(uri: str, experiments: list[str], job_id: str) -> list[dict[str, str]]:
    """The parent runs a Ray job made (tag JOB_TAG), newest first; [] when none (yet). A SQLite
    store that is not on this machine is not created here: it is reported as not found."""
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        raise RuntimeFailure(f"tracking URI {uri}", "this SQLite store is not on this machine (it is the head's)",
                             "run `status` on the head, or give the study an MLflow server (--tracking-uri)")
    runs = _job_parent_runs(MlflowClient(tracking_uri=uri), experiments, job_id)
    base = uri.rstrip("/") if uri.startswith("http") else None
    return [{"run_id": r.info.run_id, "name": r.info.run_name or "", "status": r.info.status,
             "url": f"{base}/#/experiments/{r.info.experiment_id}/runs/{r.info.run_id}" if base else ""}
            for r in runs]


def _job_parent_runs(client: MlflowClient, experiments: list[str], job_id: str) -> list:
    ids = [e.experiment_id for name in experiments if (e := client.get_experiment_by_name(name)) is not None]
    if not ids:
        return []
    return client.search_runs(ids, f"tags.`{JOB_TAG}` = '{job_id}'", order_by=["attributes.start_time DESC"])


def end_stopped_job_runs(uri: str, experiments: list[str], job_id: str) -> int:
    """After a Ray job was stopped: its parent runs are marked KILLED (left RUNNING when the driver
    was killed outright, or FAILED when the stop interrupted it: either way the user stopped it), and
    so are the child runs its trials left RUNNING. Returns how many runs were marked."""
    client = MlflowClient(tracking_uri=uri)
    marked = 0
    for parent in _job_parent_runs(client, experiments, job_id):
        children = client.search_runs([parent.info.experiment_id],
                                      f"tags.mlflow.parentRunId = '{parent.info.run_id}'", max_results=5000)
        ended = [c for c in children if c.info.status == "RUNNING"]
        if parent.info.status in ("RUNNING", "FAILED"):
            ended.append(parent)
        for run in ended:
            client.set_terminated(run.info.run_id, status="KILLED")
        marked += len(ended)
    return marked
