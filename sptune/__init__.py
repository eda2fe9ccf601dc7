"""sptune: fair hyperparameter sweeps for self-pretraining studies on Ray Tune.

The Python API, imported on first use (`import sptune` stays cheap: no Ray, MLflow or torch):
`sptune.run(spec, ...)` runs a study and returns its `StudyResult`; `sptune.plan(spec, ...)` returns the dry run
as a `Plan`; `sptune.load_results(DIR)` reads a finished study's folder. Bad input raises `SpecError`,
`DataError` (both `SptuneError`s) before anything starts. See docs/guides/python_api.md.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__version__ = "0.1.0"

# name -> the module that defines it.
_EXPORTS = {
    "run": "sptune.api.running",
    "load_results": "sptune.api.loading",
    "StudyResult": "sptune.api.study_result",
    "CampaignResult": "sptune.api.study_result",
    "VariantResult": "sptune.api.study_result",
    "SeedResult": "sptune.api.study_result",
    "Pick": "sptune.api.study_result",
    "Delta": "sptune.api.study_result",
    "Sequential": "sptune.api.study_result",
    "Flag": "sptune.api.study_result",
    "MlflowRuns": "sptune.api.study_result",
    "OptunaStudies": "sptune.api.study_result",
    "StudyFiles": "sptune.api.study_result",
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


class _Plan:
    """`sptune.plan(spec, ...)`: the dry run as data (`sptune.api.running.plan`). `sptune.plan` is also the name of
    the package of the study plan: its attributes are that package's (`sptune.plan.cost`, ...)."""

    def __call__(self, spec: Any, **options: Any) -> Any:
        return importlib.import_module("sptune.api.running").plan(spec, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(importlib.import_module("sptune.plan"), name)

    def __repr__(self) -> str:
        return "<function sptune.plan (and the package sptune.plan)>"


class _Sptune(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        # The import system binds each subpackage it loads on its parent: `sptune.plan` stays the API's dry run.
        if name == "plan" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


plan = _Plan()
sys.modules[__name__].__class__ = _Sptune


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # found once: later lookups skip this function
        return value
    raise AttributeError(f"module 'sptune' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
