"""results.json is a contract: the study writes it from typed records under the same keys as always."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sptune.judging.results import ResultRow, add_deltas, write_results
from sptune.judging.selection import Selection
from sptune.plan.study_plan import build_plan
from sptune.spec import load_spec
from sptune.study.publish import results_document
from sptune.study.state import SearchRecord, SelectedTrial, StudyState, TunerRun
from sptune.tasks.base import TaskInfo

ROW_KEYS = ["variant", "kind", "task", "seed", "lr", "batch_size", "best_epoch", "val_acc", "test_acc", "test_loss",
            "trials", "diverged", "failed", "trial_epochs", "trial_id", "mlflow_run_id", "checkpoint",
            "delta_test_vs_baseline", "delta_baseline", "failures", "may_be_unconverged"]
SELECTION_KEYS = ["trial_id", "config", "checkpoint_path", "metric", "score", "epoch", "n_trials", "n_diverged",
                  "n_failed", "trial_epochs", "n_failures"]


@pytest.fixture
def plan(repo_root):
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", [])
    return build_plan(spec, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)


def _row(variant: str, kind: str, seed: int, test_acc: float) -> ResultRow:
    return ResultRow(variant=variant, kind=kind, task="digits", seed=seed, lr=1e-3, batch_size=32, best_epoch=3,
                     val_acc=0.9, test_acc=test_acc, test_loss=0.4, trials=4, diverged=0, failed=0, trial_epochs=12,
                     trial_id="t", mlflow_run_id=None, checkpoint="/ckpt")


def _pretrained() -> SearchRecord:
    sel = Selection(trial_id="p", config={"lr": 1e-3}, checkpoint_path="/ckpt/p", metric="val_loss", score=0.1,
                    epoch=5, metrics={"val_loss": 0.1}, n_trials=4, n_diverged=0, n_failed=0, trial_epochs=20)
    return SearchRecord([SelectedTrial(sel, "run-p")])


def test_the_document_keeps_its_keys(plan):
    state = StudyState("sqlite:///m.db", "1", "parent", searches={"pretrain": _pretrained()},
                       timeline=[TunerRun("pretrain", ["masked"], 1.0, 2.0, 4), TunerRun("search", ["scratch", "spt"],
                                                                                        2.0, 3.0, 12)])
    rows = [_row("scratch", "scratch", 0, 0.8), _row("spt", "spt", 0, 0.85)]
    doc = results_document(plan, state, rows)
    assert list(doc) == ["study", "task", "mlflow", "timeline", "pretrain", "seeds", "spread", "summary", "budget"]
    # Re-runs use seeds no search trial used; the spread says what it covers.
    assert doc["seeds"] == {"search": [0], "rerun": [1000, 1001, 1002]} and doc["spread"] == "finetune"
    assert doc["mlflow"] == {"tracking_uri": "sqlite:///m.db", "experiment_id": "1", "parent_run_id": "parent"}
    assert doc["timeline"][1] == {"stage": "search", "variants": ["scratch", "spt"], "start": 2.0, "end": 3.0,
                                  "trials": 12}
    assert list(doc["pretrain"]) == ["stage", "variant", *SELECTION_KEYS]
    assert (doc["pretrain"]["stage"], doc["pretrain"]["variant"]) == ("pretrain", "masked")


def test_a_cached_pretraining_names_its_checkpoint(plan):
    state = StudyState(spt_from_cache={"pretrain": "/cache/abc"})
    assert results_document(plan, state, [_row("scratch", "scratch", 0, 0.8)])["pretrain"] == {
        "reused_checkpoint": "/cache/abc"}


def test_rows_are_written_under_their_keys_with_paired_deltas(tmp_path):
    rows = [_row("scratch", "scratch", 0, 0.8), _row("spt", "spt", 0, 0.85), _row("spt", "spt", 1, 0.9)]
    add_deltas(rows)
    assert [r.delta_test_vs_baseline for r in rows] == [None, pytest.approx(0.05), None]  # the baseline has no Δ
    assert [r.delta_baseline for r in rows] == [None, "scratch", None]  # the variant each Δ is against
    write_results(tmp_path, {"study": "s", "task": "digits", "summary": {}}, rows)
    written = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert [list(r) for r in written] == [ROW_KEYS] * 3
