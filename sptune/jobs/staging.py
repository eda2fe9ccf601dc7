"""A study (or campaign) made ready to submit as a Ray job: checked here, its files staged.

Nothing here talks to Ray: the spec is checked exactly as `python -m sptune.sweep` checks it
(the same one-paragraph errors, exit 2), then the spec file, any campaign member specs and the
local files they name by a *relative* path are copied into a small staging directory that becomes
the job's `working_dir`. The cluster's nodes have sptune installed; only these files travel.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from sptune.errors import SpecError
from sptune.output_files import MLFLOW_DB
from sptune.preflight import RunOptions, prepare_inputs
from sptune.spec import SweepSpec, load_spec, read_yaml
from sptune.spec.campaign import expand, is_campaign
from sptune.spec.reading import resolved_spec_text
from sptune.tracking.optuna_studies import redact

# The job's working_dir is uploaded through the dashboard's HTTP API into the head's GCS: a
# language model or dataset belongs on shared storage, named by an absolute path, not in here.
MAX_CARRIED_BYTES = 100 * 1024**2
# Ray shows these on the job (`list`, `status`, the dashboard); they never hold a password.
META_STUDY, META_SPEC_HASH, META_URI = "sptune.study", "sptune.spec_sha256", "sptune.tracking_uri"
META_EXPERIMENTS, META_OUTPUT = "sptune.experiments", "sptune.output"
MIRROR = "fs"  # staged files keep their absolute path under WORKING_DIR/fs/


@dataclass(frozen=True)
class JobRequest:
    """What `python -m sptune.jobs submit` was asked for; paths as the user gave them."""

    spec_path: Path
    overrides: tuple[str, ...] = ()
    output: str | None = None  # a directory of the head (or shared storage): required
    data_dir: str | None = None
    tracking_uri: str | None = None
    storage: str | None = None
    optuna_storage: str | None = field(default=None, repr=False)
    resume: bool = False
    spec_only: bool = False  # check the spec without loading its data (the data lives on the cluster)


@dataclass(frozen=True)
class StagedJob:
    submission_id: str
    entrypoint: str
    working_dir: Path
    metadata: dict[str, str]
    carried: tuple[Path, ...]  # local files that travel with the job (absolute, as on this machine)


def checked_specs(request: JobRequest) -> list[SweepSpec]:
    """Every study's spec, checked as `sptune.sweep` checks it (data and plan too, unless spec_only)."""
    options = RunOptions(request.spec_path, request.overrides, data_dir=request.data_dir)
    if not request.spec_only:
        return [study.inputs.spec for study in prepare_inputs(options).studies]
    raw = read_yaml(request.spec_path)
    if not is_campaign(raw):
        return [load_spec(request.spec_path, list(request.overrides))]
    return [load_spec(m.spec_path, [*m.overrides, *request.overrides]) for m in expand(raw, request.spec_path)]


def stage(request: JobRequest, staging_root: Path) -> StagedJob:
    """Check the request and the spec, copy what the job needs under ``staging_root``."""
    _check_request(request)
    specs = checked_specs(request)
    spec_files = _spec_files(request.spec_path)
    named = _named_local_paths(request)
    carried = tuple(dict.fromkeys([*spec_files, *named]))
    _check_size(carried)
    for path in carried:
        target = staging_root / MIRROR / path.relative_to(path.anchor)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            shutil.copytree(path, target, dirs_exist_ok=True)
        else:
            shutil.copy2(path, target)
    name = read_yaml(request.spec_path).get("campaign") or specs[0].name
    submission_id = f"sptune-{_slug(str(name))}-{uuid.uuid4().hex[:8]}"
    return StagedJob(submission_id, _entrypoint(request), staging_root, _metadata(request, specs, str(name)), carried)


def _check_request(request: JobRequest) -> None:
    if not request.output or not os.path.isabs(request.output):
        raise SpecError(
            f"--output {request.output or '(not given)'}",
            "a job needs an absolute output directory on the head (or on shared storage): a relative one "
            "would land in the job's temporary working directory and be lost with it",
            "pass --output /ABSOLUTE/PATH, e.g. --output /mnt/shared/sptune/runs/NAME",
        )
    for flag, url in (("--tracking-uri", request.tracking_uri), ("--optuna-storage", request.optuna_storage)):
        if url and redact(url) != url:
            raise SpecError(
                f"{flag} {redact(url)}",
                "a password in this URL would be stored in the cluster's job table and shown by `list` and "
                "the Ray dashboard",
                "give it to the head's environment instead (MLFLOW_TRACKING_PASSWORD, PGPASSWORD or ~/.pgpass)",
            )


def _spec_files(spec_path: Path) -> list[Path]:
    """The spec file, and for a campaign every member spec it names."""
    raw = read_yaml(spec_path)
    files = [spec_path.resolve()]
    if is_campaign(raw):
        files += [m.spec_path for m in expand(raw, spec_path)]
    return files


def _named_local_paths(request: JobRequest) -> list[Path]:
    """Files a spec names by a relative path (a given SPT checkpoint, a language model): the job
    runs in the mirror of this directory, so they resolve there as they do here. Absolute paths
    are left as they are: they must exist on the cluster (shared storage)."""
    found = []
    for spec in checked_specs(JobRequest(request.spec_path, request.overrides, spec_only=True)):
        given = {"pretrain.checkpoint": spec.pretrain.checkpoint if spec.pretrain else None,
                 "language_model.path": spec.language_model.path if spec.language_model else None}
        for where, value in given.items():
            if not value or os.path.isabs(os.path.expanduser(value)):
                continue
            if not Path(value).exists():
                raise SpecError(f"{spec.name}: {where} {value}", f"not found in {Path.cwd()} (a relative path is "
                                "carried with the job from the directory you submit in)",
                                "submit from the directory it is relative to, or name it by an absolute path "
                                "that exists on the cluster")
            found.append(Path(value).resolve())
    return found


def _check_size(paths: tuple[Path, ...]) -> None:
    def size(path: Path) -> int:
        if path.is_file():
            return path.stat().st_size
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())

    total = sum(size(p) for p in paths if p.exists())
    if total > MAX_CARRIED_BYTES:
        biggest = max(paths, key=size)
        raise SpecError(
            str(biggest), f"the files this job would carry total {total / 1024**2:.0f} MiB (limit "
            f"{MAX_CARRIED_BYTES // 1024**2} MiB): they are uploaded through the Ray dashboard",
            "put large files on storage every node mounts and name them in the spec by their absolute path",
        )


def _entrypoint(request: JobRequest) -> str:
    """`cd` into the mirror of this directory, so every relative path means what it means here."""
    cwd = Path.cwd().resolve()
    spec = os.path.relpath(request.spec_path.resolve(), cwd)
    args = ["python", "-m", "sptune.sweep", spec]
    for assignment in request.overrides:
        args += ["--set", assignment]
    for flag, value in (("--output", request.output), ("--data-dir", request.data_dir),
                        ("--tracking-uri", request.tracking_uri), ("--storage", request.storage),
                        ("--optuna-storage", request.optuna_storage)):
        if value:
            args += [flag, value]
    if request.resume:
        args.append("--resume")
    mirror = Path(MIRROR) / cwd.relative_to(cwd.anchor)
    # The job's cwd mirrors this one: create it even when no staged file lives in it.
    return f"mkdir -p {shlex.quote(str(mirror))} && cd {shlex.quote(str(mirror))} && {shlex.join(args)}"


def _metadata(request: JobRequest, specs: list[SweepSpec], name: str) -> dict[str, str]:
    """What `status` needs to find the study's MLflow runs: the tracking URI, the experiments and
    (on the runs) the tag `sptune.ray_job_id` the driver sets to this job's submission id."""
    uri = request.tracking_uri or specs[0].tracking.uri or f"sqlite:///{Path(request.output) / MLFLOW_DB}"
    experiments = list(dict.fromkeys(s.tracking.experiment or f"sptune-{s.name}" for s in specs))
    digest = hashlib.sha256("".join(resolved_spec_text(s) for s in specs).encode()).hexdigest()
    return {META_STUDY: name, META_SPEC_HASH: digest, META_URI: redact(uri),
            META_EXPERIMENTS: json.dumps(experiments), META_OUTPUT: str(request.output)}


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_]+", "-", name.lower()).strip("-")[:40] or "study"
