"""The budget stated in the results: results.json's `budget` key (mode; per variant epochs, optimizer steps at the
selected batch size, trial-seconds; SPT's pretraining apart and in all), results.md's budget table, and the
report's compute flag naming the mode and how far one tested model's compute differs between variants."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from sptune.judging.budget_report import budget_document
from sptune.judging.results import write_results
from sptune.judging.selection import Selection, trial_totals
from sptune.plan.study_plan import build_plan
from sptune.report.flags import flag_compute
from sptune.report.records import ReportData
from sptune.spec import load_spec
from sptune.tasks.base import TaskInfo

BASE = Path(__file__).resolve().parents[2] / "search_spaces" / "digits_quick.yaml"
INFO = TaskInfo("digits", "continuous", 64, 10, levels=17)


def _selection(batch_size: int, seconds: float, iterations: int, steps: int, seed: int = 0) -> Selection:
    last = {"training_iteration": iterations, "time_total_s": seconds, "optimizer_steps": steps}
    return Selection(trial_id=f"t{seed}", config={"lr": 1e-3, "batch_size": batch_size, "seed": seed},
                     checkpoint_path="/c", metric="val_acc", score=0.9, epoch=iterations, metrics={}, n_trials=6,
                     n_diverged=0, n_failed=0, trial_epochs=40, trial_totals=trial_totals(last))


def _has(entry: dict, expected: dict) -> bool:
    return {k: entry.get(k) for k in expected} == expected


def _document(*overrides: str, selected: dict | None = None) -> dict:
    plan = build_plan(load_spec(BASE, list(overrides)), INFO, cluster_cpus=2, train_rows=1258)
    return budget_document(plan, selected if selected is not None else {
        "pretrain": [_selection(64, 30.0, 20, 400)],
        "search-scratch": [_selection(32, 99.0, 40, 1600)],
        "rerun-scratch": [_selection(32, 50.0, 40, 1600, 1000), _selection(32, 54.0, 40, 1600, 1001)],
        "search-spt": [_selection(64, 25.0, 20, 400)],
    })


def test_results_state_each_variants_epochs_steps_and_trial_seconds_under_total_matched():
    budget = _document("budget=total_matched")
    assert budget["mode"] == "total_matched"
    scratch, spt = budget["variants"]["scratch"], budget["variants"]["spt"]
    # scratch: 40 epochs (20 for pretraining's budget) at batch 32: 40 steps per epoch; its re-runs are tested.
    assert _has(scratch["finetune"], {"unit": "epochs", "epochs": 40, "added_for_pretraining": 20, "batch_size": 32,
                                        "steps_per_epoch": 40, "optimizer_steps": 1600, "trial_seconds": 52.0})
    assert scratch["pretraining"] is None and scratch["in_all"] == {"epochs": 40, "optimizer_steps": 1600,
                                                                    "trial_seconds": 52.0}
    # spt: 20 epochs at batch 64 (20 steps per epoch) after the selected pretraining's 20 at batch 64.
    assert spt["finetune"]["optimizer_steps"] == 400 and spt["pretraining"]["stage"] == "pretrain"
    assert spt["pretraining"]["optimizer_steps"] == 400 and spt["pretraining"]["trial_seconds"] == 30.0
    assert spt["in_all"] == {"epochs": 40, "optimizer_steps": 800, "trial_seconds": 55.0}


def test_a_steps_budget_states_the_epochs_its_steps_make_at_the_selected_batch():
    steps = ["finetune.epochs=null", "finetune.steps=400", "finetune.eval_every=40"]
    budget = _document(*steps, selected={"search-scratch": [_selection(64, 10.0, 10, 400)]})
    scratch = budget["variants"]["scratch"]["finetune"]
    assert _has(scratch, {"unit": "steps", "optimizer_steps": 400, "eval_every": 40, "steps_per_epoch": 20,
                          "epochs": 20.0, "epochs_trained": [20.0], "optimizer_steps_trained": [400]})
    # No pretraining record (reused, or not run): its epochs still stated, steps and seconds unknown.
    spt = budget["variants"]["spt"]
    assert spt["pretraining"]["epochs"] == 20 and spt["pretraining"]["optimizer_steps"] is None
    assert spt["in_all"]["trial_seconds"] is None
    assert budget["variants"]["scratch"]["selected_in"] == "evaluation rounds"


def test_results_md_has_the_budget_table(tmp_path):
    budget = _document("budget=total_matched")
    study = {"study": "s", "task": "digits", "summary": {}, "budget": budget}
    _, md = write_results(tmp_path, study, [])
    text = md.read_text()
    assert "Budget: total_matched (" in text
    assert "| scratch | 40 epochs · 1600 steps (batch 32) | — | 40 epochs · 1600 steps | 52 |" in text
    spt = "| spt | 20 epochs · 400 steps (batch 64) | 20 epochs · 400 steps (batch 64) | 40 epochs · 800 steps | 55 |"
    assert spt in text
    assert json.loads((tmp_path / "results.json").read_text())["budget"]["mode"] == "total_matched"


def test_the_compute_flag_names_the_mode_and_how_far_models_differ(tmp_path):
    data = ReportData("s", tmp_path, [], [], {}, [], "results.json", budget=_document())
    flag = flag_compute(data, ["digits"], ["scratch", "spt"], {"scratch": "scratch", "spt": "spt"})
    assert "Budget mode: finetune_matched." in flag.summary
    assert "(trial-seconds): scratch 52, spt 55; spt 1.06× scratch." in flag.summary
    assert flag.items == []  # finetune_matched differs by design; a total_matched gap is an item
    unequal = _document("budget=total_matched")
    unequal["variants"]["spt"]["in_all"] = {"trial_seconds": 120.0}
    flag = flag_compute(replace(data, budget=unequal), ["digits"], ["scratch", "spt"], {})
    assert flag.level == "warn" and "2.31× the other's compute" in flag.items[0]
