"""Diverging trials stop at once, are marked, never selected, and are counted.

A trial whose process dies is retried from its last checkpoint, its failure counted in results.json, the
report and its MLflow run: tests/test_node_loss.py SIGKILLs a whole node's processes, the trial's among them."""

from __future__ import annotations

import json
from pathlib import Path

from mlflow.tracking import MlflowClient

from sptune.sweep import main
from tests.helpers_tiny import child_runs, run_spec_text

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
    _, out, results = run_spec_text(tmp_path, SCRATCH_ONLY, "diverge")
    (row,) = results["rows"]
    assert row["lr"] == 1e-3 and row["diverged"] == 1 and row["trials"] == 2
    runs = child_runs(out)
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
