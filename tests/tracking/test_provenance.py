"""sptune.tracking.provenance: what a study's numbers came from (the commit and whether it was dirty, the library
versions, the device, the command), on a real git repository made here."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from sptune.tracking import provenance
from sptune.tracking.provenance import git_commit, git_state, library_versions, parent_run_params


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path) -> Path:
    repo = tmp_path / "checkout"
    (repo / "pkg").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "pkg" / "code.py").write_text("x = 1\n")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "one")
    return repo


def test_the_commit_and_a_clean_tree(repo):
    assert git_state(repo / "pkg") == {"commit": _git(repo, "rev-parse", "HEAD"), "dirty": False}


def test_a_changed_tracked_file_is_dirty_and_an_untracked_one_is_not(repo):
    (repo / "pkg" / "notes.txt").write_text("scratch")  # untracked: not part of the code that ran
    assert git_state(repo)["dirty"] is False
    (repo / "pkg" / "code.py").write_text("x = 2\n")
    assert git_state(repo)["dirty"] is True
    assert git_commit(repo) == {"commit": _git(repo, "rev-parse", "HEAD"), "dirty": "true"}  # MLflow params: text


def test_outside_a_git_checkout_nothing_is_claimed(tmp_path):
    assert git_state(tmp_path) == {} and git_commit(tmp_path) == {}


def test_an_untracked_folder_inside_a_checkout_claims_no_commit(repo):
    installed = repo / ".venv" / "site-packages" / "sptune"  # a wheel installed into a venv inside a checkout
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("")
    assert git_state(installed) == {}
    assert git_state(repo / "pkg")["commit"]


def test_library_versions_are_the_installed_distributions():
    versions = library_versions()
    assert versions["python"] == platform.python_version()
    assert versions["torch"] == metadata.version("torch") and versions["optuna"] == metadata.version("optuna")
    assert set(versions) == {"python", *provenance.LIBRARIES}


def test_a_library_installed_under_another_distribution_name_is_found(monkeypatch):
    def version(dist: str) -> str:
        if dist == "mlflow-skinny":
            return "9.9.9"
        raise metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(provenance.metadata, "version", version)
    assert provenance._version("mlflow") == "9.9.9"
    assert provenance._version("numpy") == "not installed"


def test_the_parent_runs_parameters_say_how_to_reproduce_the_study():
    params = parent_run_params(Path("search_spaces/digits_quick.yaml"), ("seed=3", "finetune.epochs=2"))
    assert params["command.spec"] == "search_spaces/digits_quick.yaml"
    assert params["command.overrides"] == "seed=3 finetune.epochs=2"
    assert parent_run_params(Path("s.yaml"), ())["command.overrides"] == "-"
    assert params["version.torch"] == metadata.version("torch") and params["device"].startswith(("cpu: ", "cuda: "))
    assert {k for k in params if k.startswith("git.")} <= {"git.commit", "git.dirty"}
