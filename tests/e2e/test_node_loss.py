"""A study survives losing a Ray node mid-study.

What it kills: a real two-node cluster on this machine (`ray start --head` with 1 CPU, a worker node
`ray start --address` with 1 CPU, token auth, own temp dirs, shared `--storage` directory) runs a small
digits study (pretraining, scratch and spt searches, synchronous halving, `max_failures: 2`). As soon as a
finetuning trial *placed on the worker node* has reported epoch 2 or 3 (so its epoch-1 checkpoint is
registered with Tune; halving's rung is at epoch 4, so it is still training, not paused), the test
SIGKILLs every process of the worker node at once: its raylet, its agents and its worker processes (the
trial's actor among them), found by the worker's own --temp-dir. The driver and the head are untouched.

What it checks afterwards:
  * the study exits 0 with results, and Ray saw the worker node die (only the head is alive);
  * the killed trial is counted in Tune's own records (`num_failures` >= 1, an error.txt in its
    directory), was retried on the head (its later result rows come from an actor on the head node, by
    the Ray state API), and continued from its checkpoint: the first retried epoch is > 1 and follows
    the epoch checkpointed before the kill, its epochs then run on to the end (or to halving's rung, if it
    lost there), and the loop's own epoch count equals Tune's training_iteration in every row;
  * every selected checkpoint belongs to a trial Tune finished (TERMINATED, never ERROR), lies in that
    trial's own directory, holds the selected epoch, and its score is the one the surviving attempt
    reported for that epoch (never a number only the lost attempt reported);
  * results.json, report.md and report.html count the failures: the variant's `failures` equals the sum
    of Tune's `num_failures` over its search's trials, and the MLflow run of the killed trial is tagged.

Everything is stopped by PID, never `ray stop`.
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
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from mlflow.tracking import MlflowClient

from tests.helpers_cluster import (
    RayHead,
    available_memory_gib,
    cluster_env,
    matching_pids,
    start_worker,
    write_token,
)
from tests.helpers_tiny import PLAIN

SPEC = "search_spaces/digits_quick.yaml"
FINETUNE_EPOCHS = 6
FIRST_RUNG = 4  # synchronous halving's only rung (factor 2): every finetuning trial trains epochs 1-4 unpaused
# 2 pretraining trials (4 epochs) + 2 scratch + 2 spt trials (6 epochs each): long enough that the worker
# has a finetuning trial mid-flight, short enough to finish in about a minute on one remaining CPU.
STUDY = [
    "--set", f"pretrain.epochs={FIRST_RUNG}", "--set", "pretrain.num_samples=2",
    "--set", f"finetune.epochs={FINETUNE_EPOCHS}",
    "--set", "variants.scratch.num_samples=2", "--set", "variants.spt.num_samples=2",
    "--set", f"scheduler.grace_period={FIRST_RUNG}", "--set", "model.n_layers=1", "--set", "rerun_seeds=1",
    "--set", "max_failures=2", *PLAIN,
]
STUDY_TIMEOUT_S = 240
KILL_WITHIN_S = 150  # the worker must get a finetuning trial past epoch 2 well before the study ends
MIN_FREE_GIB = 4.0  # two nodes (~1 GiB), two trial actors and the driver (~0.7 GiB each)
# Ray's GCS declares a node dead after `health_check_failure_threshold` missed checks, one every
# `health_check_period_ms`: 5 x 3 s by default, i.e. >= 15 s of a study waiting on a dead node's trial.
# Checked every 0.5 s, 3 misses: ~2 s. The timeout stays generous so a loaded (shared, 2-core) machine
# does not get the live head's raylet declared dead.
FAST_NODE_DEATH = {
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_timeout_ms": "3000",
    "RAY_health_check_initial_delay_ms": "1000",
}

# The test picks its victim from the trials' result.json under the storage, which Tune's driver copies
# there with each experiment snapshot: by default at most every 10 s (sptune forces none per checkpoint,
# sptune.tuning.callbacks.checkpoint_pruning), longer than a tiny trial's epochs 2-3 last. Every second here.
LIVE_STORAGE = {"TUNE_GLOBAL_CHECKPOINT_S": "1"}


@pytest.fixture(scope="module")
def cluster(repo_root):
    free = available_memory_gib()
    if free < MIN_FREE_GIB:
        pytest.skip(f"only {free:.1f} GiB of memory free; two Ray nodes and their trials need {MIN_FREE_GIB} GiB")
    # Short root: Ray's unix sockets live under --temp-dir and are limited to ~107 characters.
    root = Path(tempfile.mkdtemp(prefix="rn_", dir="/tmp"))
    env = {**cluster_env(root / "token", repo_root), **FAST_NODE_DEATH, **LIVE_STORAGE}
    head = RayHead(root, write_token(root / "token"), env)
    try:
        head.start(num_cpus=1)
        worker_s, worker_dir = start_worker(head, num_cpus=1)
        nodes = head.nodes()
        head_id = next(n["node_id"] for n in nodes if n["is_head_node"])
        worker_id = next(n["node_id"] for n in nodes if not n["is_head_node"])
        print(f"\n[node-loss] head up after {head.start_seconds:.1f}s, worker joined in {worker_s:.1f}s")
        yield SimpleNamespace(root=root, env=env, head=head, repo=repo_root, worker_dir=worker_dir,
                              head_id=head_id, worker_id=worker_id)
    finally:
        left = head.stop()
        shutil.rmtree(root, ignore_errors=True)
        assert not left, f"could not stop PIDs {sorted(left)}"


def _rows(trial_dir: Path) -> list[dict]:
    try:
        text = (trial_dir / "result.json").read_text()
    except OSError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:  # the line being written
            break
    return rows


def _victim(experiment: Path, worker_pids: set[int]) -> tuple[Path, dict] | None:
    """A finetuning trial training on the worker node: it reported epoch 2 or 3, so its epoch-1 checkpoint is
    registered with Tune, and it has not reached the rung of synchronous halving, where it could sit paused
    without its actor (losing the node would cost it nothing), so it is training now."""
    for trial_dir in experiment.glob("StudyTrainable_*"):
        rows = _rows(trial_dir)
        last = rows[-1] if rows else None
        if (last and last.get("pid") in worker_pids and not last.get("done")
                and last["config"].get("phase") == "search" and 2 <= last["training_iteration"] < FIRST_RUNG
                and any(trial_dir.glob("checkpoint_*"))):
            return trial_dir, last
    return None


def _kill_worker_node(cluster, experiment: Path, proc: subprocess.Popen) -> SimpleNamespace:
    """Wait for a victim, then SIGKILL every process of the worker node at once."""
    deadline = time.time() + KILL_WITHIN_S
    pattern = [(f"{cluster.worker_dir}/",)]
    while time.time() < deadline and proc.poll() is None:
        pids = matching_pids(pattern)
        found = _victim(experiment, pids)
        if found:
            for pid in pids:  # raylet, agents, workers: the node is gone, not just a trial's process
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            t_kill = time.time()
            trial_dir, last = found
            print(f"[node-loss] killed {len(pids)} worker-node processes while {trial_dir.name} was at epoch "
                  f"{last['training_iteration']}")
            while len(cluster.head.nodes()) > 1 and time.time() < t_kill + 60:
                time.sleep(0.2)
            dead_s = time.time() - t_kill
            print(f"[node-loss] Ray marked the worker node dead after {dead_s:.1f}s")
            return SimpleNamespace(pids=pids, trial_dir=trial_dir, iteration=last["training_iteration"],
                                   time=t_kill, dead_s=dead_s)
        time.sleep(0.1)
    return SimpleNamespace(pids=set(), trial_dir=None, iteration=None, time=None, dead_s=None)


@pytest.fixture(scope="module")
def study(cluster):
    out, storage = cluster.root / "study", cluster.root / "storage"
    cmd = [sys.executable, "-m", "sptune.sweep", SPEC, "--address", cluster.head.address, "--storage", str(storage),
           "--output", str(out), "--set", "tracking.experiment=node-loss", *STUDY]
    log = cluster.root / "study.log"
    t0 = time.time()
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, env=cluster.env, cwd=cluster.repo, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        killed = _kill_worker_node(cluster, storage / "study", proc)
        try:
            proc.wait(timeout=max(1.0, STUDY_TIMEOUT_S - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            pass
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # ray.init ignores SIGTERM while it retries the GCS
            proc.wait()
    print(f"[node-loss] study exit {proc.returncode} after {time.time() - t0:.0f}s")
    yield SimpleNamespace(rc=proc.returncode, out=log.read_text(errors="replace"), killed=killed, output=out,
                          experiment=storage / "study")


def _tune_trials(experiment: Path) -> dict[str, dict]:
    """Tune's own record of every trial (its last experiment state): status, num_failures, directory."""
    (state_file,) = sorted(experiment.glob("experiment_state-*.json"))[-1:]
    trials = {}
    for trial_json, meta_json in json.loads(state_file.read_text())["trial_data"]:
        trial, meta = json.loads(trial_json), json.loads(meta_json)
        trials[trial["trial_id"]] = {"id": trial["trial_id"], "status": trial["status"],
                                     "num_failures": meta["num_failures"],
                                     "dir": experiment / trial["relative_logdir"], "config": trial["config"]}
    return trials


def test_the_study_survives_the_lost_node(cluster, study):
    assert study.killed.trial_dir is not None, "the worker node never had a finetuning trial at epoch 2-3\n" + \
        study.out[-3000:]
    assert study.rc == 0, study.out[-5000:]
    assert [n["node_id"] for n in cluster.head.nodes()] == [cluster.head_id]  # the worker is gone for good
    results = json.loads((study.output / "results.json").read_text())
    assert sorted(r["variant"] for r in results["rows"]) == ["scratch", "spt"]


def test_the_killed_trial_resumed_on_the_head_from_its_checkpoint(cluster, study):
    if study.killed.trial_dir is None:
        pytest.skip("nothing was killed (see test_the_study_survives_the_lost_node)")
    trials = _tune_trials(study.experiment)
    failed = {tid: t for tid, t in trials.items() if t["num_failures"]}
    victim = next(tid for tid, t in trials.items() if t["dir"] == study.killed.trial_dir)
    assert victim in failed, f"Tune did not count the killed trial's failure: {trials[victim]}"
    node_of = {a["pid"]: a["node_id"] for a in cluster.head.actors() if a.get("pid")}
    for tid, t in failed.items():
        assert t["status"] == "TERMINATED", (tid, t)
        assert "Failure # 1" in (t["dir"] / "error.txt").read_text()
        rows = _rows(t["dir"])
        assert all(r["epoch"] == r["training_iteration"] for r in rows)  # the loop's count is Tune's
        before = [r for r in rows if r["pid"] in study.killed.pids]
        after = rows[len(before):]
        assert before and after and not any(r["pid"] in study.killed.pids for r in after), tid
        assert {node_of.get(r["pid"]) for r in after} == {cluster.head_id}, "retried elsewhere than the head"
        first = after[0]["training_iteration"]
        # From the checkpoint of the epoch before the one that was reported last (or that one), never from 1.
        assert 1 < first <= before[-1]["training_iteration"] + 1, [r["training_iteration"] for r in rows]
        epochs = [r["training_iteration"] for r in after]
        assert epochs == list(range(first, first + len(after)))
        # To the end, or stopped by halving at its rung (where the rest of its search had to wait for it).
        assert epochs[-1] in (FIRST_RUNG, FINETUNE_EPOCHS), epochs
        # An epoch the lost attempt reported but had not checkpointed is trained again from the restored state
        # (weights, optimizer, schedule and every RNG): it must come out the same.
        for again in (r for r in after if r["training_iteration"] <= before[-1]["training_iteration"]):
            lost = next(r for r in before if r["training_iteration"] == again["training_iteration"])
            assert (again["loss"], again["val_acc"]) == pytest.approx((lost["loss"], lost["val_acc"]), rel=1e-5)
        print(f"[node-loss] {tid}: epochs {[r['training_iteration'] for r in before]} on the worker, {epochs} on "
              f"the head, first retried epoch reported {after[0]['timestamp'] - study.killed.time:.0f}s after the kill")


def test_only_finished_trials_are_selected(study):
    if study.rc != 0:
        pytest.skip("the study failed (see test_the_study_survives_the_lost_node)")
    trials = _tune_trials(study.experiment)
    state = json.loads((study.output / "study_state.json").read_text())
    picked = [s["selection"] for search in state["searches"].values() for s in search["selected"]]
    assert len(picked) == 3  # pretraining, scratch, spt
    for sel in picked:
        trial = trials[sel["trial_id"]]
        assert trial["status"] == "TERMINATED", sel
        checkpoint = Path(sel["checkpoint_path"])
        assert checkpoint.parent == trial["dir"], (checkpoint, trial["dir"])
        saved = torch.load(checkpoint / "state.pt", map_location="cpu", weights_only=True)
        assert saved["epoch"] == sel["epoch"]
        # The surviving attempt's report of that epoch (the last row with it), not a lost attempt's.
        reported = [r for r in _rows(trial["dir"]) if r["training_iteration"] == sel["epoch"]][-1]
        assert reported[sel["metric"]] == pytest.approx(sel["score"])
    rows = json.loads((study.output / "results.json").read_text())["rows"]
    assert {r["trial_id"] for r in rows} <= {s["trial_id"] for s in picked}


def test_the_report_counts_the_failures(study):
    if study.rc != 0:
        pytest.skip("the study failed (see test_the_study_survives_the_lost_node)")
    trials = _tune_trials(study.experiment)
    results = json.loads((study.output / "results.json").read_text())
    for row in results["rows"]:
        stage = f"search-{row['variant']}"
        tune_count = sum(t["num_failures"] for t in trials.values() if t["config"].get("stage") == stage)
        assert row["failures"] == tune_count, (row["variant"], row["failures"], tune_count)
    victim = next(t for t in trials.values() if t["dir"] == study.killed.trial_dir)
    hit = next(r for r in results["rows"] if f"search-{r['variant']}" == victim["config"]["stage"])
    assert hit["failures"] >= 1
    # The trial's MLflow run: finished, with Tune's count of its failures.
    client = MlflowClient(results["mlflow"]["tracking_uri"])
    (run,) = client.search_runs([results["mlflow"]["experiment_id"]], f"tags.`sptune.trial_id` = '{victim['id']}'")
    assert run.info.status == "FINISHED" and int(run.data.tags["sptune.failures"]) == victim["num_failures"]
    last_epoch = _rows(victim["dir"])[-1]["training_iteration"]
    assert max(m.step for m in client.get_metric_history(run.info.run_id, "val_acc")) == last_epoch
    html = (study.output / "report.html").read_text()
    md = (study.output / "report.md").read_text()
    for text in (html, md):
        assert "failures" in text.lower()
    assert f"{hit['variant']} on digits: {hit['failures']} trial failure" in html
