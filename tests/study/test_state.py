"""study_state.json: typed records saved atomically as JSON and read back unchanged."""

from __future__ import annotations

import json

from sptune.judging.results import ResultRow
from sptune.judging.selection import Selection
from sptune.output_files import STATE
from sptune.study.state import SearchRecord, SelectedTrial, StateFile, StudyState, TunerRun, read_state


def _selection(trial_id: str, seed: int) -> Selection:
    return Selection(trial_id=trial_id, config={"lr": 1e-3, "batch_size": 32, "seed": seed},
                     checkpoint_path=f"/ckpt/{trial_id}", metric="val_acc", score=0.9, epoch=3,
                     metrics={"val_acc": 0.9, "epoch": 3}, n_trials=4, n_diverged=1, n_failed=0, trial_epochs=11)


def _row() -> ResultRow:
    return ResultRow(variant="spt", kind="spt", task="digits", seed=0, lr=1e-3, batch_size=32, best_epoch=3,
                     val_acc=0.9, test_acc=0.88, test_loss=0.4, trials=4, diverged=1, failed=0, trial_epochs=11,
                     trial_id="a", mlflow_run_id="run-a", checkpoint="/ckpt/a", delta_test_vs_baseline=0.01)


def test_a_directory_without_a_state_file_holds_no_study(tmp_path):
    assert read_state(tmp_path) is None


def test_an_empty_state_file_still_marks_a_study(tmp_path):
    (tmp_path / STATE).write_text("{}")
    assert read_state(tmp_path) == StudyState()


def test_the_state_survives_save_and_read(tmp_path):
    state_file = StateFile(tmp_path)
    state = state_file.state
    state.tracking_uri, state.experiment_id, state.parent_run_id = "sqlite:///x.db", "1", "parent"
    reruns = [SelectedTrial(_selection("b", 0), "run-b"), SelectedTrial(_selection("c", 1), None)]
    state.searches = {"search-spt": SearchRecord([SelectedTrial(_selection("a", 0), "run-a")]),
                      "rerun-spt": SearchRecord(reruns)}
    state.timeline = [TunerRun("search", ["spt"], 1.0, 2.0, 4)]
    state.spt_from_cache = {"pretrain": "/cache/abc"}
    state.rows = [_row()]
    state.published = True
    state_file.save()
    assert read_state(tmp_path) == state
    assert StateFile(tmp_path).state == state
    assert [p.name for p in tmp_path.iterdir()] == [STATE]  # the temporary file was renamed over it


def test_the_state_file_is_plain_json(tmp_path):
    state_file = StateFile(tmp_path)
    state_file.state.searches["pretrain"] = SearchRecord([SelectedTrial(_selection("a", 0), "run-a")])
    state_file.save()
    saved = json.loads((tmp_path / STATE).read_text())
    assert saved["searches"]["pretrain"]["selected"][0]["selection"]["checkpoint_path"] == "/ckpt/a"
    assert saved["rows"] is None and saved["parent_run_id"] is None
