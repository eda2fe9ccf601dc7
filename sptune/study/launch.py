"""Runs what the preflight made ready: Ray up, one MLflow parent run per study, the study,
its report; a campaign runs its studies one after another and merges their results."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from sptune import storage
from sptune.output_files import (
    FLAGS_JSON,
    OPTUNA_DB,
    OPTUNA_RECORD,
    RAY_RESULTS,
    REPORT_HTML,
    RESULTS_JSON,
    RESULTS_MD,
    SPEC,
)
from sptune.plan.dry_run_text import describe
from sptune.report import build_report
from sptune.spec.reading import resolved_spec_text
from sptune.study import ray_session
from sptune.study.faults import LibraryLog, stopped
from sptune.study.interrupts import STOPS, check, stop_signals
from sptune.study.publish import merge_results
from sptune.study.ready_study import ReadyCampaign, ReadyStudy
from sptune.study.study import Study
from sptune.tracking.job_runs import JOB_TAG
from sptune.tracking.mlflow_tracker import Tracker, ui_command
from sptune.tracking.optuna_studies import OptunaTarget, default_url, redact, uses_optuna
from sptune.tracking.provenance import parent_run_params
from sptune.tuning.callbacks.terminal import show_library_output


def run(ready: ReadyStudy | ReadyCampaign, verbose: bool = False) -> Path:
    """Run a study or a campaign; returns its results.json. `verbose` (--verbose): the libraries' INFO output
    and Tune's tables too, not only sptune's own lines (`sptune.tuning.callbacks.terminal`)."""
    show_library_output(verbose)
    # One thread throughout: libraries imported lazily by two threads at once can deadlock on their module locks.
    first = ready if isinstance(ready, ReadyStudy) else ready.studies[0]
    output = ready.output_dir if isinstance(ready, ReadyStudy) else ready.root
    output.mkdir(parents=True, exist_ok=True)
    log = LibraryLog(output)
    log.stores = _stores(first)
    # SIGINT / SIGTERM: StudyInterrupted; a write fault or an outage: StudyStopped; `sptune.sweep` reports either.
    with stop_signals(output), log.kept():
        try:
            tracker = _tracker(first)
            ray_session.ensure_running(verbose)
            results = run_study(ready, tracker) if isinstance(ready, ReadyStudy) else _run_campaign(ready, tracker)
        except Exception as err:
            stop = stopped(err, log)
            if stop is None:
                raise
            raise stop from err
        finally:
            _release_quietly()
        check()
        write_report(results.parent, ready.storage if isinstance(ready, ReadyStudy) else None)
    return results


def _stores(ready: ReadyStudy) -> dict[str, str]:
    """Words of a database error -> the store it names (SQLite's errors name no file)."""
    tracking = ready.tracking.uri
    optuna = redact(ready.optuna_storage) if ready.optuna_storage else str(ready.output_dir / OPTUNA_DB)
    # First match wins: the database drivers' and MLflow's client's own words before SQL table names.
    return {"psycopg": optuna, "postgres": optuna, "api request": tracking, "mlflow": tracking,
            "insert into trial": optuna, "update trial": optuna, "into studies": optuna,
            "metrics": tracking, "into runs": tracking, "update runs": tracking, "tags": tracking,
            "params": tracking, "": str(ready.output_dir)}


def _release_quietly() -> None:
    """Ray stopped; after a fault its own shutdown may fail to write too (its messages are in the log)."""
    try:
        ray_session.release()
    except Exception:  # noqa: BLE001 - the fault that ended the run is what is reported
        pass


def _run_campaign(campaign: ReadyCampaign, first_tracker: Tracker) -> Path:
    for i, study in enumerate(campaign.studies):
        print(f"[sptune] campaign {campaign.name}: study {study.run_name}", flush=True)
        run_study(study, first_tracker if i == 0 else None)
        write_report(study.output_dir, study.storage)
    path = merge_results(campaign.root, list(campaign.members), campaign.name)
    print(f"Campaign results: {path}")
    return path


def _tracker(ready: ReadyStudy) -> Tracker:
    """The study's MLflow experiment (its store created if new)."""
    ready.output_dir.mkdir(parents=True, exist_ok=True)  # a SQLite store lives in the output directory
    target = ready.tracking
    # A remote --storage keeps MLflow's artifacts under its prefix too (only a new experiment's location is set).
    root = storage.mlflow_artifact_root(ready.storage) if storage.is_remote(ready.storage) else None
    return Tracker(target.uri, target.experiment, target.store_dir, root)


def run_study(ready: ReadyStudy, tracker: Tracker | None = None) -> Path:
    """One study into its output directory (Ray already running); returns its results.json."""
    out = ready.output_dir
    out.mkdir(parents=True, exist_ok=True)
    STOPS.study_dir = out  # what an interruption's paragraph reports as saved
    check()  # a campaign stopped between its studies
    (out / SPEC).write_text(resolved_spec_text(ready.spec))
    optuna = _optuna_target(ready)
    storage.DriverFileMirror(ready.storage, out).push(SPEC, OPTUNA_RECORD)
    target = ready.tracking
    tracker = tracker or _tracker(ready)
    print(describe(ready.plan), flush=True)
    try:
        tracker.start_parent(ready.run_name, _parent_params(ready), existing_run_id=_parent_run_id(ready),
                             tags=_job_tags())
        if ready.resume_state is None:
            _log_spec_files(tracker, ready)
        Study(ready.plan, ready.data, out, tracker, resume=ready.resume_state is not None, storage=ready.storage,
              spt_cache_dir=ready.spt_cache_dir, optuna=optuna).run()
        tracker.finish("FINISHED")
    except BaseException:
        tracker.finish("FAILED")
        raise
    print(f"Results: {out / RESULTS_MD} and {out / RESULTS_JSON}")
    print(f"MLflow UI: {ui_command(target.uri, target.store_dir, tracker.experiment_id)}")
    if any(uses_optuna(search) for search in ready.plan.searches):
        print(f"Optuna searches: {optuna.dashboard_command()}")
    return out / RESULTS_JSON


def _optuna_target(ready: ReadyStudy) -> OptunaTarget:
    """Where the study's Optuna searches go (the output dir's optuna.db unless --optuna-storage),
    recorded in OUTPUT/optuna.json (without a password) for the report."""
    url = ready.optuna_storage or default_url(ready.output_dir)
    target = OptunaTarget(url, ready.run_name, ready.plan.info.name)
    target.record(ready.output_dir, ready.plan.searches, default=ready.optuna_storage is None)
    return target


def _parent_params(ready: ReadyStudy) -> dict[str, str]:
    spec = ready.spec
    own = {"task": spec.task.name, "seed": str(spec.seed), "output_dir": str(ready.output_dir.resolve()),
           "optuna_storage": redact(ready.optuna_storage) if ready.optuna_storage else OPTUNA_DB,
           "storage": ready.storage or f"OUTPUT/{RAY_RESULTS}"}  # a URI without credentials (preflight refuses them)
    # How the reader mapped the user's data (e.g. class names -> ids), as in results.json's provenance.
    details = {f"task.{key}": json.dumps(value, default=str) for key, value in ready.data.details.items()}
    spec = ready.spec_path if ready.given_spec is None else GIVEN_MAPPING
    return {**own, **details, **parent_run_params(spec, ready.overrides)}


# What the parent run names as the spec given as a mapping (`sptune.run`), and the artifact holding it.
GIVEN_MAPPING = "(a mapping given to sptune.run)"
GIVEN_FILE = f"spec/given/{SPEC}"


def _log_spec_files(tracker: Tracker, ready: ReadyStudy) -> None:
    """The spec as given (the file, or the mapping, before --set) and as resolved (OUTPUT/spec.yaml)."""
    client, run_id = tracker.client, tracker.parent_run_id
    if ready.given_spec is None:
        client.log_artifact(run_id, str(ready.spec_path), artifact_path="spec/given")
    else:
        client.log_text(run_id, yaml.safe_dump(dict(ready.given_spec), sort_keys=False), GIVEN_FILE)
    client.log_artifact(run_id, str(ready.output_dir / SPEC), artifact_path="spec/resolved")


def _job_tags() -> dict[str, str]:
    """Run as a Ray job: the parent run names it, so `python -m sptune.jobs status` finds the run."""
    job = ray_session.job_submission_id()
    return {JOB_TAG: job} if job else {}


def _parent_run_id(ready: ReadyStudy) -> str | None:
    return ready.resume_state.parent_run_id if ready.resume_state else None


def write_report(out: Path, storage_uri: str | None = None) -> None:
    """The HTML fairness report next to the results (see sptune.report), copied under a remote storage.

    The study's results are already safe on disk and in MLflow: a report failure is
    reported, with the command to retry, but does not fail the study."""
    try:
        print(f"Report: {build_report(out)}")
        storage.DriverFileMirror(storage_uri, out).push(REPORT_HTML, FLAGS_JSON)
    except Exception as err:  # noqa: BLE001 - any report bug must not lose a finished study
        print(
            f"sptune: warning: the report could not be built ({type(err).__name__}: {err}); "
            f"retry with `python -m sptune.report {out}`",
            file=sys.stderr,
        )
