"""Runs what the preflight made ready: Ray up, one MLflow parent run per study, the study,
its report; a campaign runs its studies one after another and merges their results."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sptune import ray_session, storage
from sptune.optuna_storage import OptunaTarget, default_url, redact, uses_optuna
from sptune.plan import describe
from sptune.preflight import ReadyCampaign, ReadyStudy
from sptune.preflight.outputs import resolved_spec_text


def run(ready: ReadyStudy | ReadyCampaign) -> Path:
    """Run a study or a campaign; returns its results.json."""
    try:
        if isinstance(ready, ReadyStudy):
            # Opening (or creating) the MLflow store and starting Ray take seconds each and need
            # nothing from each other: the store is opened in a thread while Ray starts.
            with ThreadPoolExecutor(1, thread_name_prefix="sptune-mlflow") as pool:
                tracker = pool.submit(_tracker, ready)
                ray_session.ensure_running()
                results = run_study(ready, tracker.result())
        else:
            ray_session.ensure_running()
            results = _run_campaign(ready)
    finally:
        ray_session.release()
    write_report(results.parent, ready.storage if isinstance(ready, ReadyStudy) else None)
    return results


def _run_campaign(campaign: ReadyCampaign) -> Path:
    from sptune.campaign import merge_results

    for study in campaign.studies:
        print(f"[sptune] campaign {campaign.name}: study {study.run_name}", flush=True)
        run_study(study)
        write_report(study.output_dir, study.storage)
    path = merge_results(campaign.root, list(campaign.members), campaign.name)
    print(f"Campaign results: {path}")
    return path


def _tracker(ready: ReadyStudy) -> Any:
    """The study's MLflow experiment (its store created if new)."""
    from sptune.tracking import Tracker

    ready.output_dir.mkdir(parents=True, exist_ok=True)  # a SQLite store lives in the output directory
    target = ready.tracking
    # A remote --storage keeps MLflow's artifacts under its prefix too (only a new experiment's location is set).
    root = storage.mlflow_artifact_root(ready.storage) if storage.is_remote(ready.storage) else None
    return Tracker(target.uri, target.experiment, target.store_dir, root)


def run_study(ready: ReadyStudy, tracker: Any = None) -> Path:
    """One study into its output directory (Ray already running); returns its results.json."""
    from sptune.study import Study
    from sptune.tracking import ui_command

    out = ready.output_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.yaml").write_text(resolved_spec_text(ready.spec))
    optuna = _optuna_target(ready)
    storage.Mirror(ready.storage, out).push("spec.yaml", "optuna.json")
    target = ready.tracking
    tracker = tracker or _tracker(ready)
    print(describe(ready.plan), flush=True)
    try:
        tracker.start_parent(ready.run_name, _parent_params(ready), existing_run_id=_parent_run_id(ready))
        if ready.resume_state is None:
            _log_spec_files(tracker, ready)
        Study(ready.plan, ready.data, out, tracker, resume=ready.resume_state is not None, storage=ready.storage,
              spt_cache_dir=ready.spt_cache_dir, optuna=optuna).run()
        tracker.finish("FINISHED")
    except BaseException:
        tracker.finish("FAILED")
        raise
    print(f"Results: {out / 'results.md'} and {out / 'results.json'}")
    print(f"MLflow UI: {ui_command(target.uri, target.store_dir, tracker.experiment_id)}")
    if any(uses_optuna(search) for search in ready.plan.searches):
        print(f"Optuna searches: {optuna.dashboard_command()}")
    return out / "results.json"


def _optuna_target(ready: ReadyStudy) -> OptunaTarget:
    """Where the study's Optuna searches go (the output dir's optuna.db unless --optuna-storage),
    recorded in OUTPUT/optuna.json (without a password) for the report."""
    url = ready.optuna_storage or default_url(ready.output_dir)
    target = OptunaTarget(url, ready.run_name, ready.plan.info.name)
    target.record(ready.output_dir, ready.plan.searches, default=ready.optuna_storage is None)
    return target


def _parent_params(ready: ReadyStudy) -> dict[str, str]:
    from sptune.provenance import parent_run_params

    spec = ready.spec
    own = {"task": spec.task.name, "seed": str(spec.seed), "output_dir": str(ready.output_dir.resolve()),
           "optuna_storage": redact(ready.optuna_storage) if ready.optuna_storage else "optuna.db",
           "storage": ready.storage or "OUTPUT/ray_results"}  # a URI without credentials (preflight refuses them)
    return {**own, **parent_run_params(ready.spec_path, ready.overrides)}


def _log_spec_files(tracker, ready: ReadyStudy) -> None:
    """The spec as given (the file, before --set) and as resolved (OUTPUT/spec.yaml)."""
    client, run_id = tracker.client, tracker.parent_run_id
    client.log_artifact(run_id, str(ready.spec_path), artifact_path="spec/given")
    client.log_artifact(run_id, str(ready.output_dir / "spec.yaml"), artifact_path="spec/resolved")


def _parent_run_id(ready: ReadyStudy) -> str | None:
    return ready.resume_state.parent_run_id if ready.resume_state else None


def write_report(out: Path, storage_uri: str | None = None) -> None:
    """The HTML fairness report next to the results (see sptune.report), copied under a remote storage.

    The study's results are already safe on disk and in MLflow: a report failure is
    reported, with the command to retry, but does not fail the study."""
    from sptune.report import build_report

    try:
        print(f"Report: {build_report(out)}")
        storage.Mirror(storage_uri, out).push("report.html")
    except Exception as err:  # noqa: BLE001 - any report bug must not lose a finished study
        print(
            f"sptune: warning: the report could not be built ({type(err).__name__}: {err}); "
            f"retry with `python -m sptune.report {out}`",
            file=sys.stderr,
        )
