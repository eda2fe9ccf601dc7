"""The CLI's start path imports on one thread only: two threads importing at once can deadlock on Python's
module locks (a `_DeadlockError` was seen at a study's start), so no sptune thread may import a module.

Each command runs as `python -m sptune.sweep` does (runpy), under an audit hook that records every module
imported off the main thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers_tiny import PLAIN, tiny_spec

# The CLI run as `python -m sptune.sweep ARGS`, writing what it imported (and on which thread) to argv[1].
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
# Three trials of one epoch: the whole start (MLflow store, Ray, the study's imports), the Tuner and the report.
SMALLEST = [
    "--set", "pretrain.epochs=1", "--set", "pretrain.num_samples=1", "--set", "finetune.epochs=1",
    "--set", "variants.scratch.num_samples=1", "--set", "variants.spt.num_samples=1",
    "--set", "scheduler.type=fifo", "--set", "model.n_layers=1", "--set", "rerun_seeds=1", *PLAIN,
]  # fmt: skip
# What a study's start imports: the launcher, the study, the report, MLflow, Ray, torch.
STUDY_START = ("sptune.study.launch", "sptune.study.study", "sptune.report", "mlflow", "ray", "torch")
STARTS = 3  # each a whole start with its own Ray (10-30 s)


def _audited(repo_root: str, log: Path, args: list[str]) -> tuple[subprocess.CompletedProcess, dict]:
    cmd = [sys.executable, "-c", AUDITED_CLI, str(log), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=repo_root,
                          env={**os.environ, "PYTHONPATH": repo_root})
    return proc, json.loads(log.read_text())


@pytest.fixture(scope="module")
def finished_study(repo_root, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, dict]:
    root = tmp_path_factory.mktemp("launch_start")
    out = root / "out"
    proc, seen = _audited(repo_root, root / "imports.json", [tiny_spec(repo_root), "--output", str(out), *SMALLEST])
    return out, proc, seen


def test_a_study_imports_every_module_on_its_main_thread(finished_study):
    out, proc, seen = finished_study
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "results.json").is_file() and (out / "report.html").is_file()
    assert set(STUDY_START) <= set(seen["modules"])
    assert seen["off_main"] == []


@pytest.mark.heavy  # many launches in a row
def test_the_start_path_never_deadlocks_when_launched_repeatedly(repo_root, finished_study, tmp_path):
    """The whole start path again and again (preflight, MLflow store, Ray, the study's imports, the report),
    each time resuming the finished study: nothing left to train, exit 0, every import on the main thread."""
    out, first, _ = finished_study
    assert first.returncode == 0, first.stderr[-3000:]
    for i in range(STARTS):
        proc, seen = _audited(repo_root, tmp_path / f"imports-{i}.json",
                              [tiny_spec(repo_root), "--resume", "--output", str(out), *SMALLEST])
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "study already finished" in proc.stdout and f"Report: {out / 'report.html'}" in proc.stdout
        assert set(STUDY_START) <= set(seen["modules"])
        assert seen["off_main"] == []
