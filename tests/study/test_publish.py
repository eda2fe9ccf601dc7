"""results.json is a contract: the study writes it from typed records under the same keys as always."""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest

from sptune.judging.results import ResultRow, add_deltas, write_results
from sptune.judging.selection import Selection
from sptune.plan.study_plan import build_plan
from sptune.spec import load_spec
from sptune.spec.campaign import CampaignStudy
from sptune.study.publish import audit_document, expected_max_document, merge_results, results_document
from sptune.study.state import SearchRecord, SelectedTrial, StudyState, TunerRun
from sptune.tasks import TaskRequest, holdout, load_task
from sptune.tasks.base import TaskInfo

ROW_KEYS = ["variant", "kind", "task", "seed", "lr", "batch_size", "best_epoch", "val_acc", "test_acc", "test_loss",
            "trials", "diverged", "failed", "trial_epochs", "trial_id", "mlflow_run_id", "checkpoint",
            "delta_test_vs_baseline", "delta_baseline", "failures", "test_device", "test_precision",
            "may_be_unconverged", "train_acc"]
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
    assert list(doc) == ["study", "task", "mlflow", "timeline", "picks", "pretrain", "seeds", "spread", "summary",
                         "budget", "lr_extension", "selection", "candidates"]  # digits_quick extends, picks robustly
    # Re-runs use seeds no search trial used; the spread says what it covers.
    assert doc["seeds"] == {"search": [0], "rerun": [1000, 1001, 1002]} and doc["spread"] == "finetune"
    assert doc["mlflow"] == {"tracking_uri": "sqlite:///m.db", "experiment_id": "1", "parent_run_id": "parent"}
    assert doc["timeline"][1] == {"stage": "search", "variants": ["scratch", "spt"], "start": 2.0, "end": 3.0,
                                  "trials": 12}
    assert list(doc["pretrain"]) == ["stage", "variant", *SELECTION_KEYS]
    assert (doc["pretrain"]["stage"], doc["pretrain"]["variant"]) == ("pretrain", "masked")


def test_picks_name_each_variants_selected_trial_from_its_last_selection_stage(plan):
    """digits_quick picks by seed-robust selection: a variant's pick is its candidates stage's, with only the
    searched values of its config."""
    config = {"lr": 2e-3, "batch_size": 64, "phase": "search", "seed": 0, "variant": "spt"}
    sel = Selection(trial_id="c7", config=config, checkpoint_path="/ckpt/c7", metric="val_acc", score=0.93, epoch=9,
                    metrics={}, n_trials=6, n_diverged=0, n_failed=0, trial_epochs=60)
    searched = Selection(**{**asdict(sel), "trial_id": "s1", "epoch": 4})
    state = StudyState(searches={"pretrain": _pretrained(), "candidates-spt": SearchRecord([SelectedTrial(sel, None)]),
                                 "search-scratch": SearchRecord([SelectedTrial(searched, None)])})
    doc = results_document(plan, state, [_row("scratch", "scratch", 0, 0.8), _row("spt", "spt", 0, 0.85)])
    assert doc["picks"] == {"spt": {"stage": "candidates-spt", "trial_id": "c7", "epoch": 9, "metric": "val_acc",
                                    "config": {"lr": 2e-3, "batch_size": 64}, "score": 0.93}}


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


def test_results_carry_provenance_and_test_reads_and_results_md_says_so(tmp_path):
    splits = load_task(TaskRequest("digits"))
    with holdout.final_evaluation(tmp_path / "test_reads.jsonl"):
        for checkpoint in ("/ckpt/scratch", "/ckpt/spt", "/ckpt/spt"):
            with holdout.reading_for(checkpoint):
                test = splits.test
    doc = audit_document(splits, tmp_path)
    assert doc["test_reads"] == {"/ckpt/scratch": 1, "/ckpt/spt": 2}
    provenance = doc["provenance"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert provenance["git"]["commit"] == head and isinstance(provenance["git"]["dirty"], bool)
    assert {"python", "torch", "ray", "optuna", "mlflow", "numpy"} <= set(provenance["versions"])
    standardised = {"mean": splits.info.value_mean, "std": splits.info.value_std, "of": "x / (levels - 1)",
                    "levels": 17}
    assert provenance["data"] == {"task": "digits", "train": splits.train.fingerprint(),
                                  "val": splits.val.fingerprint(), "test": test.fingerprint(),
                                  "input_standardisation": standardised}
    rows = [_row("scratch", "scratch", 0, 0.8)]
    write_results(tmp_path, {"study": "s", "task": "digits", "summary": {}, **doc}, rows)
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["provenance"] == provenance and written["test_reads"] == doc["test_reads"]
    md = (tmp_path / "results.md").read_text()
    assert f"Provenance: commit {head[:12]}" in md and f"train {splits.train.fingerprint()[:12]}" in md
    assert "Test split reads: 3 for 2 checkpoint(s); read more than once:" in md
    assert "- /ckpt/spt: 2 reads" in md and "/ckpt/scratch: 1" not in md


def test_a_diverged_rerun_seed_is_counted_and_the_delta_names_the_seeds_it_is_over(plan, tmp_path):
    # digits_quick re-runs seeds 1000-1002; scratch's seed 1001 diverged, so it has no row.
    rows = [_row("scratch", "scratch", 1000, 0.90), _row("scratch", "scratch", 1002, 0.92),
            _row("spt", "spt", 1000, 0.93), _row("spt", "spt", 1001, 0.99), _row("spt", "spt", 1002, 0.94)]
    add_deltas(rows)
    summary = results_document(plan, StudyState(searches={"pretrain": _pretrained()}), rows)["summary"]
    assert {k: summary["scratch"][k] for k in ("n_attempted", "n_used", "seeds_not_used")} == {
        "n_attempted": 3, "n_used": 2, "seeds_not_used": ["1001"]}
    assert (summary["spt"]["n_attempted"], summary["spt"]["n_used"], summary["spt"]["seeds_not_used"]) == (3, 3, [])
    assert summary["spt"]["delta_seeds"] == ["1000", "1002"] and summary["spt"]["delta_n"] == 2
    assert summary["spt"]["delta_mean"] == pytest.approx(0.025)  # seed 1001 is in spt's mean, not in its Δ
    write_results(tmp_path, {"study": "s", "task": "digits", "summary": summary}, rows)
    md = (tmp_path / "results.md").read_text()
    assert "| scratch | 2 / 3 |" in md and "| spt | 3 / 3 |" in md
    assert "scratch: seed(s) 1001 diverged or failed and are not in its mean, interval or Δ (2 of 3 used)." in md
    assert "paired by seed, n = 2: seeds 1000, 1002)" in md


def test_without_reruns_a_variant_is_tested_with_its_searchs_pick(repo_root):
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", ["rerun_seeds=1"])
    one = build_plan(spec, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)
    state = StudyState(searches={"pretrain": _pretrained()})
    summary = results_document(one, state, [_row("scratch", "scratch", 0, 0.9)])["summary"]
    assert (summary["scratch"]["n_attempted"], summary["scratch"]["n_used"]) == (1, 1)


def _searched(*scores: float | None) -> SearchRecord:
    return SearchRecord([SelectedTrial(_pretrained().best.selection, None)], list(scores))


def test_expected_best_validation_vs_budget_from_each_variants_search_trials(plan, tmp_path):
    # scratch's 4th trial failed (no score); spt is ahead with one trial, behind with two or more.
    state = StudyState(searches={"search-scratch": _searched(0.6, 0.9, 0.7, None),
                                 "search-spt": _searched(0.8, 0.82, 0.81)})
    rows = [_row("scratch", "scratch", 1000, 0.8), _row("spt", "spt", 1000, 0.85)]
    add_deltas(rows)
    summary = results_document(plan, StudyState(searches={"pretrain": _pretrained()}), rows)["summary"]
    doc = expected_max_document(plan, state, summary)
    assert doc["variants"]["scratch"] == {"n_trials": 3, "by_n": pytest.approx([0.7333333, 0.8333333, 0.9])}
    assert doc["variants"]["spt"]["by_n"][0] == pytest.approx(0.81) and doc["variants"]["spt"]["n_trials"] == 3
    assert doc["order_vs"] == {"spt": "scratch"} and doc["order_flips_at"] == {"spt": [2]}
    assert doc["trials_without_score"] == {"scratch": 1, "spt": 0} and "stopped early" in doc["score"]
    write_results(tmp_path, {"study": "s", "task": "digits", "summary": summary, "expected_max": doc}, rows)
    assert json.loads((tmp_path / "results.json").read_text())["expected_max"] == json.loads(json.dumps(doc))
    md = (tmp_path / "results.md").read_text()
    assert "| trials | scratch | spt |" in md and "| 1 | 0.7333 | 0.8100 |" in md and "| 3 | 0.9000 | 0.8200 |" in md
    assert "spt vs scratch: the order flips at n = 2 trials." in md and "no validation score: scratch 1." in md
    saved = json.loads(json.dumps(asdict(state)))  # study_state.json keeps the scores for a resume
    assert StudyState.from_json(saved).searches["search-scratch"].trial_scores == [0.6, 0.9, 0.7, None]
    # A state file from before the scores were recorded: no curve, no error.
    assert expected_max_document(plan, StudyState(searches={"search-spt": _pretrained()}), summary)["variants"] == {}


def test_a_campaigns_results_merge_its_studies_rows_tagged_with_study_and_overrides(tmp_path):
    members = [CampaignStudy("a", Path("a.yaml"), ("seed=1",)), CampaignStudy("b", Path("b.yaml"), ())]
    for member, acc in zip(members, (0.9, 0.8), strict=True):
        (tmp_path / member.name).mkdir()
        write_results(tmp_path / member.name, {"study": member.name, "task": "digits", "summary": {}},
                      [_row("spt", "spt", 1000, acc)])
    path = merge_results(tmp_path, members, "mini")
    merged = json.loads(path.read_text())
    assert path == tmp_path / "results.json" and merged["campaign"] == "mini"
    assert sorted(merged["studies"]) == ["a", "b"] and "rows" not in merged["studies"]["a"]
    assert merged["studies"]["a"]["study"] == "a" and merged["studies"]["b"]["task"] == "digits"
    assert [(r["study"], r["overrides"], r["test_acc"]) for r in merged["rows"]] == [("a", ["seed=1"], 0.9),
                                                                                     ("b", [], 0.8)]
    assert list(merged["rows"][0])[:len(ROW_KEYS)] == ROW_KEYS
