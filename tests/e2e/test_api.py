"""A tiny study through `sptune.run` with its spec as a mapping (no file), against the same spec run through the
command line: the returned StudyResult equals `load_results` of its folder, and both ways give the same results
(same seeds, same machine: the same numbers)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

import sptune
from sptune.spec import read_yaml
from sptune.spec.reading import apply_override
from sptune.study.launch import GIVEN_FILE, GIVEN_MAPPING
from sptune.sweep import main
from tests.helpers_results import assert_same_findings, results_of
from tests.helpers_tiny import PLAIN_PICK

# digits_quick at its smallest: one pretraining trial of one epoch, one trial of two epochs per variant, FIFO.
TINY = [
    "pretrain.epochs=1", "pretrain.num_samples=1", "finetune.epochs=2", "variants.scratch.num_samples=1",
    "variants.spt.num_samples=1", "scheduler.type=fifo", "scheduler.grace_period=1", "model.n_layers=1",
    "model.d_model=32", "model.d_ff=64", "rerun_seeds=1", *PLAIN_PICK,
]  # fmt: skip


@pytest.fixture(scope="module")
def studies(ray_session, repo_root, tmp_path_factory):
    spec = read_yaml(Path(repo_root) / "search_spaces" / "digits_quick.yaml")
    for assignment in TINY:
        apply_override(spec, assignment)
    root = tmp_path_factory.mktemp("api")
    result = sptune.run(spec, output=root / "api")
    (root / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    assert main([str(root / "spec.yaml"), "--output", str(root / "cli")]) == 0
    return result, root, spec


def test_run_returns_what_load_results_reads_from_its_folder(studies):
    result, root, _ = studies
    assert isinstance(result, sptune.StudyResult)
    assert result == sptune.load_results(root / "api")
    assert result.names == ("scratch", "spt") and result.variant("spt").delta.vs == "scratch"
    assert result.flags and {f.key for f in result.flags} >= {"lr-edge", "compute"}  # the report's flags.json
    assert result.files.report_html.is_file() and result.files.spec.is_file()
    for v in result.variants:
        (row,) = v.seeds  # no re-runs: the pick itself, tested
        assert (v.pick.trial_id, v.pick.epoch, v.pick.stage) == (row.trial_id, row.best_epoch, f"search-{v.name}")
        assert v.pick.config == {"lr": row.lr, "batch_size": row.batch_size}
    assert result.optuna is not None and set(result.optuna.studies) == {"pretrain", "scratch", "spt"}
    assert result.optuna.storage == f"sqlite:///{root / 'api' / 'optuna.db'}"


def test_a_spec_mapping_is_logged_as_given_and_snapshotted_as_resolved(studies):
    result, root, spec = studies
    client = MlflowClient(result.mlflow.tracking_uri)
    parent = client.get_run(result.mlflow.parent_run_id)
    assert client.get_experiment(result.mlflow.experiment_id).name == result.mlflow.experiment_name
    assert parent.data.params["command.spec"] == GIVEN_MAPPING
    given = Path(client.download_artifacts(parent.info.run_id, GIVEN_FILE, str(root / "given")))
    assert yaml.safe_load(given.read_text()) == spec
    assert (root / "api" / "spec.yaml").read_text() == (root / "cli" / "spec.yaml").read_text()


def test_the_api_and_the_command_line_give_the_same_results(studies):
    _, root, _ = studies
    assert_same_findings(results_of(root / "api"), results_of(root / "cli"))
