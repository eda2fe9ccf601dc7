"""kill -9 the driver mid-finetune, --resume, and compare with an uninterrupted study."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from sptune.sweep import main
from tests.helpers_tiny import TINY, tiny_spec, trial_configs


def _spec(repo_root: str) -> str:
    return tiny_spec(repo_root)


def _children(out: Path) -> list:
    results = json.loads((out / "results.json").read_text())
    client = MlflowClient(results["mlflow"]["tracking_uri"])
    return client.search_runs([results["mlflow"]["experiment_id"]],
                              f"tags.mlflow.parentRunId = '{results['mlflow']['parent_run_id']}'", max_results=1000)


def _finetune_checkpointed(out: Path) -> bool:
    """Pretraining is selected and an SPT finetune trial of the one Tuner has saved a checkpoint."""
    state = out / "study_state.json"
    if not state.exists() or "pretrain" not in json.loads(state.read_text() or "{}").get("searches", {}):
        return False
    for trial in (out / "ray_results" / "study").glob("*"):
        params = trial / "params.json"
        if list(trial.glob("checkpoint_*")) and params.exists() and '"search-spt"' in params.read_text():
            return True
    return False


def _early_trial_list(out: Path, seen: dict[str, bytes]) -> None:
    """Keep the first complete trial list Tune copies to the storage (its experiment_state file)."""
    if seen:
        return
    for path in (out / "ray_results" / "study").glob("experiment_state-*.json"):
        text = path.read_bytes()
        if b'"trial_data": [[' in text and text.rstrip().endswith(b"}"):
            seen[path.name] = text


def _kill_mid_finetune(out: Path, cmd: list[str], env: dict, early: dict[str, bytes] | None = None) -> list[str]:
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    timeline = [f"{time.time():.1f} driver started (pid {proc.pid})"]
    deadline = time.time() + 240
    try:
        while time.time() < deadline and proc.poll() is None:
            if early is not None:
                _early_trial_list(out, early)
            if _finetune_checkpointed(out):
                break
            time.sleep(0.05)
        else:
            pytest.fail("the study never reached the variants' search")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray processes it started
        proc.wait()
    timeline.append(f"{time.time():.1f} kill -9 after the first finetune checkpoint")
    return timeline


def test_resume_after_kill_matches_an_uninterrupted_study(ray_session, repo_root, tmp_path, tiny_reference):
    reference, interrupted = tiny_reference, tmp_path / "interrupted"

    # The kill is timed from the trial folders under the storage (params.json says which search a trial is
    # in), which Tune's driver copies there with each snapshot: every 10 s or more by default, longer than
    # the tiny SPT search lasts. Every second here (also where the early trial list is taken from).
    env = {**os.environ, "PYTHONPATH": repo_root, "TUNE_GLOBAL_CHECKPOINT_S": "1"}
    cmd = [sys.executable, "-m", "sptune.sweep", _spec(repo_root), "--output", str(interrupted), *TINY]
    early: dict[str, bytes] = {}
    timeline = _kill_mid_finetune(interrupted, cmd, env, early)
    # The worst a kill during Tune's background copy can leave: the storage's trial list from long before
    # the searchers' state beside it (CI saw a stage wait forever for a trial missing from the list).
    # The resume must restore the last snapshot whole (sptune.study.snapshot), not this mix.
    assert early and (interrupted / "ray_results" / "study" / "sptune_snapshot.zip").is_file()
    for name, text in early.items():
        (interrupted / "ray_results" / "study" / name).write_bytes(text)
    state = json.loads((interrupted / "study_state.json").read_text())
    assert "pretrain" in state["searches"] and "search-spt" not in state["searches"]
    assert not (interrupted / "test_reads.jsonl").exists()
    pretrain_checkpoint = state["searches"]["pretrain"]["selected"][0]["selection"]["checkpoint_path"]

    assert main([_spec(repo_root), "--output", str(interrupted), "--resume", *TINY]) == 0
    timeline.append(f"{time.time():.1f} resumed study finished")
    print("\n".join(timeline))

    # Same trials as the uninterrupted study; nothing re-run twice, nothing lost.
    assert trial_configs(interrupted) == trial_configs(reference)
    children = _children(interrupted)
    assert len(children) == len(_children(reference)) == 8
    assert len({c.data.tags["sptune.trial_id"] for c in children}) == 8  # no duplicate runs
    assert all(c.info.status == "FINISHED" for c in children)
    results = json.loads((interrupted / "results.json").read_text())
    assert [r["variant"] for r in results["rows"]] == ["scratch", "spt"]
    # The finished SPT pretraining was reused, not redone.
    assert results["pretrain"]["checkpoint_path"] == pretrain_checkpoint
    # The test split was still read exactly once per selected checkpoint.
    assert len((interrupted / "test_reads.jsonl").read_text().splitlines()) == 2


def test_resume_refuses_a_directory_without_a_study(repo_root, tmp_path, capsys):
    assert main([_spec(repo_root), "--output", str(tmp_path), "--resume"]) == 2
    assert "no interrupted study" in capsys.readouterr().err


def test_a_new_study_refuses_to_overwrite_an_old_one(repo_root, tmp_path, capsys):
    (tmp_path / "study_state.json").write_text("{}")
    assert main([_spec(repo_root), "--output", str(tmp_path)]) == 2
    assert "--resume" in capsys.readouterr().err
