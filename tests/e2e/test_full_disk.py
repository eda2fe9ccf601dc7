"""A study whose output folder fills its disk stops as an interrupt does (one paragraph, exit 74, the libraries'
tracebacks in a log file); its folder, copied to a bigger disk, resumes there (`--resume --output NEW`, the old
disk gone) to the uninterrupted study's numbers, every epoch in MLflow, the MLflow store and artifacts in the copy.

One run feeds both: the full disk interrupts it, the copy is the moved folder. The small disk is a tmpfs the test
mounts (root only); where mounting is not allowed the test is skipped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from sptune.sweep import main
from tests.helpers_tiny import TINY, child_runs, selected_rows, tiny_spec, trial_configs

# The whole study's folder takes ~5 MiB (a third of it MLflow's store): this disk fills mid-study.
DISK_MIB = 3
# What the stopped run prints after its plan: its progress lines, the fault's paragraph, nothing of the libraries'.
MAX_OWN_LINES = 20
PLAN_ENDS = "Then: validation-best trial and epoch per variant"


@pytest.fixture
def small_disk(tmp_path):
    """A DISK_MIB tmpfs mounted for the test, unmounted after it (the folder copied off it by then)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"this machine does not allow a tmpfs mount: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_disk_stops_the_study_and_its_moved_copy_resumes(
    ray_session, repo_root, tmp_path, small_disk, tiny_reference
):
    full = small_disk / "study"
    argv = [tiny_spec(repo_root), "--output", str(full), *TINY]
    env = {**os.environ, "PYTHONPATH": repo_root, "TUNE_GLOBAL_CHECKPOINT_S": "1", "SPTUNE_PROGRESS_SECONDS": "off"}
    proc = subprocess.run(
        [sys.executable, "-m", "sptune.sweep", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    printed = proc.stdout + proc.stderr
    assert proc.returncode == 74, printed[-4000:]
    lines = [line for line in printed.splitlines() if line.strip()]
    after_plan = next(i for i, line in enumerate(lines) if line.startswith(PLAN_ENDS))
    assert "Traceback" not in printed and len(lines) - after_plan <= MAX_OWN_LINES, printed[-4000:]
    paragraph = lines[-1]
    assert (
        paragraph.startswith("sptune: stopped")
        and "no space left on device" in paragraph.lower()
        or ("disk is full" in paragraph)
    ), paragraph
    assert str(full) in paragraph and "(exit status 74)" in paragraph
    assert f"python -m sptune.sweep {tiny_spec(repo_root)} --output {full}" in paragraph and "--resume" in paragraph
    log = Path(paragraph.split("tracebacks are in ", 1)[1].split(". ", 1)[0])
    assert log.is_file() and log.stat().st_size > 0
    state = json.loads((full / "study_state.json").read_text())
    assert not (full / "results.json").exists() and state["rows"] is None

    # The folder moves to a bigger disk; the small one goes away with the old path.
    moved = tmp_path / "moved"
    shutil.copytree(full, moved, symlinks=True)
    subprocess.run(["umount", "-l", str(small_disk)], check=True)
    assert not (full / "study_state.json").exists()
    resume = [a if a != str(full) else str(moved) for a in argv]
    assert main([*resume, "--resume"]) == 0

    results = json.loads((moved / "results.json").read_text())
    reference = json.loads((tiny_reference / "results.json").read_text())
    assert selected_rows(results) == selected_rows(reference)
    assert trial_configs(moved) == trial_configs(tiny_reference)
    assert results["mlflow"]["tracking_uri"] == f"sqlite:///{moved / 'mlflow.db'}"
    children = child_runs(moved)
    assert len(children) == len(child_runs(tiny_reference)) and all(c.info.status == "FINISHED" for c in children)
    client = MlflowClient(results["mlflow"]["tracking_uri"])
    for child in children:  # every epoch of every trial, once
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "loss")]
        assert sorted(steps) == list(range(1, int(child.data.params["max_epochs"]) + 1)), child.info.run_name
        assert child.info.artifact_uri.startswith(moved.as_uri())
    assert any((moved / "mlartifacts").rglob("selected_checkpoint"))
    assert len((moved / "test_reads.jsonl").read_text().splitlines()) == 2
