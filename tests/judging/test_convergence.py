"""The convergence guard: a selected epoch in the last 10 % of its budget marks the row and the variant "may be
unconverged" (results.json, results.md) and raises a report flag; finetune.until_converged lets a trial train on
past its epochs while validation improves, by a rule of its own history only, counted in the budget tables."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from ray.tune.trainable import trainable as ray_trainable

from sptune.errors import SpecError
from sptune.judging.budget_report import budget_document, budget_table
from sptune.judging.convergence import may_be_unconverged, trial_done
from sptune.judging.results import ResultRow, markdown_table
from sptune.judging.selection import Selection
from sptune.plan.study_plan import build_plan
from sptune.report.flags import flag_unconverged
from sptune.report.records import ReportData
from sptune.rules.budgets import Budget, variant_budget
from sptune.spec import SweepSpec, load_spec
from sptune.tasks.base import TaskInfo
from tests.helpers_tiny import direct_trainable

BASE = Path(__file__).resolve().parents[2] / "search_spaces" / "digits_quick.yaml"
UNTIL = "finetune.until_converged={patience: 3, max_epochs: 40}"
CONSTANT = "training.schedule=constant"  # until_converged's schedule: a plateau then means convergence
INFO = TaskInfo("digits", "continuous", 64, 10, levels=17)


@pytest.mark.parametrize("best, epochs, flagged", [(18, 20, False), (19, 20, True), (20, 20, True), (4, 5, False),
                                                   (5, 5, True), (1, 1, True)])
def test_a_selected_epoch_in_the_last_tenth_may_be_unconverged(best, epochs, flagged):
    assert may_be_unconverged(best, Budget("epochs", epochs)) is flagged


def test_with_until_converged_only_a_trial_cut_at_max_epochs_still_improving_is_flagged():
    budget = Budget("epochs", 20, patience=3, max_rounds=40)
    assert not may_be_unconverged(19, budget)  # stopped by patience long before the cap
    assert not may_be_unconverged(37, budget)  # rounds 38-40 without improvement: converged by the rule
    assert may_be_unconverged(38, budget) and may_be_unconverged(40, budget)


def test_a_trial_is_done_by_its_own_history_alone():
    fixed, until = Budget("epochs", 20), Budget("epochs", 20, patience=3, max_rounds=40)
    assert [trial_done(r, 5, fixed) for r in (19, 20)] == [False, True]
    assert not trial_done(19, 2, until)  # never before the nominal epochs, however long since the best
    assert not trial_done(20, 19, until) and not trial_done(22, 20, until) and trial_done(23, 20, until)
    assert trial_done(40, 40, until)  # the cap


def test_until_converged_is_budgeted_planned_and_refused_where_it_cannot_apply():
    spec = load_spec(BASE, [UNTIL, CONSTANT, "budget=total_matched"])
    assert variant_budget(spec, "spt").max_iterations == 40
    assert variant_budget(spec, "scratch").max_iterations == 60  # total_matched adds pretraining to the cap too
    plan = build_plan(spec, INFO, cluster_cpus=2, train_rows=1258)
    assert {s.label: s.epochs for s in plan.variant_searches()} == {"search-scratch": 60, "search-spt": 40}
    for overrides, where in (
        ([UNTIL, CONSTANT, "finetune.epochs=null", "finetune.steps=400"], "finetune.until_converged"),
        ([CONSTANT, "finetune.until_converged={patience: 3, max_epochs: 10}"], "finetune.until_converged.max_epochs"),
        ([CONSTANT, "finetune.until_converged={patience: 0, max_epochs: 40}"], "finetune.until_converged.patience"),
        ([UNTIL], "training.schedule"),  # a cosine decay over max_epochs: an early stop is no convergence
    ):
        with pytest.raises(SpecError) as caught:
            load_spec(BASE, overrides)
        assert caught.value.where == where, str(caught.value)


def _row(variant: str, seed: int, epoch: int, flagged: bool) -> ResultRow:
    return ResultRow(variant=variant, kind=variant, task="digits", seed=seed, lr=1e-3, batch_size=32,
                     best_epoch=epoch, val_acc=0.9, test_acc=0.9, test_loss=0.3, trials=6, diverged=0, failed=0,
                     trial_epochs=60, trial_id="t", mlflow_run_id=None, checkpoint="/c", may_be_unconverged=flagged)


def test_results_mark_the_rows_and_variants_and_the_report_flags_them(tmp_path):
    rows = [_row("scratch", 1000, 20, True), _row("scratch", 1001, 12, False), _row("spt", 1000, 8, False)]
    md = markdown_table(rows)
    assert "| 20 ⚠ |" in md and "may be unconverged" in md and "scratch seed 1000 (epoch 20)" in md
    sel = [Selection("t", {"batch_size": 32}, "/c", "val_acc", 0.9, e, {}, 6, 0, 0, 60) for e in (20, 12)]
    budget = budget_document(build_plan(load_spec(BASE, []), INFO, cluster_cpus=2, train_rows=1258),
                             {"rerun-scratch": sel, "rerun-spt": sel[1:]})
    assert budget["variants"]["scratch"]["may_be_unconverged"] is True
    assert budget["variants"]["scratch"]["selected_epochs"] == [20, 12]
    assert budget["variants"]["spt"]["may_be_unconverged"] is False
    assert "| 20/12 ⚠ may be unconverged |" in budget_table(budget)
    data = ReportData("s", tmp_path, [{**r.__dict__} for r in rows], [], {}, [], "results.json")
    flag = flag_unconverged(data, ["digits"], ["scratch", "spt"])
    assert flag.level == "warn" and flag.items == ["scratch on digits: seed 1000: epoch 20."]
    data.rows = data.rows[1:]
    assert flag_unconverged(data, ["digits"], ["scratch", "spt"]).level == "ok"


# ---------------------------------------------------------------- a trial trained until converged

TINY = TaskInfo(name="px", input_kind="continuous", seq_len=16, num_classes=3, levels=17)
SEARCH = {"lr": {"type": "choice", "values": [3e-2]}, "batch_size": {"type": "choice", "values": [8]}}



UNTIL_SPEC = SweepSpec.model_validate({
    "name": "until", "task": {"name": "px"},
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "pooling": "mean"},
    "finetune": {"epochs": 2, "num_samples": 1, "until_converged": {"patience": 1, "max_epochs": 8}},
    "variants": {"scratch": {"search": SEARCH}}, "scheduler": {"type": "fifo"},
    "training": {"device": "cpu", "schedule": "constant"},
})


_Direct = direct_trainable(UNTIL_SPEC, TINY)


def test_a_trial_trains_past_its_epochs_until_validation_stops_improving(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_trainable, "DEFAULT_STORAGE_PATH", str(tmp_path / "ray_results"))
    before = torch.get_num_threads()
    trial = _Direct({"variant": "scratch", "lr": 3e-2, "batch_size": 8, "seed": 2})
    results = []
    while not results or not results[-1]["done"]:
        results.append(trial.train())
    trial.stop()
    torch.set_num_threads(before)
    last = results[-1]
    assert last["epoch"] > 2  # this seed improves at epoch 2: it trains on past the nominal epochs
    assert last["epoch"] == 8 or last["epoch"] - last["best_epoch"] >= 1
    assert not any(r["epoch"] >= 2 and r["epoch"] - r["best_epoch"] >= 1 for r in results[:-1])
    assert trial.loop.cfg.epochs == 8  # the LR schedule spans max_epochs: still > 0 past the nominal 2
