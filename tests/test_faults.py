"""Diverging trials stop at once, are marked, never selected, and are counted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from sptune.sweep import main

SCRATCH_ONLY = """
name: diverge
task: {name: digits}
model: {d_model: 32, n_layers: 1, n_heads: 4, d_ff: 64}
finetune: {epochs: 3}
variants:
  scratch:
    num_samples: 1
    search:
      lr: {type: grid, values: [1.0e-3, 1.0e+6]}
      batch_size: {type: choice, values: [32]}
scheduler: {type: fifo}
training: {grad_clip: 0.0, warmup_fraction: 0.0}
"""


def test_diverged_trial_is_marked_and_never_selected(ray_session, tmp_path):
    spec = tmp_path / "diverge.yaml"
    spec.write_text(SCRATCH_ONLY)
    out = tmp_path / "out"
    assert main([str(spec), "--output", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    (row,) = results["rows"]
    assert row["lr"] == 1e-3 and row["diverged"] == 1 and row["trials"] == 2
    client = MlflowClient(results["mlflow"]["tracking_uri"])
    runs = client.search_runs([results["mlflow"]["experiment_id"]],
                              f"tags.mlflow.parentRunId = '{results['mlflow']['parent_run_id']}'")
    by_lr = {float(r.data.params["lr"]): r for r in runs}
    bad = by_lr[1e6]
    assert bad.data.tags["sptune.status"] == "diverged" and bad.info.status == "FAILED"
    assert "sptune.selected" not in bad.data.tags and "test_acc" not in bad.data.metrics
    # Stopped at once: one epoch reported, not the full three.
    trial_dirs = [d for d in (out / "ray_results" / "study").iterdir() if "lr=1000000" in d.name]
    lines = (trial_dirs[0] / "result.json").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["diverged"] == 1
    assert by_lr[1e-3].data.tags["sptune.status"] == "finished"
    assert Path(out / "test_reads.jsonl").read_text().count("\n") == 1


RETRY_SPEC = """
name: retry
max_failures: 2
task: {name: digits}
model: {d_model: 32, n_layers: 1, n_heads: 4, d_ff: 64}
finetune: {epochs: 8}
variants:
  scratch:
    num_samples: 1
    search:
      lr: {type: grid, values: [1.0e-3]}
      batch_size: {type: choice, values: [16]}
scheduler: {type: fifo}
"""


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        children = [c for c, p in parents.items() if p == pid]
        found += children
        frontier += children
    return found


def _trial_workers(driver_pid: int) -> list[int]:
    """This study's trial actors: descendants of its driver (never other Ray sessions')."""
    workers = []
    for pid in _descendants(driver_pid):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "StudyTrainable" in title:
            workers.append(pid)
    return workers


def test_a_crashed_trial_is_retried_and_its_failure_recorded(tmp_path, repo_root):
    spec = tmp_path / "retry.yaml"
    spec.write_text(RETRY_SPEC)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": repo_root}
    proc = subprocess.Popen([sys.executable, "-m", "sptune.sweep", str(spec), "--output", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        killed = None
        deadline = time.time() + 180
        while killed is None and time.time() < deadline and proc.poll() is None:
            if list((out / "ray_results" / "study").glob("*/checkpoint_*")):
                workers = _trial_workers(proc.pid)
                if workers:
                    os.kill(workers[0], signal.SIGKILL)  # the trial's process dies mid-training
                    killed = workers[0]
            time.sleep(0.05)
        assert killed, "never saw the trial's worker process"
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, output[-3000:]
    results = json.loads((out / "results.json").read_text())
    (row,) = results["rows"]
    assert row["failed"] == 0 and row["best_epoch"] >= 1
    client = MlflowClient(results["mlflow"]["tracking_uri"])
    (run,) = client.search_runs([results["mlflow"]["experiment_id"]],
                                f"tags.mlflow.parentRunId = '{results['mlflow']['parent_run_id']}'")
    assert int(run.data.tags["sptune.failures"]) >= 1 and run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "val_acc")
    assert max(m.step for m in history) == 8  # the retried trial resumed and finished all epochs


def test_a_search_where_every_trial_diverges_fails_cleanly(ray_session, tmp_path, capsys):
    spec = tmp_path / "all_bad.yaml"
    spec.write_text(SCRATCH_ONLY.replace("values: [1.0e-3, 1.0e+6]", "values: [1.0e+6]"))
    out = tmp_path / "out"
    assert main([str(spec), "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert "search-scratch" in err and "1 diverged" in err and "Traceback" not in err
    state = json.loads((out / "study_state.json").read_text())
    client = MlflowClient(state["tracking_uri"])
    assert client.get_run(state["parent_run_id"]).info.status == "FAILED"
    assert not (out / "test_reads.jsonl").exists()
