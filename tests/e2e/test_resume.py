"""kill -9 the driver mid-finetune, --resume, and compare with an uninterrupted study."""

from __future__ import annotations

import json
import time
from pathlib import Path

from sptune.sweep import main
from tests.helpers_tiny import TINY, child_runs, kill_driver_when, tiny_spec, trial_checkpointed, trial_configs


def _spec(repo_root: str) -> str:
    return tiny_spec(repo_root)


def _finetune_checkpointed(out: Path) -> bool:
    """Pretraining is selected and an SPT finetune trial of the one Tuner has saved a checkpoint."""
    state = out / "study_state.json"
    if not state.exists() or "pretrain" not in json.loads(state.read_text() or "{}").get("searches", {}):
        return False
    return trial_checkpointed(out, '"search-spt"')


def _early_trial_list(out: Path, seen: dict[str, bytes]) -> None:
    """Keep the first complete trial list Tune copies to the storage (its experiment_state file)."""
    if seen:
        return
    for path in (out / "ray_results" / "study").glob("experiment_state-*.json"):
        text = path.read_bytes()
        if b'"trial_data": [[' in text and text.rstrip().endswith(b"}"):
            seen[path.name] = text


def test_resume_after_kill_matches_an_uninterrupted_study(ray_session, repo_root, tmp_path, tiny_reference):
    reference, interrupted = tiny_reference, tmp_path / "interrupted"

    early: dict[str, bytes] = {}

    def ready() -> bool:  # the early trial list is taken at every snapshot until then
        _early_trial_list(interrupted, early)
        return _finetune_checkpointed(interrupted)

    timeline = [f"{time.time():.1f} driver started"]
    kill_driver_when(ready, [_spec(repo_root), "--output", str(interrupted), *TINY], repo_root,
                     waiting_for="the variants' search")
    timeline.append(f"{time.time():.1f} kill -9 after the first finetune checkpoint")
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
    children = child_runs(interrupted)
    assert len(children) == len(child_runs(reference)) == 8
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
