"""Sequential re-runs in the stage ledger, without Tune: a comparison decided at the first look stops its variant's
seeds while the baseline goes on for an undecided one; the looks' decisions are the same whatever order trials end
in, and a study resumed from its state's selections re-derives them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from sptune.judging.ledger import Ledger, StageReleased, StageSelected
from sptune.judging.sequential import BETTER, UNDECIDED, WORSE, fixed_n
from sptune.judging.sequential_reruns import look_rule, sequential_document
from sptune.judging.sequential_results import mlflow_fields, sequential_lines
from sptune.plan.study_plan import build_plan
from sptune.spec import load_spec
from tests.judging.test_ledger import DIGITS, _stages, drive

TWIN = (
    "{kind: scratch, num_samples: 2, search: {lr: {type: loguniform, low: 1.0e-4, high: 1.0e-2}, "
    "batch_size: {type: choice, values: [32]}}}"
)
SPEC = [
    "pretrain.num_samples=2",
    "variants.scratch.num_samples=2",
    "variants.spt.num_samples=2",
    "rerun_seeds=9",
    f"variants.twin={TWIN}",
    "rerun_sequential={min: 3, max: 9, step: 3, effect: 0.001, spending: pocock}",
]


@pytest.fixture(scope="module")
def plan(repo_root):
    return build_plan(load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", SPEC), DIGITS, cluster_cpus=2)


def scores(config: dict) -> tuple[float, bool]:
    """Searches: higher LRs better. Re-runs: spt stays at chance (decided worse at once); twin and scratch differ by
    seed noise only (never decided at an effect of 0.001)."""
    stage, seed = config["stage"], int(config.get("seed", 0))
    if not stage.startswith("rerun-"):
        return round(0.5 + 0.1 * math.log10(float(config["lr"]) / 1e-5), 6), False
    noise = 0.01 * math.sin(seed * (3.1 if "twin" in stage else 1.7))
    return (0.1 + noise if stage.startswith("rerun-spt") else 0.9 + noise), False


def _trained(ledger: Ledger) -> dict[str, list[int]]:
    """label -> the seeds each re-run stage trained."""
    return {
        label: [int(c["seed"]) for c in r.release.configs or []]
        for label, r in ledger.released.items()
        if label.startswith("rerun-")
    }


def test_a_decided_variant_stops_while_the_baseline_goes_on_for_an_undecided_one(plan):
    ledger = Ledger(_stages(plan), {}, {})
    events = drive(ledger, scores, order=1)
    seeds = plan.rerun_seeds()
    assert plan.rerun_looks() == (3, 6, 9)
    assert _trained(ledger) == {
        "rerun-scratch": seeds[:3],
        "rerun-spt": seeds[:3],
        "rerun-twin": seeds[:3],
        "rerun-scratch-look2": seeds[3:6],
        "rerun-spt-look2": [],
        "rerun-twin-look2": seeds[3:6],
        "rerun-scratch-look3": seeds[6:],
        "rerun-spt-look3": [],
        "rerun-twin-look3": seeds[6:],
    }
    assert not ledger.failed and not ledger.open()
    skipped = [e for e in events if isinstance(e, StageSelected) and e.label == "rerun-spt-look2"]
    assert skipped and skipped[0].pick.picked == [] and skipped[0].trial_scores == []
    rule = look_rule(plan)
    spt, twin = rule.status("spt", "scratch", ledger.selected), rule.status("twin", "scratch", ledger.selected)
    assert (spt.verdict, spt.look, spt.n) == (WORSE, 1, 3)
    assert (twin.verdict, twin.look, twin.n) == (UNDECIDED, 3, 9)


def test_a_later_look_waits_for_the_look_before_of_every_variant_it_is_compared_with(plan):
    stages = {s.label: s for s in _stages(plan)}
    assert set(stages["rerun-scratch-look2"].needs) >= {"rerun-scratch", "rerun-spt", "rerun-twin"}
    assert set(stages["rerun-spt-look3"].needs) >= {"rerun-spt-look2", "rerun-scratch-look2"}
    assert "rerun-twin-look2" not in stages["rerun-spt-look3"].needs
    assert sum(s.budget for s in stages.values() if s.label.startswith("rerun-")) == 3 * 9  # the worst case


def test_looks_decide_the_same_whatever_order_trials_end_in_and_after_a_resume(plan):
    runs = [_trained(drive_fresh(plan, order)) for order in range(3)]
    assert all(run == runs[0] for run in runs)
    straight = drive_fresh(plan, 0)
    partial = Ledger(_stages(plan), {}, {})
    drive(partial, scores, order=0, stop_after=len(straight.owner) - 4)  # stopped inside the last looks
    done = dict(partial.selected)
    left = [s for s in _stages(plan) if s.label not in done]
    resumed = Ledger(left, {}, done)
    drive(resumed, scores, order=2)
    assert {**_trained(partial), **_trained(resumed)} == _trained(straight)


def drive_fresh(plan, order: int) -> Ledger:
    ledger = Ledger(_stages(plan), {}, {})
    drive(ledger, scores, order=order, concurrent=1 + order)
    return ledger


def test_a_clear_gain_is_decided_better(plan):
    def spt_far_better(config: dict) -> tuple[float, bool]:
        value, diverged = scores(config)
        return (value + 0.85 if config["stage"].startswith("rerun-spt") else value), diverged

    ledger = Ledger(_stages(plan), {}, {})
    drive(ledger, spt_far_better, order=0)
    assert look_rule(plan).status("spt", "scratch", ledger.selected).verdict == BETTER
    assert not [e for e in ledger.take_events() if isinstance(e, StageReleased)]


def test_results_say_where_each_comparison_stopped_and_what_the_test_delta_decides(plan):
    """results.json's `sequential` from the looks' selections (validation) and per-seed test scores; results.md's
    table and the MLflow parent run's fields carry the same verdicts and seeds."""
    ledger = drive_fresh(plan, 0)
    rule = look_rule(plan)
    test = {v: rule.scores(v, ledger.selected) for v in ("scratch", "spt", "twin")}  # test Δ = validation Δ here
    test["twin"] = {s: x + 0.5 for s, x in test["twin"].items()}  # ... but twin far better on test
    doc = sequential_document(rule, ledger.selected, test)
    spt, twin = doc["comparisons"]["spt"], doc["comparisons"]["twin"]
    assert (spt["verdict"], spt["seeds_used"], spt["stopped"]["verdict"], spt["test"]["n"]) == (WORSE, 3, WORSE, 3)
    assert (twin["verdict"], twin["seeds_used"], twin["stopped"]["verdict"]) == (BETTER, 9, UNDECIDED)
    assert twin["test"]["interval"][0] < twin["test"]["t_interval"][0]
    assert twin["fixed_n"] == fixed_n(twin["test"]["sd"], 0.001, 0.05) > 9  # the effect 0.001 is far below the noise
    assert doc["design"]["looks"] == [3, 6, 9] and len(doc["design"]["z_boundaries"]) == 3
    md = "\n".join(sequential_lines(doc))
    assert "| spt | scratch | worse | 3 / 9 | worse at look 1 (3 seeds) |" in md
    assert "| twin | scratch | better | 9 / 9 | undecided at look 3 (9 seeds) |" in md
    params, metrics, tags = mlflow_fields(doc)
    assert params["rerun_sequential.looks"] == "3,6,9" and params["rerun_sequential.spending"] == "pocock"
    assert metrics["sequential.spt.seeds_used"] == 3 and metrics["sequential.twin.ci_low"] > 0
    assert tags == {
        "sequential.spt.verdict": WORSE,
        "sequential.spt.stopped": "worse at look 1 (3 seeds)",
        "sequential.twin.verdict": BETTER,
        "sequential.twin.stopped": "undecided at look 3 (9 seeds)",
    }


def test_a_later_look_whose_seeds_all_diverge_fails_nothing_and_the_comparison_goes_on(plan):
    def twin_diverges_at_look_2(config: dict) -> tuple[float, bool]:
        return scores(config)[0], config["stage"] == "rerun-twin-look2"

    ledger = Ledger(_stages(plan), {}, {})
    drive(ledger, twin_diverges_at_look_2, order=0)
    assert not ledger.failed and ledger.selected["rerun-twin-look2"] == []
    assert _trained(ledger)["rerun-twin-look3"] == plan.rerun_seeds()[6:]
    twin = look_rule(plan).status("twin", "scratch", ledger.selected)
    assert (twin.verdict, twin.n) == (UNDECIDED, 6)  # the 3 diverged seeds are left out of the pairs
