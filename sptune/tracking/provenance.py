"""What a study's numbers came from: the spec as given and as resolved, the code's commit, the
versions of the libraries that trained and selected, the device. Logged on the MLflow parent run
so a result can be traced (and rerun) without the machine it ran on."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

LIBRARIES = ("torch", "ray", "mlflow", "optuna", "numpy", "pydantic", "scikit-learn")
# The same import package from another distribution: mlflow-skinny is MLflow without its server, what the GPU
# machine gets (tools/device/bundle.py).
ALSO_DISTRIBUTED_AS = {"mlflow": ("mlflow-skinny",)}


def library_versions() -> dict[str, str]:
    return {"python": platform.python_version(), **{name: _version(name) for name in LIBRARIES}}


def _version(name: str) -> str:
    for dist in (name, *ALSO_DISTRIBUTED_AS.get(name, ())):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


def git_state(start: Path | None = None) -> dict[str, Any]:
    """The commit of the sptune checkout that runs and whether it has uncommitted changes
    (``{"commit": sha, "dirty": bool}``); empty when sptune is installed from a wheel, not a git checkout."""
    folder = start or Path(__file__).resolve().parent
    try:
        # Only files the checkout tracks are its code: a wheel installed into a .venv inside some other project's
        # checkout is not that project's commit.
        _git(folder, "ls-files", "--error-unmatch", ".")
        commit = _git(folder, "rev-parse", "HEAD")
        dirty = bool(_git(folder, "status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {"commit": commit, "dirty": dirty}


def git_commit(start: Path | None = None) -> dict[str, str]:
    """`git_state` as MLflow parameters (text: "true"/"false" for dirty)."""
    return {k: str(v).lower() if isinstance(v, bool) else v for k, v in git_state(start).items()}


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, check=True, timeout=10)
    return done.stdout.strip()


def device_description() -> str:
    if torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    return f"cpu: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"


def parent_run_params(spec_path: Path | str, overrides: tuple[str, ...]) -> dict[str, str]:
    """Parameters of the study's parent run that say how to reproduce it."""
    params = {f"version.{k}": v for k, v in library_versions().items()}
    params.update({f"git.{k}": v for k, v in git_commit().items()})
    params["device"] = device_description()
    params["command.spec"] = str(spec_path)
    params["command.overrides"] = " ".join(overrides) or "-"
    return params


def study_provenance() -> dict[str, Any]:
    """What results.json records of the code and machine that wrote it: the same facts as the parent
    run's parameters (`parent_run_params`), typed: ``{"git": {...}, "versions": {...}, "driver_device": ...}``
    (the driver's device: trials record theirs as ``optim.device_in_use``)."""
    return {"git": git_state(), "versions": library_versions(), "driver_device": device_description()}
