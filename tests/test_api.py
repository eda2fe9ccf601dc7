"""The Python API without a study: `import sptune` stays cheap, `load_results` on committed results (read-only
fixtures under docs/results/), `plan` as data and as the CLI's --dry-run text, refusals as the CLI's exceptions."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sptune
import sptune.plan.cost as plan_cost
from sptune.errors import DataError, SpecError
from sptune.judging.stats import Summary
from sptune.spec import load_spec, read_yaml
from sptune.sweep import main as sweep

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
DIGITS = ROOT / "search_spaces" / "digits_quick.yaml"


def test_import_sptune_loads_no_heavy_library_and_exports_lazily(monkeypatch):
    code = (
        "import sys, sptune; heavy = ('ray', 'mlflow', 'torch', 'optuna', 'pydantic', 'numpy', 'sptune.api'); "
        "print([m for m in sys.modules if m.split('.')[0] in heavy or m == 'sptune.api'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
    assert sptune.SpecError is SpecError and sptune.DataError is DataError
    assert callable(sptune.plan) and callable(sptune.run) and callable(sptune.load_results)
    assert sptune.plan.cost is plan_cost  # the package behind `sptune.plan` still holds its modules
    monkeypatch.setattr("sptune.plan.cost.DEVICES", ("cpu",))  # and a dotted path through it still resolves
    assert plan_cost.DEVICES == ("cpu",)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        sptune.nothing  # noqa: B018


def test_load_results_types_every_row_and_summary_of_a_committed_study():
    doc = json.loads((RESULTS / "digits_quick" / "results.json").read_text())
    result = sptune.load_results(RESULTS / "digits_quick")
    assert isinstance(result, sptune.StudyResult)
    assert (result.name, result.task, result.baseline, result.names) == (
        "digits_quick",
        "digits",
        "scratch",
        ("scratch", "spt"),
    )
    spt = result.variant("spt")
    rows = [r for r in doc["rows"] if r["variant"] == "spt"]
    assert [(s.seed, s.test_acc, s.val_acc, s.delta_test) for s in spt.seeds] == [
        (r["seed"], r["test_acc"], r["val_acc"], r["delta_test_vs_baseline"]) for r in rows
    ]
    assert spt.delta.vs == "scratch" and spt.delta.test == Summary.from_fields(doc["summary"]["spt"], "delta")
    assert spt.delta.test.interval == tuple(doc["summary"]["spt"]["delta_ci95"])
    assert result.variant("scratch").delta is None
    # Re-run per seed, and no `picks` in this older results.json: the config is known, the pick's trial is not.
    assert spt.pick == sptune.Pick({"lr": rows[0]["lr"], "batch_size": rows[0]["batch_size"]}, None, None, None, None)
    assert result.mlflow == sptune.MlflowRuns(
        doc["mlflow"]["tracking_uri"], "1", "sptune-digits_quick", doc["mlflow"]["parent_run_id"]
    )
    assert result.flags is None and result.optuna is None  # the committed copy has no flags.json, no optuna.json
    assert result.files.results_md == RESULTS / "digits_quick" / "results.md"
    with pytest.raises(KeyError, match="it has scratch, spt"):
        result.variant("nope")


def test_load_results_reads_sequential_verdicts():
    result = sptune.load_results(RESULTS / "cifar16_sequential")
    doc = json.loads((RESULTS / "cifar16_sequential" / "results.json").read_text())
    for name, c in doc["sequential"]["comparisons"].items():
        seq = result.variant(name).sequential
        assert (seq.vs, seq.verdict, seq.seeds_used, seq.stopped_look) == (
            c["vs"],
            c["verdict"],
            c["seeds_used"],
            c["stopped"]["look"],
        )
        assert seq.test_interval == tuple(c["test"]["interval"])
    assert result.variant("scratch").sequential is None


def test_load_results_of_a_campaign_gives_each_study_its_rows():
    doc = json.loads((RESULTS / "data_scale" / "results.json").read_text())
    campaign = sptune.load_results(RESULTS / "data_scale")
    assert isinstance(campaign, sptune.CampaignResult)
    assert [s.files.output_dir.name for s in campaign.studies] == list(doc["studies"])
    for study in campaign.studies:
        mine = [r for r in doc["rows"] if r["study"] == study.files.output_dir.name]
        assert sum(len(v.seeds) for v in study.variants) == len(mine) > 0


def test_load_results_reads_picks_flags_and_optuna_studies(tmp_path):
    shutil.copy(RESULTS / "digits_quick" / "results.json", tmp_path / "results.json")
    doc = json.loads((tmp_path / "results.json").read_text())
    doc["picks"] = {
        "spt": {
            "stage": "candidates-spt",
            "trial_id": "abc123",
            "epoch": 7,
            "config": {"lr": 0.001, "batch_size": 32},
            "metric": "val_acc",
            "score": 0.9,
        }
    }
    (tmp_path / "results.json").write_text(json.dumps(doc))
    flags = [{"key": "lr-edge", "title": "t", "level": "warn", "summary": "s", "items": ["a", "b"], "table": None}]
    (tmp_path / "flags.json").write_text(json.dumps(flags))
    (tmp_path / "optuna.json").write_text(json.dumps({"storage": None, "studies": {"spt": "digits_quick/spt"}}))
    result = sptune.load_results(tmp_path)
    assert result.variant("spt").pick == sptune.Pick(
        {"lr": 0.001, "batch_size": 32}, "abc123", "candidates-spt", 7, 0.9
    )
    assert result.flags == (sptune.Flag("lr-edge", "warn", "t", "s", ("a", "b")),)
    assert result.optuna == sptune.OptunaStudies(
        f"sqlite:///{tmp_path.resolve() / 'optuna.db'}", {"spt": "digits_quick/spt"}
    )
    assert result == sptune.load_results(tmp_path)  # frozen values: equal when read twice


def test_load_results_of_a_folder_whose_spec_is_an_alias_bomb_returns_at_once_without_its_experiment(tmp_path):
    shutil.copytree(RESULTS / "digits_quick", tmp_path / "study")
    study = tmp_path / "study"
    assert sptune.load_results(study).mlflow.experiment_name == "sptune-digits_quick"
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    (study / "spec.yaml").write_text("name: bomb\n" + "\n".join(levels) + "\n")
    result = sptune.load_results(study)  # a walk of the expanded tree would take hours; the bound refuses it
    assert result.mlflow.experiment_name is None and result.name == "digits_quick"


def test_load_results_refuses_a_folder_without_results(tmp_path):
    with pytest.raises(DataError, match="no results.json here"):
        sptune.load_results(tmp_path)
    (tmp_path / "results.json").write_text("{not json")
    with pytest.raises(DataError, match="cannot be read as JSON"):
        sptune.load_results(tmp_path)


@pytest.fixture(scope="module")
def digits_plan() -> sptune.Plan:
    return sptune.plan(DIGITS)


def test_plan_is_the_dry_run_as_data_and_its_text_is_what_the_cli_prints(digits_plan, capsys):
    assert sweep([str(DIGITS), "--dry-run"]) == 0
    assert capsys.readouterr().out == digits_plan.text + "\n"
    (study,) = digits_plan.studies
    assert (study.name, study.task, study.campaign_study) == ("digits_quick", "digits", None)
    labels = [s.label for s in study.searches]
    assert labels == ["pretrain", "search-scratch", "search-spt"]
    searched = sum(s.trials for s in study.searches)
    assert study.total_trials == searched + study.selection_trials + study.rerun_trials
    assert f"Total: {study.total_trials} trials" in study.text
    assert f"at most {study.total_trial_epochs} trial-epochs" in study.text
    assert f"Cost: {study.pretrain_epochs + study.finetune_epochs} trial-epochs" in study.text
    assert [c.device for c in study.costs] == ["cpu", "gpu"]
    assert all(c.text in study.text for c in study.costs)
    spt = study.searches[2]
    assert (spt.variant, spt.kind, spt.init_from, spt.metric, spt.mode) == (
        "spt",
        "spt",
        "pretrain",
        "best_val_acc",
        "max",
    )
    assert set(spt.space) == {"lr", "batch_size"}


def test_plan_takes_a_mapping_or_a_sweep_spec_with_overrides_as_a_mapping(digits_plan):
    data = read_yaml(DIGITS)
    assert sptune.plan(data).studies == digits_plan.studies
    assert sptune.plan(load_spec(DIGITS)).studies == digits_plan.studies
    as_list = sptune.plan(DIGITS, overrides=["finetune.epochs=6", "rerun_seeds=2"])
    as_mapping = sptune.plan(data, overrides={"finetune.epochs": 6, "rerun_seeds": 2})
    assert as_list.studies == as_mapping.studies != digits_plan.studies
    assert as_list.studies[0].rerun_trials == 4  # two variants, two seeds each
    assert data == read_yaml(DIGITS)  # the caller's mapping is never changed


def test_refusals_raise_the_errors_the_cli_exits_2_on():
    with pytest.raises(SpecError, match="spec: is a int"):
        sptune.plan(3)
    with pytest.raises(SpecError, match=r"overrides: is one string"):
        sptune.plan(DIGITS, overrides="finetune.epochs=3")
    with pytest.raises(SpecError, match="finetune.epochs"):
        sptune.plan(DIGITS, overrides={"finetune.epochs": -1})
    with pytest.raises(SpecError, match="YAML cannot represent"):
        sptune.plan({**read_yaml(DIGITS), "name": object()})
    with pytest.raises(SpecError, match="spec file not found"):
        sptune.plan(ROOT / "no_such_spec.yaml")
