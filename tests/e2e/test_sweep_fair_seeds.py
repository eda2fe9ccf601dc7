"""A 3-point-grid study with SPT re-pretrained per seed, end to end through the CLI, real Ray Tune
and MLflow: each grid point trained once, re-runs on seeds the search never used, each SPT re-run
starting from the checkpoint pretrained with its own seed, and the spread said as such."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from sptune.rules.seeds import PRETRAIN_SPREAD, SPREAD_TEXT
from sptune.sweep import main
from tests.helpers_tiny import PLAIN

LR_GRID = "{type: grid, values: [3.0e-4, 1.0e-3, 3.0e-3]}"
TINY = [
    "--set", "pretrain.epochs=2", "--set", "pretrain.num_samples=2", "--set", "finetune.epochs=2",
    "--set", "model.n_layers=1", "--set", "scheduler.grace_period=1",
    "--set", "rerun_seeds=2", "--set", "rerun_pretrain=true", *PLAIN,
    "--set", "model.d_model=32", "--set", "model.d_ff=64",  # half digits_quick's width: an epoch costs ~27 % less
]
GRID_SEARCH = [
    arg for variant in ("scratch", "spt")
    for assignment in (f"search.lr={LR_GRID}", "search.batch_size={type: grid, values: [64]}", "num_samples=null")
    for arg in ("--set", f"variants.{variant}.{assignment}")
]


@pytest.fixture(scope="module")
def study(ray_session, repo_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("fair") / "digits"
    spec = str(Path(repo_root) / "search_spaces" / "digits_quick.yaml")
    assert main([spec, "--output", str(out), *TINY, *GRID_SEARCH]) == 0
    results = json.loads((out / "results.json").read_text())
    client = MlflowClient(tracking_uri=results["mlflow"]["tracking_uri"])
    parent = results["mlflow"]["parent_run_id"]
    runs = [r for r in client.search_runs([results["mlflow"]["experiment_id"]], max_results=1000)
            if r.data.tags.get("mlflow.parentRunId") == parent]
    return out, results, runs


def _runs(runs, phase: str, variant: str) -> list:
    return [r for r in runs if (r.data.tags["sptune.phase"], r.data.tags["sptune.variant"]) == (phase, variant)]


def test_a_three_point_grid_runs_three_search_trials_per_variant(study):
    _, _, runs = study
    for variant in ("scratch", "spt"):
        searched = _runs(runs, "search", variant)
        assert sorted(float(r.data.params["lr"]) for r in searched) == [3.0e-4, 1.0e-3, 3.0e-3]
        assert {r.data.params["seed"] for r in searched} == {"0"}


def test_spt_is_re_pretrained_once_per_rerun_seed(study):
    out, results, runs = study
    assert sorted(p.name for p in (out / "ray_results").iterdir() if p.is_dir()) == ["study"]  # one Tuner
    repretrained = _runs(runs, "rerun", "masked")
    assert sorted(r.data.params["seed"] for r in repretrained) == ["1000", "1001"]
    checkpoints = {entry["config"]["seed"]: entry["checkpoint_path"] for entry in results["pretrain-rerun"]}
    assert sorted(checkpoints) == [1000, 1001]
    first, second = (Path(checkpoints[s]) / "state.pt" for s in (1000, 1001))
    assert first != second and first.read_bytes() != second.read_bytes()  # two different SPT checkpoints


def test_each_spt_rerun_starts_from_the_checkpoint_of_its_own_seed(study):
    _, results, runs = study
    checkpoints = {str(entry["config"]["seed"]): entry["checkpoint_path"] for entry in results["pretrain-rerun"]}
    spt_reruns = _runs(runs, "rerun", "spt")
    assert sorted(r.data.params["seed"] for r in spt_reruns) == ["1000", "1001"]
    for run in spt_reruns:
        assert run.data.params["spt_checkpoint"] == checkpoints[run.data.params["seed"]]
    assert all("spt_checkpoint" not in r.data.params for r in _runs(runs, "rerun", "scratch"))
    # The tested rows are the re-runs, on seeds no search trial used.
    assert sorted((r["variant"], r["seed"]) for r in results["rows"]) == [
        ("scratch", 1000), ("scratch", 1001), ("spt", 1000), ("spt", 1001)]


def test_results_and_report_say_the_spread_includes_pretraining(study):
    out, results, _ = study
    assert results["spread"] == PRETRAIN_SPREAD
    assert results["seeds"] == {"search": [0], "rerun": [1000, 1001]}
    assert SPREAD_TEXT[PRETRAIN_SPREAD] in (out / "results.md").read_text()
    assert SPREAD_TEXT[PRETRAIN_SPREAD] in (out / "report.md").read_text()


def test_the_report_counts_re_pretraining_as_pretraining_not_as_a_variant(study):
    from sptune.report.mlflow_runs import fetch_trials, rows_from_trials
    from sptune.report.records import PRETRAIN_RERUN

    out, results, _ = study
    client = MlflowClient(tracking_uri=results["mlflow"]["tracking_uri"])
    trials = fetch_trials(client, results["mlflow"]["parent_run_id"], "digits")
    repretrained = [t for t in trials if t.phase == PRETRAIN_RERUN]
    assert sorted(t.seed for t in repretrained) == ["1000", "1001"] and {t.objective for t in repretrained} == {
        "masked"}
    # Rebuilt from MLflow alone, the rows are the variants' re-runs only.
    assert sorted((r["variant"], r["seed"]) for r in rows_from_trials(trials)) == [
        ("scratch", "1000"), ("scratch", "1001"), ("spt", "1000"), ("spt", "1001")]
    assert "| masked |" not in (out / "report.md").read_text()
