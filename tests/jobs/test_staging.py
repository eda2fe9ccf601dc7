"""sptune.jobs.staging: a study made ready to submit as a Ray job, without Ray: the request checked, the spec and the
local files it names by a relative path staged so that the job, run in their mirror, finds them as they are here.
Submitting to a real cluster: tests/e2e/test_jobs.py."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from sptune.errors import SpecError
from sptune.jobs import staging
from sptune.jobs.staging import JobRequest, stage

SPEC = """
name: Staged Study
task: {name: digits}
model: {d_model: 32, n_layers: 1, n_heads: 4, d_ff: 64}
pretrain:
  checkpoint: CHECKPOINT
  search: {lr: {type: grid, values: [1.0e-3]}, batch_size: {type: choice, values: [32]}}
finetune: {epochs: 1, num_samples: 1}
variants:
  spt: {search: {lr: {type: grid, values: [1.0e-3]}, batch_size: {type: choice, values: [32]}}}
scheduler: {type: fifo}
"""


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """The directory the user submits from: a spec naming its SPT checkpoint by a relative path."""
    home = tmp_path / "home"
    (home / "ckpt").mkdir(parents=True)
    (home / "ckpt" / "spt.pt").write_bytes(b"weights")
    (home / "study.yaml").write_text(SPEC.replace("CHECKPOINT", "ckpt/spt.pt"))
    monkeypatch.chdir(home)
    return home


def _request(**given) -> JobRequest:
    return JobRequest(Path("study.yaml"), **{"output": "/shared/runs/x", "spec_only": True, **given})


def test_the_job_runs_in_a_mirror_of_this_directory_where_relative_paths_resolve(here, tmp_path):
    job = stage(_request(overrides=("seed=3",), tracking_uri="http://mlflow:5000", resume=True), tmp_path / "stage")
    mkdir, cd, run = job.entrypoint.split(" && ")
    mirror = job.working_dir / shlex.split(cd)[1]
    assert shlex.split(mkdir)[2] == shlex.split(cd)[1] and mirror == tmp_path / "stage" / "fs" / here.relative_to("/")
    assert (mirror / "ckpt" / "spt.pt").read_bytes() == b"weights"  # the checkpoint where the spec says, from there
    args = shlex.split(run)
    assert args[:4] == ["python", "-m", "sptune.sweep", "study.yaml"] and (mirror / args[3]).is_file()
    assert args[4:] == ["--set", "seed=3", "--output", "/shared/runs/x", "--tracking-uri", "http://mlflow:5000",
                        "--resume"]
    assert set(job.carried) == {here / "study.yaml", here / "ckpt" / "spt.pt"}
    assert job.submission_id.startswith("sptune-staged-study-")  # the spec's name, slugged


def test_the_metadata_finds_the_studys_runs_and_holds_no_password(here, tmp_path):
    job = stage(_request(), tmp_path / "stage")
    meta = job.metadata
    assert meta[staging.META_STUDY] == "Staged Study" and meta[staging.META_OUTPUT] == "/shared/runs/x"
    assert meta[staging.META_URI] == "sqlite:////shared/runs/x/mlflow.db"  # the study's default store
    assert json.loads(meta[staging.META_EXPERIMENTS]) == ["sptune-Staged Study"]
    assert len(meta[staging.META_SPEC_HASH]) == 64
    other = stage(_request(overrides=("seed=4",)), tmp_path / "stage2")
    assert other.metadata[staging.META_SPEC_HASH] != meta[staging.META_SPEC_HASH]  # the hash is of the resolved spec


@pytest.mark.parametrize("output", [None, "runs/x"])
def test_a_relative_or_missing_output_is_refused(here, tmp_path, output):
    with pytest.raises(SpecError, match="--output .*absolute output directory"):
        stage(_request(output=output), tmp_path / "stage")
    assert not (tmp_path / "stage").exists()


@pytest.mark.parametrize("flag, field", [("--tracking-uri", "tracking_uri"), ("--optuna-storage", "optuna_storage")])
def test_a_password_in_a_url_is_refused_without_being_repeated(here, tmp_path, flag, field):
    with pytest.raises(SpecError) as caught:
        stage(_request(**{field: "postgresql://bob:hunter2@db:5432/x"}), tmp_path / "stage")
    assert str(caught.value).startswith(f"{flag} postgresql://bob:***@db") and "hunter2" not in str(caught.value)


def test_a_relative_file_that_is_not_here_is_refused(here, tmp_path):
    (here / "study.yaml").write_text(SPEC.replace("CHECKPOINT", "ckpt/missing.pt"))
    with pytest.raises(SpecError, match="pretrain.checkpoint ckpt/missing.pt: not found"):
        stage(_request(), tmp_path / "stage")


def test_files_too_large_to_upload_are_refused(here, tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "MAX_CARRIED_BYTES", 4)
    with pytest.raises(SpecError, match=r"the files this job would carry total .* MiB \(limit 0 MiB\)"):
        stage(_request(), tmp_path / "stage")
