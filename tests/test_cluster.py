"""sptune on a real Ray cluster: `ray start --head`, a second node, `ray job submit`, and a
real `mlflow server`, all on 127.0.0.1 of this machine (see docs/cluster.md).

Every sweep runs in a subprocess: this module never touches the in-process Ray session
the other tests share. Everything started here is stopped by PID (never `ray stop`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from helpers_cluster import (
    MlflowServer,
    RayHead,
    available_memory_gib,
    cluster_env,
    free_port,
    start_worker,
    write_token,
)

SPEC = "search_spaces/digits_quick.yaml"
# The same small digits study as tests/test_sweep_e2e.py: 2 + 3 + 3 trials.
TINY = [
    "--set", "pretrain.epochs=3", "--set", "pretrain.num_samples=2",
    "--set", "finetune.epochs=4", "--set", "variants.scratch.num_samples=3", "--set", "variants.spt.num_samples=3",
    "--set", "scheduler.grace_period=1", "--set", "model.n_layers=1",
]
# Smaller still for the job and two-node runs (1 + 2 + 2 trials): the whole module stays < 3 minutes.
MICRO = [
    "--set", "pretrain.epochs=2", "--set", "pretrain.num_samples=1",
    "--set", "finetune.epochs=2", "--set", "variants.scratch.num_samples=2", "--set", "variants.spt.num_samples=2",
    "--set", "scheduler.grace_period=1", "--set", "model.n_layers=1",
]
STUDY_TIMEOUT_S = 240
WORKER_MIN_FREE_GIB = 4.0  # a second node costs ~0.5 GiB plus its trial workers


def _run(cmd: list[str], env: dict, cwd: str, timeout_s: float) -> SimpleNamespace:
    """Run a CLI in its own session; on timeout kill the whole group (ray.init ignores SIGTERM
    while it retries a GCS connection)."""
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        timed_out = True
    return SimpleNamespace(rc=proc.returncode, out=out, timed_out=timed_out, seconds=time.time() - t0)


def _sweep(*args: str) -> list[str]:
    return [sys.executable, "-m", "sptune.sweep", SPEC, *args]


@pytest.fixture(scope="module")
def cluster(repo_root):
    """A Ray head with token auth and an MLflow server, each on its own free ports."""
    # Short root: Ray's unix sockets live under --temp-dir and paths are limited to ~107 chars.
    root = Path(tempfile.mkdtemp(prefix="rt_", dir="/tmp"))
    token_path = root / "token"
    token = write_token(token_path)
    env = cluster_env(token_path, repo_root)
    mlflow = MlflowServer(root / "mlflow")
    head = RayHead(root, token, env)
    try:
        mlflow.launch()  # starts while the head starts
        seconds = head.start(num_cpus=2)
        mlflow.wait()
        print(f"\n[cluster] Ray head up in {seconds:.1f}s (ray start --head until the job API answers); "
              f"GCS {head.address}, dashboard {head.dashboard}, MLflow {mlflow.uri}")
        yield SimpleNamespace(root=root, env=env, head=head, mlflow=mlflow, repo=repo_root, workers=[])
    finally:
        left = head.stop() | mlflow.stop()
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"could not stop PIDs {sorted(left)}"


@pytest.fixture(scope="module")
def worker(cluster):
    """A second Ray node on this machine (`ray start --address`), when memory allows."""
    free = available_memory_gib()
    if free < WORKER_MIN_FREE_GIB:
        pytest.skip(f"only {free:.1f} GiB free: not starting a second Ray node")
    seconds, temp = start_worker(cluster.head, num_cpus=1)
    node = next(n for n in cluster.head.nodes() if not n["is_head_node"])
    print(f"\n[cluster] worker node joined in {seconds:.1f}s")
    return SimpleNamespace(node_id=node["node_id"], temp=temp)


def _mlflow_study(uri: str, results: dict) -> tuple[MlflowClient, object, list]:
    client = MlflowClient(tracking_uri=uri)
    parent = client.get_run(results["mlflow"]["parent_run_id"])
    children = client.search_runs([results["mlflow"]["experiment_id"]],
                                  f"tags.mlflow.parentRunId = '{parent.info.run_id}'", max_results=1000)
    return client, parent, children


def _check_study(cluster, out: Path, n_children: int) -> dict:
    """results.json rows, and parent + child runs with test_acc on the selected runs, on the server."""
    results = json.loads((out / "results.json").read_text())
    assert [r["variant"] for r in results["rows"]] == ["scratch", "spt"]
    for row in results["rows"]:
        assert 0.0 <= row["test_acc"] <= 1.0 and row["task"] == "digits" and row["mlflow_run_id"]
    assert results["mlflow"]["tracking_uri"] == cluster.mlflow.uri
    # MLflow lives on the server, not in the output directory.
    assert not (out / "mlflow.db").exists() and not (out / "mlartifacts").exists()

    client, parent, children = _mlflow_study(cluster.mlflow.uri, results)
    assert parent.info.status == "FINISHED" and parent.data.tags.get("sptune.role") == "study"
    assert len(children) == n_children
    assert all(c.info.status == "FINISHED" for c in children)
    selected = {row["mlflow_run_id"] for row in results["rows"]}
    for child in children:
        assert ("test_acc" in child.data.metrics) == (child.info.run_id in selected), child.info.run_name
        assert "val_acc" in child.data.metrics or child.data.tags["sptune.stage"] == "pretrain"
    for run_id in selected:
        # Artifacts went through the server's proxy into its --artifacts-destination.
        assert [a.path for a in client.list_artifacts(run_id, "selected_checkpoint")] == [
            "selected_checkpoint/state.pt"]
    assert any((cluster.mlflow.root / "artifacts").rglob("state.pt"))
    return results


def test_study_against_the_head(cluster):
    """(a) `python -m sptune.sweep --address HEAD --tracking-uri http://SERVER` from outside the cluster."""
    out = cluster.root / "study-a"
    res = _run(_sweep("--address", cluster.head.address, "--tracking-uri", cluster.mlflow.uri,
                      "--output", str(out), "--set", "tracking.experiment=cluster-a", *TINY),
               cluster.env, cluster.repo, STUDY_TIMEOUT_S)
    print(f"\n[cluster] study against the head: {res.seconds:.0f}s")
    assert not res.timed_out, res.out[-4000:]
    assert res.rc == 0, res.out[-4000:]
    # The driver joined our head; it did not start a Ray of its own.
    assert "Connected to Ray cluster" in res.out and f":{cluster.head.gcs_port}" in res.out
    _check_study(cluster, out, n_children=2 + 3 + 3)
    assert sorted(p.name for p in (out / "ray_results").iterdir()) == [
        "finetune-scratch", "finetune-spt", "pretrain"]


def test_unreachable_address_is_a_clear_error(cluster):
    """(c) --address where nothing listens: one error line, no traceback, nothing written."""
    out = cluster.root / "study-c"
    dead = f"127.0.0.1:{free_port()}"
    res = _run(_sweep("--address", dead, "--tracking-uri", cluster.mlflow.uri, "--output", str(out),
                      "--set", "tracking.experiment=cluster-c", *MICRO),
               cluster.env, cluster.repo, timeout_s=60)
    assert not res.timed_out, (
        "sptune still waits on a dead --address after 60 s (ray.init retries a GCS connection for many "
        "minutes): sptune.sweep._start_ray needs to check the address first\n" + res.out[-2000:])
    assert res.rc != 0
    assert "Traceback" not in res.out, res.out[-4000:]
    assert "sptune: error:" in res.out and "--address" in res.out and dead in res.out, res.out[-2000:]
    assert not out.exists()
    assert MlflowClient(tracking_uri=cluster.mlflow.uri).get_experiment_by_name("cluster-c") is None


def test_two_nodes_without_storage_are_refused(cluster, worker):
    """On more than one node the default (local) Tune storage is refused, naming --storage."""
    assert len(cluster.head.nodes()) == 2
    out = cluster.root / "study-nostorage"
    res = _run(_sweep("--address", cluster.head.address, "--tracking-uri", cluster.mlflow.uri,
                      "--output", str(out), "--set", "tracking.experiment=cluster-nostorage", *MICRO),
               cluster.env, cluster.repo, timeout_s=120)
    assert not res.timed_out and res.rc == 2, res.out[-4000:]
    assert "--storage" in res.out and "Traceback" not in res.out, res.out[-4000:]
    assert not (out / "ray_results").exists()


def test_job_submit(cluster, request):
    """(b) `ray job submit --working-dir REPO -- python -m sptune.sweep ...`: on two nodes with
    --storage when the worker node could be started, else on the head alone."""
    try:
        worker = request.getfixturevalue("worker")
    except pytest.skip.Exception:
        worker = None
    out = cluster.root / "study-b"
    storage = cluster.root / "shared-storage"  # both nodes are this machine: any local dir is "shared"
    submission_id = f"sptune-test-{uuid.uuid4().hex[:8]}"
    sweep_args = ["--tracking-uri", cluster.mlflow.uri, "--output", str(out),
                  "--set", "tracking.experiment=cluster-b", *MICRO]
    if worker is not None:
        sweep_args = ["--storage", str(storage), *sweep_args]
    cmd = ["ray", "job", "submit", "--address", cluster.head.dashboard, "--working-dir", cluster.repo,
           "--submission-id", submission_id, "--", "python", "-m", "sptune.sweep", SPEC, *sweep_args]
    res = _run(cmd, cluster.env, cluster.repo, STUDY_TIMEOUT_S)
    print(f"\n[cluster] ray job submit ({'2 nodes' if worker else 'head only'}): {res.seconds:.0f}s")
    assert not res.timed_out, res.out[-4000:]
    job = cluster.head.job(submission_id)
    assert job["status"] == "SUCCEEDED", f"{job.get('message')}\n{res.out[-4000:]}"
    assert res.rc == 0, res.out[-4000:]
    _check_study(cluster, out, n_children=1 + 2 + 2)
    if worker is not None:
        assert sorted(p.name for p in storage.iterdir()) == ["finetune-scratch", "finetune-spt", "pretrain"]
        assert not (out / "ray_results").exists()
        job_trials = [a for a in cluster.head.actors()
                      if a.get("job_id") == job["job_id"] and "Trainable" in a["class_name"]]
        nodes = {a["node_id"] for a in job_trials}
        print(f"[cluster] job trials ran on {len(nodes)} node(s); worker node used: {worker.node_id in nodes}")
        assert job_trials and worker.node_id in nodes
