"""Sequential re-runs end to end on digits (CLI, real Ray Tune, MLflow, report): a clone of the baseline (the same
config: on one CPU machine the same seed trains the same weights, so every per-seed Δ is 0) is decided equivalent at
the first look and gets no more seeds; a variant a hair from the baseline (its LR 3 % lower) at an effect of 0.0001
stays undecided to the last look, and the baseline keeps getting seeds with it. Every place a Δ is reported says so:
results.json, results.md, the MLflow parent run and report.html.

(A variant stuck at chance against a baseline that learns would be decided worse at once, but in the few epochs an
end-to-end test affords this transformer learns digits to 0.1–0.7 depending on the seed: that Δ is undecided too.)"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from sptune.sweep import main
from tests.helpers_tiny import PLAIN
from tests.tools.test_results_traceable import results_page, results_trace


def _variant(lr: str, kind: str = "") -> str:
    return f"{{{kind}search: {{lr: {{type: grid, values: [{lr}]}}, batch_size: {{type: grid, values: [32]}}}}}}"


VARIANTS = (
    f"{{scratch: {_variant('3.0e-3')}, clone: {_variant('3.0e-3', 'kind: scratch, ')}, "
    f"twin: {_variant('2.9e-3', 'kind: scratch, ')}}}"
)
SEQUENTIAL = "{min: 2, max: 3, step: 1, effect: 0.0001, alpha: 0.01, spending: pocock}"
TINY = [
    "--set",
    "pretrain=null",
    "--set",
    "finetune.epochs=2",
    "--set",
    "model.n_layers=1",
    "--set",
    "scheduler.type=fifo",
    "--set",
    "rerun_seeds=1",
    "--set",
    f"variants={VARIANTS}",
    "--set",
    f"rerun_sequential={SEQUENTIAL}",
    *PLAIN,
]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def study(ray_session, repo_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("sequential") / "digits"
    spec = str(Path(repo_root) / "search_spaces" / "digits_quick.yaml")
    assert main([spec, "--output", str(out), *TINY]) == 0
    return out, json.loads((out / "results.json").read_text())


def test_a_clone_is_decided_equivalent_at_the_first_look_and_a_near_twin_goes_to_max(study):
    _, results = study
    seeds = sorted({r["seed"] for r in results["rows"]})
    tested = {v: sorted(r["seed"] for r in results["rows"] if r["variant"] == v) for v in ("scratch", "twin", "clone")}
    assert tested == {"scratch": seeds, "twin": seeds, "clone": seeds[:2]} and seeds == [1000, 1001, 1002]
    clone, twin = (results["sequential"]["comparisons"][v] for v in ("clone", "twin"))
    assert (clone["stopped"]["verdict"], clone["stopped"]["look"], clone["seeds_used"]) == ("equivalent", 1, 2)
    assert clone["verdict"] == "equivalent" and clone["test"]["interval"] == [0.0, 0.0]
    assert (twin["stopped"]["verdict"], twin["stopped"]["look"], twin["seeds_used"]) == ("undecided", 2, 3)
    assert twin["max_seeds"] == 3 and twin["vs"] == "scratch" and twin["stopped"]["n"] == 3
    # The sequential interval is wider than the plain t-interval it stands beside, by its boundary.
    low, high = twin["test"]["interval"]
    t_low, t_high = twin["test"]["t_interval"]
    assert low < t_low and t_high < high and twin["test"]["boundary"] > 4.3  # t(0.975, 2) = 4.30
    assert results["summary"]["clone"]["n_attempted"] == 2 and results["summary"]["twin"]["n_attempted"] == 3
    assert results["summary"]["twin"]["sequential"] == twin
    assert results["sequential"]["design"]["looks"] == [2, 3]


def test_results_md_mlflow_and_the_report_say_the_verdicts(study):
    out, results = study
    md = (out / "results.md").read_text()
    assert "Sequential re-runs (looks after 2, 3 seeds" in md
    assert "| clone | scratch | equivalent | 2 / 3 | equivalent at look 1 (2 seeds) |" in md
    assert "| twin | scratch | " in md and "undecided at look 2 (3 seeds)" in md
    client = MlflowClient(results["mlflow"]["tracking_uri"])
    parent = client.get_run(results["mlflow"]["parent_run_id"]).data
    assert parent.params["rerun_sequential.looks"] == "2,3"
    assert parent.tags["sequential.clone.verdict"] == "equivalent"
    assert parent.tags["sequential.twin.stopped"] == "undecided at look 2 (3 seeds)"
    assert parent.metrics["sequential.twin.seeds_used"] == 3 and parent.metrics["sequential.clone.seeds_used"] == 2
    page = (out / "report.html").read_text()
    assert "equivalent: 2 of 3 seeds (stopped equivalent at look 1 (2 seeds) on validation)" in page
    assert "Sequential re-runs: seeds are added in groups" in page
    assert "equivalent: 2 of 3 seeds (stopped equivalent at look 1 (2 seeds) on validation)" in (
        out / "report.md").read_text()
    table = {r["variant"]: r for r in csv.DictReader((out / "results.csv").open())}
    assert (table["clone"]["delta_verdict"], table["clone"]["delta_seeds_used"]) == ("equivalent", "2")
    twin = results["sequential"]["comparisons"]["twin"]
    assert (table["twin"]["delta_verdict"], table["scratch"]["delta_verdict"]) == (twin["verdict"], "")


def test_the_results_page_says_each_comparisons_verdict_and_seeds(study, tmp_path):
    """tools/results_page.py: the study's section has the sequential table, and a claim row citing it says each
    comparison's verdict and seeds used; every number on the page is in the committed files."""
    out, _ = study
    docs, manifest = tmp_path / "docs", tmp_path / "m.yaml"
    results_page.collect(out, "sequential", docs)
    entry = {
        "id": "sequential",
        "title": "Sequential",
        "output": str(out),
        "command": "python -m sptune.sweep x",
        "papers": "No paper.",
    }
    claim = {"claim": "A clone is no better.", "study": "sequential", "verdict": "inconclusive", "evidence": "See."}
    manifest.write_text(json.dumps({"studies": [entry], "claims": [claim]}))
    results_page.main(["--manifest", str(manifest), "--docs", str(docs)])
    page = (docs / "results.md").read_text()
    assert (
        "| See. Sequential re-runs: clone vs scratch equivalent, 2 of 3 seeds (stopped equivalent at look 1 (2 "
        "seeds)); twin vs scratch undecided, 3 of 3 seeds (stopped undecided at look 2 (3 seeds)). |"
    ) in page
    assert "| clone | scratch | equivalent | 2 / 3 | equivalent at look 1 (2 seeds) |" in page
    assert results_trace.untraceable(page, results_page.load_manifest(manifest), docs) == []
