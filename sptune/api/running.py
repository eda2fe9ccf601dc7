"""`sptune.run(spec, ...)`: plan, check and run a study (or a campaign) as `python -m sptune.sweep` does, and return
what it found."""

from __future__ import annotations

from pathlib import Path

from sptune.api.arguments import Overrides, SpecLike, run_options
from sptune.api.loading import load_results
from sptune.api.planning import Plan, plan_of
from sptune.api.study_result import CampaignResult, StudyResult
from sptune.preflight import RunOptions, prepare


def run(
    spec: SpecLike,
    *,
    overrides: Overrides = (),
    output: str | Path | None = None,
    data_dir: str | Path | None = None,
    tracking_uri: str | None = None,
    address: str | None = None,
    storage: str | None = None,
    optuna_storage: str | None = None,
    resume: bool = False,
    verbose: bool = False,
) -> StudyResult | CampaignResult:
    """Run a study (or a campaign) to the end and return its result, equal to `load_results(output)` afterwards.

    spec: a spec or campaign file's path, its mapping (no file needed; a campaign's spec paths are then relative
    to the working directory), or a `SweepSpec`. The keywords are `python -m sptune.sweep`'s flags, with the same
    defaults: overrides (--set: "KEY.PATH=VALUE" strings, or a mapping {"finetune.epochs": 5}); output (--output,
    default runs/<name>-<time>); data_dir (--data-dir, default $SPTUNE_DATA_DIR); tracking_uri (--tracking-uri,
    default SQLite in the output folder); address (--address, default $RAY_ADDRESS or a local Ray instance, or the
    Ray this process already runs); storage (--storage, default OUTPUT/ray_results); optuna_storage
    (--optuna-storage, default $SPTUNE_OPTUNA_STORAGE or OUTPUT/optuna.db); resume (--resume, with output);
    verbose (--verbose: the libraries' INFO output and Tune's tables too).

    Bad input raises before anything starts: SpecError, DataError (SptuneError; the CLI's exit 2). A failure
    while running raises RuntimeFailure; SIGINT / SIGTERM raise StudyInterrupted (a BaseException), after which
    `run(..., output=SAME, resume=True)` continues."""
    options = run_options(spec, overrides, output, data_dir, tracking_uri, address, storage, optuna_storage, resume)
    return load_results(launch(options, verbose).parent)


def launch(options: RunOptions, verbose: bool = False) -> Path:
    """Check everything, then run; returns the results.json written."""
    ready = prepare(options)
    # Here: the launcher imports torch, Ray and MLflow, which a dry run and every refusal never wait for.
    from sptune.study.launch import run as launch_ready

    return launch_ready(ready, verbose=verbose)


def plan(
    spec: SpecLike,
    *,
    overrides: Overrides = (),
    output: str | Path | None = None,
    data_dir: str | Path | None = None,
    tracking_uri: str | None = None,
    address: str | None = None,
    storage: str | None = None,
    optuna_storage: str | None = None,
    resume: bool = False,
) -> Plan:
    """The dry run (`python -m sptune.sweep --dry-run`) as data: each study's searches, trial counts, trial-epochs
    and estimated cost, after every check a real run makes before it starts; nothing is started or written. The
    arguments are `run`'s; `Plan.text` is what the CLI prints. Bad input raises SpecError, DataError, ..."""
    return plan_of(
        run_options(spec, overrides, output, data_dir, tracking_uri, address, storage, optuna_storage, resume)
    )
