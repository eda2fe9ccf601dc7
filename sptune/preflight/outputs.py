"""Where a study writes: a fresh output directory, or the same study's directory on --resume."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from sptune.errors import SpecError
from sptune.optuna_storage import recorded_storage, redact
from sptune.spec import SweepSpec

if TYPE_CHECKING:  # the study package imports Ray Tune: only for the type here
    from sptune.study.state import StudyState


def resolved_spec_text(spec: SweepSpec) -> str:
    """The spec as resolved (defaults and overrides applied): saved as OUTPUT/spec.yaml, and
    compared on --resume so a study is never continued under a different spec."""
    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)


def default_output_dir(name: str) -> Path:
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def check_output_dir(out: Path, spec: SweepSpec, resume: bool, explicit: bool) -> StudyState | None:
    """None for a new study; the saved study state when resuming (a new study needs a fresh
    directory, --resume needs the same study's directory and the same spec)."""
    from sptune.study import read_state

    state = read_state(out) if out.exists() else None
    if not resume:
        if state is not None:
            raise SpecError(
                f"--output {out}", "this directory already holds a study",
                "pass --resume to continue it, or choose a new --output",
            )
        return None
    if not explicit or state is None:
        raise SpecError(
            f"--output {out}", "no interrupted study to resume here (no study_state.json)",
            "pass --output DIR of the study to continue",
        )
    if (out / "spec.yaml").read_text() != resolved_spec_text(spec):
        raise SpecError(
            f"{out / 'spec.yaml'}", "the spec differs from the one the study started with",
            "resume with the same spec and --set overrides, or start a new study in a new --output",
        )
    return state


def check_optuna_record(out: Path, given: str | None) -> None:
    """--resume continues the Optuna searches in the database they started in (OUTPUT/optuna.json)."""
    recorded = recorded_storage(out)
    if recorded == (redact(given) if given else None):
        return
    if recorded is None:
        raise SpecError(
            f"--optuna-storage {redact(given)}", "this study's Optuna searches are in its own optuna.db",
            "resume without --optuna-storage (and without SPTUNE_OPTUNA_STORAGE)",
        )
    raise SpecError(
        f"--optuna-storage {redact(given) if given else '(not given)'}",
        f"this study's Optuna searches are in {recorded}",
        "resume with --optuna-storage set to that database's URL (with its password, if it needs one)",
    )
