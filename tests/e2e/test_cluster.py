"""sptune on a real Ray cluster: `ray start --head` (+ a second node with `ray start --address`
when memory allows) and a real `mlflow server`, all on this machine with token auth (see
docs/cluster.md). Studies submitted as Ray jobs are tests/test_jobs.py's (its own head).

Every sweep runs in a subprocess: this module never touches the in-process Ray session the
other tests share. To stay under ~3 minutes on 2 cores the three CLI runs start together (the
`runs` fixture) and each test waits for its own. Everything started here is stopped by PID,
never with `ray stop` (which would stop every Ray instance on the machine).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers_cluster import (
    MlflowServer,
    RayHead,
    available_memory_gib,
    cluster_env,
    free_port,
    start_worker,
    write_token,
)
from tests.helpers_tiny import PLAIN

SPEC = "search_spaces/digits_quick.yaml"
# The small digits study of tests/test_sweep.py: 2 pretrain + 3 scratch + 3 spt trials.
TINY = [
    "--set", "pretrain.epochs=3", "--set", "pretrain.num_samples=2",
    "--set", "finetune.epochs=4", "--set", "variants.scratch.num_samples=3", "--set", "variants.spt.num_samples=3",
    "--set", "scheduler.grace_period=1", "--set", "model.n_layers=1", "--set", "rerun_seeds=1", *PLAIN,
]
# Smaller still for the runs that must fail before training.
MICRO = [
    "--set", "pretrain.epochs=2", "--set", "pretrain.num_samples=1",
    "--set", "finetune.epochs=2", "--set", "variants.scratch.num_samples=2", "--set", "variants.spt.num_samples=2",
    "--set", "scheduler.grace_period=1", "--set", "model.n_layers=1", "--set", "rerun_seeds=1", *PLAIN,
]
STUDY_TIMEOUT_S = 240
FAIL_FAST_S = 60  # a refused run must end well within this (it loads torch and the data first)
WORKER_MIN_FREE_GIB = 6.0  # a second node (~0.5 GiB) plus the trial workers of two studies


@pytest.fixture(scope="module")
def cluster(repo_root):
    """Ray head (token auth, own temp dir and ports), MLflow server, and a second node if memory allows."""
    # Short root: Ray's unix sockets live under --temp-dir and are limited to ~107 characters.
    root = Path(tempfile.mkdtemp(prefix="rt_", dir="/tmp"))
    token_path = root / "token"
    token = write_token(token_path)
    env = cluster_env(token_path, repo_root)
    # Test-only: spread trials over the nodes instead of packing the head first, so that two
    # concurrent trials always put one on the second node.
    env["RAY_scheduler_spread_threshold"] = "0.0"
    mlflow = MlflowServer(root / "mlflow")
    head = RayHead(root, token, env)
    worker = None
    try:
        mlflow.launch()  # starts while the head starts
        head_s = head.start(num_cpus=2)
        print(f"\n[cluster] Ray head: `ray start --head` returned after {head.command_seconds:.1f}s, job API "
              f"answered after {head_s:.1f}s; GCS {head.address}, dashboard {head.dashboard}")
        free = available_memory_gib()
        if free >= WORKER_MIN_FREE_GIB:
            worker_s, _ = start_worker(head, num_cpus=1)
            node = next(n for n in head.nodes() if not n["is_head_node"])
            worker = SimpleNamespace(node_id=node["node_id"])
            print(f"[cluster] second node joined in {worker_s:.1f}s")
        else:
            print(f"[cluster] only {free:.1f} GiB free: no second node")
        mlflow.wait()
        yield SimpleNamespace(root=root, env=env, head=head, mlflow=mlflow, repo=repo_root, worker=worker)
    finally:
        left = head.stop() | mlflow.stop()
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"could not stop PIDs {sorted(left)}"


class Launched:
    """A CLI run in its own session, output to a file; a thread stops it at its deadline."""

    def __init__(self, name: str, cmd: list[str], cluster, timeout_s: float) -> None:
        self.name, self.log, self.timeout_s = name, cluster.root / f"{name}.log", timeout_s
        self.t0 = time.time()
        self.seconds: float | None = None
        self.timed_out = False
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, env=cluster.env, cwd=cluster.repo, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        try:
            self.proc.wait(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self.kill()
        self.seconds = time.time() - self.t0

    def wait(self) -> SimpleNamespace:
        self._watcher.join()
        print(f"\n[cluster] {self.name}: {'TIMED OUT, killed' if self.timed_out else 'exit'} "
              f"{self.proc.returncode} after {self.seconds:.0f}s")
        return SimpleNamespace(rc=self.proc.returncode, out=self.log.read_text(errors="replace"),
                               timed_out=self.timed_out)

    def kill(self) -> None:
        # SIGKILL to the whole group: ray.init ignores SIGTERM while it retries a GCS connection.
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


def _sweep(*args: str) -> list[str]:
    return [sys.executable, "-m", "sptune.sweep", SPEC, *args]


@pytest.fixture(scope="module")
def runs(cluster):
    """Start every CLI run of this module at once; each test waits for its own."""
    c, storage_args = cluster, []
    if cluster.worker is not None:
        # Same machine, so any local directory is storage "both nodes see".
        storage_args = ["--storage", str(c.root / "storage-a")]
    dead = f"127.0.0.1:{free_port()}"
    launched = {
        "a": Launched("study-against-head", _sweep(
            "--address", c.head.address, "--tracking-uri", c.mlflow.uri, "--output", str(c.root / "study-a"),
            *storage_args, "--set", "tracking.experiment=cluster-a", *TINY), c, STUDY_TIMEOUT_S),
        "c": Launched("dead-address", _sweep(
            "--address", dead, "--tracking-uri", c.mlflow.uri, "--output", str(c.root / "study-c"),
            "--set", "tracking.experiment=cluster-c", *MICRO), c, FAIL_FAST_S),
    }
    if cluster.worker is not None:
        launched["no-storage"] = Launched("two-nodes-no-storage", _sweep(
            "--address", c.head.address, "--tracking-uri", c.mlflow.uri, "--output", str(c.root / "study-ns"),
            "--set", "tracking.experiment=cluster-ns", *MICRO), c, FAIL_FAST_S)
    try:
        yield SimpleNamespace(launched=launched, dead=dead)
    finally:
        for run in launched.values():
            run.kill()


def _check_study(cluster, out: Path, n_children: int) -> dict:
    """results.json rows; parent + child runs on the server, test_acc on the selected runs only."""
    results = json.loads((out / "results.json").read_text())
    assert [r["variant"] for r in results["rows"]] == ["scratch", "spt"]
    for row in results["rows"]:
        assert 0.0 <= row["test_acc"] <= 1.0 and row["task"] == "digits" and row["mlflow_run_id"]
    assert results["mlflow"]["tracking_uri"] == cluster.mlflow.uri
    # Tracking lives on the server, not in the output directory.
    assert not (out / "mlflow.db").exists() and not (out / "mlartifacts").exists()

    client = MlflowClient(tracking_uri=cluster.mlflow.uri)
    parent = client.get_run(results["mlflow"]["parent_run_id"])
    assert parent.info.status == "FINISHED" and parent.data.tags.get("sptune.role") == "study"
    children = client.search_runs([results["mlflow"]["experiment_id"]],
                                  f"tags.mlflow.parentRunId = '{parent.info.run_id}'", max_results=1000)
    assert len(children) == n_children
    assert all(c.info.status == "FINISHED" for c in children)
    selected = {row["mlflow_run_id"] for row in results["rows"]}
    for child in children:
        assert ("test_acc" in child.data.metrics) == (child.info.run_id in selected), child.info.run_name
    for run_id in selected:
        # Artifacts are uploaded through the server (--serve-artifacts) into its --artifacts-destination.
        assert [a.path for a in client.list_artifacts(run_id, "selected_checkpoint")] == [
            "selected_checkpoint/state.pt"]
    return results


def _check_storage(cluster, out: Path, storage: Path) -> None:
    tuners = ["study"]  # one Tuner per study
    if cluster.worker is None:  # one node: Tune's default storage in the output directory
        assert sorted(p.name for p in (out / "ray_results").iterdir()) == tuners
    else:
        assert sorted(p.name for p in storage.iterdir()) == tuners
        assert not (out / "ray_results").exists()


def test_study_against_the_head(cluster, runs):
    """(a) `python -m sptune.sweep --address HEAD --tracking-uri http://SERVER` from outside the cluster."""
    res = runs.launched["a"].wait()
    assert not res.timed_out and res.rc == 0, res.out[-4000:]
    # The driver joined our head; it did not start a Ray instance of its own.
    assert "Connected to Ray cluster" in res.out and f":{cluster.head.gcs_port}" in res.out
    out = cluster.root / "study-a"
    _check_study(cluster, out, n_children=2 + 3 + 3)
    _check_storage(cluster, out, cluster.root / "storage-a")


def test_unreachable_address_is_a_clear_error(cluster, runs):
    """(c) --address where nothing listens: an error naming it, no traceback, nothing written."""
    res = runs.launched["c"].wait()
    assert not res.timed_out, (
        f"sptune still waited on a dead --address after {FAIL_FAST_S}s (ray.init retries a GCS connection for "
        "many minutes): sptune.preflight must check the address first\n" + res.out[-2000:])
    assert res.rc != 0
    assert "Traceback" not in res.out, res.out[-4000:]
    assert "sptune: error:" in res.out and "--address" in res.out and runs.dead in res.out, res.out[-2000:]
    assert not (cluster.root / "study-c").exists()
    assert MlflowClient(tracking_uri=cluster.mlflow.uri).get_experiment_by_name("cluster-c") is None


def test_two_nodes_without_storage_are_refused(cluster, runs):
    """On more than one node the default (local) Tune storage is refused, naming --storage."""
    if cluster.worker is None:
        pytest.skip("no second Ray node (not enough free memory)")
    res = runs.launched["no-storage"].wait()
    assert not res.timed_out and res.rc == 2, res.out[-4000:]
    assert "--storage" in res.out and "Traceback" not in res.out, res.out[-4000:]
    assert not (cluster.root / "study-ns" / "ray_results").exists()


def test_trials_ran_on_both_nodes(cluster, runs):
    """With a second node, trials of these studies ran on it too (the cluster is this module's own)."""
    if cluster.worker is None:
        pytest.skip("no second Ray node (not enough free memory)")
    runs.launched["a"].wait()
    # Actors Tune created but stopped before placement have no node.
    trials = [a for a in cluster.head.actors() if "Trainable" in a["class_name"] and a.get("node_id")]
    nodes = {a["node_id"] for a in trials}
    print(f"[cluster] {len(trials)} trial actors on {len(nodes)} node(s)")
    assert nodes == {n["node_id"] for n in cluster.head.nodes()}  # the head and the worker
