"""The CLI's start path imports on one thread only: two threads importing at once can deadlock on Python's
module locks (a `_DeadlockError` was seen at a study's start), so no sptune thread may import a module.

Each command runs as `python -m sptune.sweep` does (runpy), under an audit hook that records, per import,
whether it ran on the main thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.helpers_tiny import tiny_spec

# The CLI run as `python -m sptune.sweep ARGS`, writing every module it imported off the main thread to argv[1].
AUDITED_CLI = """
import atexit, json, runpy, sys, threading
log, off_main = sys.argv.pop(1), []

def hook(event, args):
    if event == "import" and threading.current_thread() is not threading.main_thread():
        off_main.append([threading.current_thread().name, args[0]])

def write():
    with open(log, "w") as f:
        json.dump({"off_main": off_main, "modules": sorted(sys.modules)}, f)

atexit.register(write)
sys.addaudithook(hook)
runpy.run_module("sptune.sweep", run_name="__main__", alter_sys=True)
"""
# Three trials of one epoch: the whole start (MLflow store, Ray, the study's imports) and the report.
SMALLEST = [
    "--set", "pretrain.epochs=1", "--set", "pretrain.num_samples=1", "--set", "finetune.epochs=1",
    "--set", "variants.scratch.num_samples=1", "--set", "variants.spt.num_samples=1",
    "--set", "scheduler.type=fifo", "--set", "model.n_layers=1", "--set", "rerun_seeds=1",
]  # fmt: skip
STARTS = 20
STUDY_START = ("sptune.study.launch", "sptune.study", "sptune.report", "mlflow", "ray", "torch")


def _audited(repo_root: str, log: Path, args: list[str], timeout: float) -> tuple[subprocess.CompletedProcess, dict]:
    cmd = [sys.executable, "-c", AUDITED_CLI, str(log), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=repo_root,
                          env={**os.environ, "PYTHONPATH": repo_root})
    return proc, json.loads(log.read_text())


def test_a_study_imports_every_module_on_its_main_thread(repo_root, tmp_path):
    out = tmp_path / "out"
    proc, seen = _audited(repo_root, tmp_path / "imports.json",
                          [tiny_spec(repo_root), "--output", str(out), *SMALLEST], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "results.json").is_file() and (out / "report.html").is_file()
    assert seen["off_main"] == []


def test_the_start_path_never_deadlocks_when_launched_repeatedly(repo_root, tmp_path):
    """STARTS launches, two at a time, each importing what a study's start imports (the launcher, the study,
    the report, MLflow, Ray, torch) before the preflight refuses its --resume: the one-line refusal, every time."""
    args = [tiny_spec(repo_root), "--resume", "--output", str(tmp_path / "no-study")]

    def start(i: int) -> tuple[subprocess.CompletedProcess, dict]:
        return _audited(repo_root, tmp_path / f"imports-{i}.json", args, timeout=180)

    with ThreadPoolExecutor(2) as pool:
        launches = list(pool.map(start, range(STARTS)))
    for proc, seen in launches:
        assert proc.returncode == 2, proc.stderr[-3000:]
        assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "no interrupted study" in proc.stderr
        assert set(STUDY_START) <= set(seen["modules"])
        assert seen["off_main"] == []
