"""A study's own promises, end to end on digits: the tested checkpoint is the selected epoch's
(ties included), and a study interrupted after reading the test split never reads it again."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from sptune.study import final_evaluation
from sptune.sweep import main
from sptune.training.checkpoint_files import load_state

# An LR this small makes every AdamW update underflow to exactly zero in float32 (|update| <= ~10 lr, far below the
# smallest subnormal, 1.4e-45), so the weights, and every validation number, are bit-for-bit the same each epoch on
# any CPU: every epoch ties, which is exactly where a second tie rule would test another epoch. (At 1e-9 updates
# still moved the last bits of some weights, and on some CPUs a later epoch's loss came out lower.)
FROZEN_LR = "1.0e-50"
TIED = """
name: tied
task: {name: digits}
model: {d_model: 16, n_layers: 1, n_heads: 2, d_ff: 32}
finetune: {epochs: 3, num_samples: 1}
variants:
  scratch: {search: {lr: {type: grid, values: [LR]}, batch_size: {type: grid, values: [64]}}}
scheduler: {type: fifo}
"""


def _children(results: dict) -> list:
    client = MlflowClient(results["mlflow"]["tracking_uri"])
    parent = results["mlflow"]["parent_run_id"]
    return client.search_runs([results["mlflow"]["experiment_id"]], f"tags.mlflow.parentRunId = '{parent}'")


def test_the_tested_checkpoint_is_the_selected_epoch_even_when_epochs_tie(ray_session, tmp_path):
    spec = tmp_path / "tied.yaml"
    spec.write_text(TIED.replace("LR", FROZEN_LR))
    assert main([str(spec), "--output", str(tmp_path / "out")]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    state = json.loads((tmp_path / "out" / "study_state.json").read_text())
    [row] = results["rows"]
    [selected] = state["searches"]["search-scratch"]["selected"]
    [run] = [r for r in _children(results) if r.info.run_id == row["mlflow_run_id"]]
    tested_epoch = int(load_state(row["checkpoint"])["epoch"])
    assert row["best_epoch"] == selected["selection"]["epoch"] == tested_epoch
    assert int(run.data.metrics["best_epoch"]) == tested_epoch
    assert int(run.data.metrics["selected_epoch"]) == tested_epoch
    client = MlflowClient(results["mlflow"]["tracking_uri"])
    for key in ("val_acc", "val_loss"):  # the premise, checked: the three epochs tie exactly
        history = client.get_metric_history(run.info.run_id, key)
        assert len(history) == 3 and len({m.value for m in history}) == 1, (key, [m.value for m in history])
    assert tested_epoch == 1  # all epochs tie on accuracy and loss: the earliest wins


class KilledHere(BaseException):
    """Stands for the driver dying at this exact point (BaseException: nothing may catch it)."""


def test_a_study_killed_between_the_test_read_and_mlflow_never_reads_the_test_split_again(
    ray_session, repo_root, tmp_path, monkeypatch
):
    spec = tmp_path / "tied.yaml"
    spec.write_text(TIED.replace("LR", "1.0e-3"))
    out = tmp_path / "out"
    real_log_metric = MlflowClient.log_metric

    def dies_on_the_first_test_metric(self, run_id, key, *args, **kwargs):
        if key == "test_acc":
            raise KilledHere()
        return real_log_metric(self, run_id, key, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(MlflowClient, "log_metric", dies_on_the_first_test_metric)
        with pytest.raises(KilledHere):
            main([str(spec), "--output", str(out)])
    reads = out / "test_reads.jsonl"
    assert len(reads.read_text().splitlines()) == 1
    assert main([str(spec), "--output", str(out), "--resume"]) == 0
    assert len(reads.read_text().splitlines()) == 1  # the resume used the recorded evaluation
    results = json.loads((out / "results.json").read_text())
    [run] = [r for r in _children(results) if r.info.run_id == results["rows"][0]["mlflow_run_id"]]
    assert run.data.metrics["test_acc"] == pytest.approx(results["rows"][0]["test_acc"])


def test_a_kill_inside_the_test_read_is_counted_and_the_second_read_reported(ray_session, tmp_path, monkeypatch):
    spec = tmp_path / "tied.yaml"
    spec.write_text(TIED.replace("LR", "1.0e-3"))
    out = tmp_path / "out"

    def dies_after_reading(*args, **kwargs):
        raise KilledHere()  # the test split was read and audited; no row was recorded

    with monkeypatch.context() as patched:
        patched.setattr(final_evaluation, "accuracy_on_test", dies_after_reading)
        with pytest.raises(KilledHere):
            main([str(spec), "--output", str(out)])
    assert main([str(spec), "--output", str(out), "--resume"]) == 0
    results = json.loads((out / "results.json").read_text())
    [row] = results["rows"]
    assert results["test_reads"] == {row["checkpoint"]: 2}
    assert len((out / "test_reads.jsonl").read_text().splitlines()) == 2
    md = (out / "results.md").read_text()
    assert "Test split reads: 2 for 1 checkpoint(s); read more than once:" in md
    assert f"- {row['checkpoint']}: 2 reads (a resume re-read it after an interrupted final evaluation)" in md
    assert results["provenance"]["data"]["test"] is not None and (row["test_device"], row["test_precision"]) == (
        "cpu", "fp32")
