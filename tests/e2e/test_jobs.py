"""`python -m sptune.jobs` on a real `ray start --head` (token auth, own temp dir and ports, 3 CPUs)
with a real `mlflow server`: three studies submitted at once share the cluster, each capped at
`resources.max_concurrent=1`; one is stopped, the other two finish (see docs/cluster.md).

Everything started here is stopped by PID, never with `ray stop`.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers_cluster import MlflowServer, RayHead, cluster_env, wait_for, write_token
from tests.helpers_tiny import PLAIN

SPEC = "search_spaces/digits_quick.yaml"
# The smallest digits study: 1 pretraining + 1 scratch + 1 spt trial, one at a time.
SMALL = [
    "--set", "pretrain.epochs=2", "--set", "pretrain.num_samples=1", "--set", "finetune.epochs=2",
    "--set", "variants.scratch.num_samples=1", "--set", "variants.spt.num_samples=1",
    "--set", "scheduler.grace_period=1", "--set", "model.n_layers=1", "--set", "rerun_seeds=1",
    "--set", "resources.max_concurrent=1", *PLAIN,
]
# The study that is stopped: its pretraining outlasts the others' whole studies.
LONG = [*SMALL, "--set", "pretrain.epochs=400"]
FINISH_TIMEOUT_S = 240


def _cli(cluster, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sptune.jobs", *args, "--address", cluster.head.dashboard],
                          env=cluster.env, cwd=cluster.repo, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cluster(repo_root):
    # Short root: Ray's unix sockets live under --temp-dir and are limited to ~107 characters.
    root = Path(tempfile.mkdtemp(prefix="rj_", dir="/tmp"))
    token = write_token(root / "token")
    env = cluster_env(root / "token", repo_root)
    mlflow = MlflowServer(root / "mlflow")
    head = RayHead(root, token, env)
    try:
        mlflow.launch()  # starts while the head starts
        head_s = head.start(num_cpus=3)
        print(f"\n[jobs] Ray head up in {head_s:.1f}s, dashboard {head.dashboard}")
        mlflow.wait()
        yield SimpleNamespace(root=root, env=env, head=head, mlflow=mlflow, repo=repo_root)
    finally:
        left = head.stop() | mlflow.stop()
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"could not stop PIDs {sorted(left)}"


@pytest.fixture(scope="module")
def jobs(cluster):
    """Three studies submitted at once (plus a bad spec); name -> submission id."""
    t0 = time.time()
    procs = {}
    for name, extra in (("a", SMALL), ("b", SMALL), ("long", LONG)):
        cmd = [sys.executable, "-m", "sptune.jobs", "submit", SPEC, "--address", cluster.head.dashboard,
               "--output", str(cluster.root / f"study-{name}"), "--tracking-uri", cluster.mlflow.uri,
               "--set", f"name=jobs_{name}", "--set", f"tracking.experiment=jobs-{name}", *extra]
        procs[name] = subprocess.Popen(cmd, env=cluster.env, cwd=cluster.repo, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
    ids = {}
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
        ids[name] = re.search(r"Submitted (sptune-jobs_\w+-[0-9a-f]{8})", out).group(1)
    print(f"[jobs] three studies submitted in {time.time() - t0:.1f}s")
    return SimpleNamespace(ids=ids, t0=t0)


def _trainables(cluster) -> list[dict]:
    return [a for a in cluster.head.actors() if "Trainable" in a["class_name"]]


def _diagnosis(cluster, ids: dict[str, str], internal: dict[str, str]) -> str:
    lines = [f"trainables: {[(a['job_id'], a['state'], a['class_name']) for a in _trainables(cluster)]}"]
    for name, sid in ids.items():
        job = cluster.head.job(sid)
        log = _cli(cluster, "logs", sid).stdout
        lines.append(f"--- {name} {sid} ({internal.get(sid)}) {job['status']}: {job.get('message')}\n{log[-2500:]}")
    return "\n".join(lines)


def _job_status(cluster, submission_id: str) -> str:
    return cluster.head.job(submission_id)["status"]


def test_bad_spec_is_refused_before_anything_is_submitted(cluster, jobs):
    res = _cli(cluster, "submit", SPEC, "--output", str(cluster.root / "bad"), "--set", "finetune.epochs=0")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "sptune: error: finetune.epochs" in res.stderr and "Traceback" not in res.stderr, res.stderr
    relative = _cli(cluster, "submit", SPEC, "--output", "runs/relative", *SMALL)
    assert relative.returncode == 2 and "--output runs/relative" in relative.stderr, relative.stderr
    listed = _cli(cluster, "list", "--all")
    assert listed.returncode == 0 and len(listed.stdout.strip().splitlines()) == 1 + 3, listed.stdout


def test_wrong_token_is_one_paragraph(cluster, jobs):
    env = {**cluster.env, "RAY_AUTH_TOKEN_PATH": str(cluster.root / "no-such-token")}
    res = subprocess.run([sys.executable, "-m", "sptune.jobs", "list", "--address", cluster.head.dashboard],
                         env=env, cwd=cluster.repo, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "sptune: error: --address" in res.stderr and "RAY_AUTH_MODE=token" in res.stderr, res.stderr


def test_three_studies_share_the_cluster_and_stop_ends_one(cluster, jobs):
    ids = jobs.ids
    internal = {}  # submission id -> Ray's job id (the actors' job_id)

    def all_three_training() -> bool:
        for sid in ids.values():
            if internal.get(sid) is None:  # known once the job's driver has joined the cluster
                internal[sid] = cluster.head.job(sid).get("job_id")
        alive = {a["job_id"] for a in _trainables(cluster) if a["state"] == "ALIVE"}
        return all(internal[sid] in alive for sid in ids.values())

    try:
        wait_for(all_three_training, 180, "a trial of each of the three studies running at once", interval=1.0)
    except TimeoutError as err:
        raise AssertionError(f"{err}\n{_diagnosis(cluster, ids, internal)}") from None
    print(f"[jobs] three trials at once after {time.time() - jobs.t0:.0f}s")
    assert {_job_status(cluster, sid) for sid in ids.values()} == {"RUNNING"}

    listed = _cli(cluster, "list")
    assert listed.returncode == 0, listed.stderr
    assert all(f"{sid}" in listed.stdout for sid in ids.values()) and listed.stdout.count("RUNNING") == 3

    stopped = _cli(cluster, "stop", ids["long"])
    assert stopped.returncode == 0 and f"Job {ids['long']}: STOPPED" in stopped.stdout, stopped.stdout + stopped.stderr
    assert "run(s) marked KILLED" in stopped.stdout, stopped.stdout
    # Ray removes the stopped driver's actors; the other studies keep theirs.
    long_job = internal[ids["long"]]
    wait_for(lambda: not any(a["job_id"] == long_job and a["state"] == "ALIVE" for a in _trainables(cluster)),
             30, "the stopped study's trial actors gone")
    assert _job_status(cluster, ids["a"]) in ("RUNNING", "SUCCEEDED")
    assert _job_status(cluster, ids["b"]) in ("RUNNING", "SUCCEEDED")

    for name in ("a", "b"):
        wait_for(lambda n=name: _job_status(cluster, ids[n]) in ("SUCCEEDED", "FAILED", "STOPPED"),
                 FINISH_TIMEOUT_S, f"study {name}", interval=1.0)
        job = cluster.head.job(ids[name])
        assert job["status"] == "SUCCEEDED", job.get("message")
        results = json.loads((cluster.root / f"study-{name}" / "results.json").read_text())
        assert [r["variant"] for r in results["rows"]] == ["scratch", "spt"]
        assert all(0.0 <= r["test_acc"] <= 1.0 for r in results["rows"])
    print(f"[jobs] two studies finished after {time.time() - jobs.t0:.0f}s")
    assert _job_status(cluster, ids["long"]) == "STOPPED"
    assert not (cluster.root / "study-long" / "results.json").exists()


def test_parent_runs_name_their_jobs_and_status_finds_them(cluster, jobs):
    client = MlflowClient(tracking_uri=cluster.mlflow.uri)
    for name, sid in jobs.ids.items():
        experiment = client.get_experiment_by_name(f"jobs-{name}")
        parents = client.search_runs([experiment.experiment_id], "tags.`sptune.role` = 'study'")
        assert [r.data.tags.get("sptune.ray_job_id") for r in parents] == [sid]
        expected = "KILLED" if name == "long" else "FINISHED"
        assert parents[0].info.status == expected
        children = client.search_runs([experiment.experiment_id],
                                      f"tags.mlflow.parentRunId = '{parents[0].info.run_id}'")
        assert children and not [c.info.run_name for c in children if c.info.status == "RUNNING"]
        status = _cli(cluster, "status", sid)
        assert status.returncode == 0, status.stderr
        assert f"MLflow run {parents[0].info.run_id}" in status.stdout and expected in status.stdout, status.stdout
        assert f"#/experiments/{experiment.experiment_id}/runs/{parents[0].info.run_id}" in status.stdout
    assert "SUCCEEDED" in _cli(cluster, "status", jobs.ids["a"]).stdout


def test_logs_show_the_driver_output(cluster, jobs):
    res = _cli(cluster, "logs", jobs.ids["a"])
    assert res.returncode == 0, res.stderr
    assert "Results:" in res.stdout and "up to 1 concurrent trials" in res.stdout, res.stdout[-3000:]
    unknown = _cli(cluster, "status", "sptune-nope-00000000")
    assert unknown.returncode == 2 and "no such job" in unknown.stderr, unknown.stderr
