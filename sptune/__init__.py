"""sptune: fair hyperparameter sweeps for self-pretraining studies on Ray Tune.

The Python API, imported on first use (`import sptune` stays cheap: no Ray, MLflow or torch):
`sptune.run(spec, ...)` runs a study and returns its `StudyResult`; `sptune.plan(spec, ...)` returns the dry run
as a `Plan`; `sptune.load_results(DIR)` reads a finished study's folder. Bad input raises `SpecError`,
`DataError` (both `SptuneError`s) before anything starts. See docs/guides/python_api.md.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> the module that defines it. `plan` is the sptune.plan package, callable (see sptune/plan/__init__.py).
_EXPORTS = {
    "run": "sptune.api.running",
    "load_results": "sptune.api.results",
    "StudyResult": "sptune.api.results",
    "CampaignResult": "sptune.api.results",
    "VariantResult": "sptune.api.results",
    "SeedResult": "sptune.api.results",
    "Pick": "sptune.api.results",
    "Delta": "sptune.api.results",
    "Sequential": "sptune.api.results",
    "Flag": "sptune.api.results",
    "MlflowRuns": "sptune.api.results",
    "OptunaStudies": "sptune.api.results",
    "StudyFiles": "sptune.api.results",
    "Plan": "sptune.api.planning",
    "StudyPlanData": "sptune.api.planning",
    "PlannedSearch": "sptune.api.planning",
    "DeviceCost": "sptune.api.planning",
    "SweepSpec": "sptune.spec",
    "SptuneError": "sptune.errors",
    "SpecError": "sptune.errors",
    "DataError": "sptune.errors",
    "RuntimeFailure": "sptune.errors",
    "StudyInterrupted": "sptune.errors",
}

__all__ = ["__version__", "plan", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name == "plan":
        return importlib.import_module("sptune.plan")
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # found once: later lookups skip this function
        return value
    raise AttributeError(f"module 'sptune' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
