"""Sequential re-runs end to end on digits (CLI, real Ray Tune, MLflow, report): a variant stuck at chance (an LR
of 1e-7) is decided worse at the first look and gets no more seeds; a variant a hair from the baseline (its LR 7 %
lower) at an effect of 0.0001 stays undecided to the last look, and the baseline keeps getting seeds with it. Every
place a Δ is reported says so: results.json, results.md, the MLflow parent run and report.html."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from sptune.sweep import main
from tests.helpers_tiny import PLAIN


def _variant(lr: str, kind: str = "") -> str:
    return f"{{{kind}search: {{lr: {{type: grid, values: [{lr}]}}, batch_size: {{type: grid, values: [32]}}}}}}"


VARIANTS = (f"{{scratch: {_variant('3.0e-3')}, twin: {_variant('2.8e-3', 'kind: scratch, ')}, "
            f"broken: {_variant('1.0e-7', 'kind: scratch, ')}}}")
SEQUENTIAL = "{min: 3, max: 4, step: 1, effect: 0.0001, alpha: 0.01, spending: pocock}"
TINY = ["--set", "pretrain=null", "--set", "finetune.epochs=3", "--set", "model.n_layers=1",
        "--set", "scheduler.type=fifo", "--set", "rerun_seeds=1", "--set", f"variants={VARIANTS}",
        "--set", f"rerun_sequential={SEQUENTIAL}", *PLAIN]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def study(ray_session, repo_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("sequential") / "digits"
    spec = str(Path(repo_root) / "search_spaces" / "digits_quick.yaml")
    assert main([spec, "--output", str(out), *TINY]) == 0
    return out, json.loads((out / "results.json").read_text())


def test_a_variant_at_chance_is_decided_at_the_first_look_and_a_near_twin_goes_to_max(study):
    _, results = study
    seeds = sorted({r["seed"] for r in results["rows"]})
    tested = {v: sorted(r["seed"] for r in results["rows"] if r["variant"] == v) for v in ("scratch", "twin", "broken")}
    assert tested == {"scratch": seeds, "twin": seeds, "broken": seeds[:3]} and seeds == [1000, 1001, 1002, 1003]
    broken, twin = (results["sequential"]["comparisons"][v] for v in ("broken", "twin"))
    assert (broken["stopped"]["verdict"], broken["stopped"]["look"], broken["seeds_used"]) == ("worse", 1, 3)
    assert broken["verdict"] == "worse" and broken["test"]["interval"][1] < 0
    assert (twin["stopped"]["verdict"], twin["stopped"]["look"], twin["seeds_used"]) == ("undecided", 2, 4)
    assert twin["max_seeds"] == 4 and twin["vs"] == "scratch"
    # The sequential interval is wider than the plain t-interval it stands beside, by its boundary.
    low, high = twin["test"]["interval"]
    t_low, t_high = twin["test"]["t_interval"]
    assert low < t_low and t_high < high and twin["test"]["boundary"] > 0
    assert results["summary"]["broken"]["n_attempted"] == 3 and results["summary"]["twin"]["n_attempted"] == 4
    assert results["summary"]["twin"]["sequential"] == twin
    assert results["sequential"]["design"]["looks"] == [3, 4]


def test_results_md_mlflow_and_the_report_say_the_verdicts(study):
    out, results = study
    md = (out / "results.md").read_text()
    assert "Sequential re-runs (looks after 3, 4 seeds" in md
    assert "| broken | scratch | worse | 3 / 4 | worse at look 1 (3 seeds) |" in md
    assert "| twin | scratch | " in md and "undecided at look 2 (4 seeds)" in md
    client = MlflowClient(results["mlflow"]["tracking_uri"])
    parent = client.get_run(results["mlflow"]["parent_run_id"]).data
    assert parent.params["rerun_sequential.looks"] == "3,4"
    assert parent.tags["sequential.broken.verdict"] == "worse"
    assert parent.tags["sequential.twin.stopped"] == "undecided at look 2 (4 seeds)"
    assert parent.metrics["sequential.twin.seeds_used"] == 4 and parent.metrics["sequential.broken.seeds_used"] == 3
    page = (out / "report.html").read_text()
    assert "worse: 3 of 4 seeds (stopped worse at look 1 (3 seeds) on validation)" in page
    assert "Sequential re-runs: seeds are added in groups" in page
