"""Where a study writes: a fresh output directory, or the same study's directory on --resume."""

from __future__ import annotations

import time
from pathlib import Path

from sptune import storage
from sptune.errors import SpecError
from sptune.output_files import OPTUNA_DB, SPEC, STATE
from sptune.spec import SweepSpec
from sptune.spec.reading import resolved_spec_text
from sptune.study.state import StudyState, read_state
from sptune.tracking.optuna_studies import recorded_storage, redact


def default_output_dir(name: str) -> Path:
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def check_output_dir(out: Path, spec: SweepSpec, resume: bool, explicit: bool) -> StudyState | None:
    """None for a new study; the saved study state when resuming (a new study needs a fresh
    directory, --resume needs the same study's directory and the same spec)."""
    state = None
    if out.exists() and not out.is_dir():
        raise SpecError(f"--output {out}", "is a file, not a folder", "choose a new --output folder (or drop it for "
                        "runs/<name>-<time>)")
    if out.exists():
        state = read_state(out)
    if not resume:
        if state is not None:
            raise SpecError(
                f"--output {out}", "this directory already holds a study",
                "pass --resume to continue it, or choose a new --output",
            )
        return None
    if not explicit:
        raise SpecError("--resume", "continues a study in its output folder, and none was given",
                        "add --output DIR of the interrupted study")
    if state is None:
        raise SpecError(
            f"--output {out}", "no interrupted study to resume here (no study_state.json)",
            "pass --output DIR of the study to continue",
        )
    if (out / SPEC).read_text() != resolved_spec_text(spec):
        raise SpecError(
            str(out / SPEC), "the spec differs from the one the study started with",
            "resume with the same spec and --set overrides, or start a new study in a new --output",
        )
    return state


def fetch_from_storage(out: Path, storage_uri: str | None, resume: bool) -> list[str]:
    """--resume with a remote --storage and an output directory that holds no study (a new machine, the
    old directory gone): the driver's files the storage keeps (study_state.json, spec.yaml, optuna.db ...)
    are fetched into it, and the resume goes on from them. Returns the names fetched."""
    if not resume or not storage.is_remote(storage_uri) or (out / STATE).exists():
        return []
    fetched = storage.DriverFileMirror(storage_uri, out).pull()
    if fetched and OPTUNA_DB not in fetched:  # the Tuner never ended: its last snapshot's copy
        # Here: they import Ray Tune, which no other refusal of the preflight waits for.
        from sptune.study.snapshot import read_bundle
        from sptune.tuning.tuner import STUDY_EXPERIMENT

        bundled = read_bundle(storage.join(storage_uri, STUDY_EXPERIMENT)) or {}
        if OPTUNA_DB in bundled:
            (out / OPTUNA_DB).write_bytes(bundled[OPTUNA_DB])
            fetched.append(OPTUNA_DB)
    if fetched:
        print(f"[sptune] --resume: fetched {', '.join(fetched)} from --storage into {out}", flush=True)
    return fetched


def check_tracking_store(state: StudyState | None) -> None:
    """A resumed study's MLflow store must still be there: a SQLite file that went with the old output
    directory would be created anew, empty, and the study's parent run would not exist in it."""
    uri = state.tracking_uri if state else None
    if not uri or not uri.startswith("sqlite:///"):
        return
    path = Path(uri.removeprefix("sqlite:///"))
    if not path.is_absolute():  # sqlite:////abs has one more slash; sqlite:///rel is relative
        path = Path.cwd() / path
    if not path.exists():
        raise SpecError(
            "--tracking-uri", f"the study was tracked in {uri}, which no longer exists (it lived in the old output "
            "directory), so its MLflow runs cannot be continued",
            "resume on the machine that has that file (its --output), or copy it back to that path; start studies "
            "meant to resume from --storage alone with --tracking-uri of an MLflow server or a SQLite file outside "
            "--output",
        )


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
