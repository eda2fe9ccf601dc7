"""The job service's MLflow queries on a real SQLite store: a job's parent runs are found by the tag the study
writes, and after a stop its runs left RUNNING (or FAILED by the stop) are marked KILLED, finished ones kept."""

from __future__ import annotations

import pytest

from sptune.errors import RuntimeFailure
from sptune.tracking.job_runs import JOB_TAG, end_stopped_job_runs, job_runs
from sptune.tracking.mlflow_tracker import Tracker


def _job_study(tmp_path, job: str, name: str) -> tuple[Tracker, str]:
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "jobs", tmp_path)
    parent = tracker.start_parent(name, {}, tags={JOB_TAG: job})
    child = tracker.client.create_run(tracker.experiment_id, tags={"mlflow.parentRunId": parent}).info.run_id
    return tracker, child


def test_a_stopped_jobs_runs_are_found_by_its_tag_and_ended(tmp_path):
    tracker, child = _job_study(tmp_path, "raysubmit_1", "stopped")
    other, other_child = _job_study(tmp_path, "raysubmit_2", "other")
    uri = tracker.uri
    found = job_runs(uri, ["jobs", "no-such-experiment"], "raysubmit_1")
    assert [(r["run_id"], r["name"], r["status"], r["url"]) for r in found] == [
        (tracker.parent_run_id, "stopped", "RUNNING", "")]
    assert job_runs(uri, ["no-such-experiment"], "raysubmit_1") == []

    assert end_stopped_job_runs(uri, ["jobs"], "raysubmit_1") == 2  # the parent and its running child
    status = {r: tracker.client.get_run(r).info.status for r in (tracker.parent_run_id, child, other_child)}
    assert status == {tracker.parent_run_id: "KILLED", child: "KILLED", other_child: "RUNNING"}
    assert end_stopped_job_runs(uri, ["jobs"], "raysubmit_1") == 0  # nothing left running


def test_a_sqlite_store_elsewhere_is_not_created(tmp_path):
    with pytest.raises(RuntimeFailure, match="not on this machine"):
        job_runs(f"sqlite:///{tmp_path / 'absent.db'}", ["jobs"], "raysubmit_1")
    assert not (tmp_path / "absent.db").exists()
