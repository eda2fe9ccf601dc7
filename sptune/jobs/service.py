"""Thin calls on Ray's job server (`ray.job_submission.JobSubmissionClient`): no scheduling here.

Ray runs each submitted study's driver on the head and its Tune trials on the cluster; each study
caps itself at its own `resources.max_concurrent`, so several share one cluster. Stopping a job
ends its driver, and Ray then removes the driver's actors: that study's trials, nobody else's.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from sptune.errors import SptuneError
from sptune.jobs.staging import META_EXPERIMENTS, META_STUDY, META_URI, StagedJob
from sptune.preflight.services import check_tracking_server

TERMINAL = ("STOPPED", "SUCCEEDED", "FAILED")
AUTH_FIX = ("a cluster started with token auth needs RAY_AUTH_MODE=token and its token (~/.ray/auth_token, "
            "RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN) in this environment")


class JobServiceError(SptuneError):
    """The job server cannot be reached, refused us, or does not know the job (exit 2)."""


@dataclass(frozen=True)
class JobRow:
    submission_id: str
    status: str
    study: str
    start_time: int | None  # ms since the epoch
    message: str


def connect(address: str) -> Any:
    """A client of the cluster's job server (the dashboard's address, http://HEAD:8265)."""
    # Ray here, not at the top: a spec refused while staging never waits for it.
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    try:
        client = JobSubmissionClient(address)
    except AuthenticationError as err:
        raise JobServiceError(f"--address {address}", f"the job server refused us ({_first_line(err)})",
                              AUTH_FIX) from None
    except (ConnectionError, ValueError, RuntimeError) as err:
        raise JobServiceError(
            f"--address {address}", f"no Ray job server answers there ({_first_line(err)})",
            "pass the head's dashboard address (http://HEAD:8265; over SSH, `ray dashboard sweeps/cluster.yaml` "
            "forwards it to http://127.0.0.1:8265), or set RAY_ADDRESS to it",
        ) from None
    return _Guarded(client, address)


class _Guarded:
    """The client, with every failure of a call turned into one paragraph."""

    def __init__(self, client: Any, address: str) -> None:
        self._client, self._address = client, address

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            from ray.exceptions import AuthenticationError  # imported already: `connect` made the client

            try:
                return method(*args, **kwargs)
            except AuthenticationError as err:
                raise JobServiceError(f"--address {self._address}", f"the job server refused us "
                                      f"({_first_line(err)})", AUTH_FIX) from None
            except RuntimeError as err:
                if "404" in str(err) or "does not exist" in str(err):
                    job = args[0] if args else "?"
                    raise JobServiceError(f"job {job}", "the cluster knows no such job",
                                          "see `python -m sptune.jobs list` for the jobs it has") from None
                raise JobServiceError(f"--address {self._address}", f"the job server failed "
                                      f"({_first_line(err)})", "check the head's dashboard log") from None

        return call


def submit(client: Any, job: StagedJob) -> str:
    return client.submit_job(
        entrypoint=job.entrypoint,
        submission_id=job.submission_id,
        runtime_env={"working_dir": str(job.working_dir)},
        metadata=job.metadata,
    )


def list_jobs(client: Any, every: bool = False) -> list[JobRow]:
    """sptune's jobs on the cluster (every job with ``every``), oldest first."""
    rows = []
    for info in client.list_jobs():
        meta = info.metadata or {}
        if not every and META_STUDY not in meta:
            continue
        rows.append(JobRow(info.submission_id or info.job_id or "?", str(info.status.value), meta.get(META_STUDY, "-"),
                           info.start_time, (info.message or "").splitlines()[0] if info.message else ""))
    return sorted(rows, key=lambda r: r.start_time or 0)


def job_info(client: Any, submission_id: str) -> Any:
    return client.get_job_info(submission_id)


def logs(client: Any, submission_id: str, follow: bool = False) -> None:
    if not follow:
        print(client.get_job_logs(submission_id), end="", flush=True)
        return

    async def tail() -> None:
        async for chunk in client.tail_job_logs(submission_id):
            print(chunk, end="", flush=True)

    asyncio.run(tail())


def stop(client: Any, submission_id: str, timeout_s: float = 60.0) -> str:
    """Ask Ray to stop the job; wait (up to ``timeout_s``) until it has ended; its final status."""
    client.stop_job(submission_id)
    deadline = time.time() + timeout_s
    status = str(client.get_job_status(submission_id).value)
    while status not in TERMINAL and time.time() < deadline:
        time.sleep(0.5)
        status = str(client.get_job_status(submission_id).value)
    return status


def mlflow_runs(info: Any, tracking_uri: str | None = None) -> tuple[str, list[dict[str, str]]]:
    """The tracking URI and the job's MLflow parent runs (found by their tag `sptune.ray_job_id`)."""
    from sptune.tracking.job_runs import job_runs  # here: MLflow only for the commands that read runs

    uri, experiments = _tracking(info, tracking_uri)
    check_tracking_server(uri)
    return uri, job_runs(uri, experiments, info.submission_id)


def end_runs(info: Any) -> int:
    """After `stop`: the job's MLflow runs left RUNNING are marked KILLED (the driver was killed)."""
    from sptune.tracking.job_runs import end_stopped_job_runs  # here: MLflow only for the commands that need it

    uri, experiments = _tracking(info)
    check_tracking_server(uri)  # a dead server fails in seconds, not after MLflow's retries
    return end_stopped_job_runs(uri, experiments, info.submission_id)


def _tracking(info: Any, tracking_uri: str | None = None) -> tuple[str, list[str]]:
    meta = info.metadata or {}
    return tracking_uri or meta.get(META_URI, ""), json.loads(meta.get(META_EXPERIMENTS, "[]"))


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return (text.splitlines()[0] if text else type(err).__name__)[:300]
