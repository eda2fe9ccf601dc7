"""Gathering one study's inputs (results.json, spec.yaml, MLflow child runs) into a ``ReportData``, from wherever
its MLflow tracking store is (checked before MLflow opens it)."""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from mlflow.tracking import MlflowClient

from sptune.judging.stats import DEFAULT_BASELINE
from sptune.judging.trivial_check import trivial_checks
from sptune.output_files import MLFLOW_DB, RESULTS_JSON, SPEC
from sptune.report.formatting import spread_sentence
from sptune.report.mlflow_runs import fetch_trials, results_from_artifact, rows_from_trials
from sptune.report.records import OBJECTIVE_KEY, ReportData, ReportError, Trial, pretrain_objective
from sptune.report.results_shape import check_results
from sptune.spec import bounded_yaml

MISSING = "figures and trial-level flags are missing."


def sqlite_path(uri: str) -> Path | None:
    """The file behind a ``sqlite:///`` URI; None for any other kind of store."""
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def resolve_tracking_uri(recorded: str | None, run_dir: Path) -> str | None:
    """The recorded URI, unless it is a SQLite file that moved with the run directory."""
    local = run_dir / MLFLOW_DB
    path = sqlite_path(recorded) if recorded else None
    if recorded and (path is None or path.is_file()):
        return recorded
    # Opening a missing SQLite path would silently create an empty store.
    return f"sqlite:///{local.resolve()}" if local.is_file() else None


def unreachable(uri: str, timeout: float = 5.0) -> str | None:
    """Why an HTTP tracking server cannot be used, checked quickly (MLflow's own retries take minutes)."""
    if not uri.startswith(("http://", "https://")):
        return None
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout):
            return None
    except (urllib.error.URLError, OSError) as err:
        return f"server not reachable ({getattr(err, 'reason', err)})"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ReportError(str(path), f"cannot read results ({err})", "point at a study output directory") from err
    return check_results(path, data)


def _read_spec(run_dir: Path) -> dict[str, Any]:
    path = run_dir / SPEC
    if not path.is_file():
        return {}
    try:
        return bounded_yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError:
        return {}  # the report still works without the search spaces; edge checks fall back to tried LRs


def _normalise_rows(rows: list[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        r = dict(r)
        r["task"] = str(r.get("task") or task or "task")
        r["seed"] = str(r.get("seed", ""))
        r["kind"] = r.get("kind") or r["variant"]
        out.append(r)
    return out


def _mlflow_trials(uri: str | None, parent: str | None,
                   results: dict[str, Any]) -> tuple[list[Trial], dict[str, Any], list[str]]:
    """(trials, results, notes): the trials, results.json from the parent run when there was no local one, and
    why the trials are missing. A missing store is noted, not raised: the table still comes from results.json."""
    if not (uri and parent):
        return [], results, [f"No MLflow store found; {MISSING}"]
    down = unreachable(uri)
    if down:
        return [], results, [f"MLflow runs not readable from {uri} ({down}); {MISSING}"]
    try:
        client = MlflowClient(tracking_uri=uri)
        trials = fetch_trials(client, parent, str(results.get("task", "")))
        return trials, results or results_from_artifact(client, parent), []
    except Exception as err:  # unreachable server, deleted run: the table still comes from results.json
        return [], results, [f"MLflow runs not readable from {uri} ({type(err).__name__}: {str(err)[:200]}); "
                             f"{MISSING}"]


def load_campaign(run_dir: Path, results: dict[str, Any]) -> ReportData:
    """A campaign: each study read from its own directory; its task column is labelled with the
    study name, so studies (ablation cells) sit side by side and are never pooled."""
    rows: list[dict[str, Any]] = []
    trials: list[Trial] = []
    notes: list[str] = []
    timeline: list[dict[str, Any]] = []
    baselines: dict[str, str] = {}
    spreads: dict[str, str | None] = {}
    for name in results.get("studies") or {}:
        part = load_data(run_dir / name)
        baselines[name], spreads[name] = part.baseline, part.spread
        rows += [{**r, "task": f"{r['task']} · {name}"} for r in part.rows]
        trials += [dataclasses.replace(t, task=f"{t.task} · {name}") for t in part.trials]
        notes += [f"{name}: {n}" for n in part.notes]
        timeline += [{**t, "stage": f"{name}/{t['stage']}"} for t in part.timeline]
    # Search spaces differ between studies: the LR-edge check falls back to the LRs each study tried.
    return ReportData(name=str(results.get("campaign")), run_dir=run_dir, rows=rows, trials=trials, spec={},
                      timeline=timeline, read_from=f"campaign {run_dir}",
                      notes=notes + _baseline_note(baselines) + _spread_note(spreads),
                      baseline=_campaign_baseline(baselines), spread=_common(spreads))


def _campaign_baseline(baselines: dict[str, str]) -> str:
    # One baseline for the whole page; studies that name different ones fall back to the default (and say so).
    names = set(baselines.values())
    return names.pop() if len(names) == 1 else DEFAULT_BASELINE


def _baseline_note(baselines: dict[str, str]) -> list[str]:
    if len(set(baselines.values())) <= 1:
        return []
    named = ", ".join(f"{study}: {b}" for study, b in baselines.items())
    return [f"The studies name different baselines ({named}); Δ is shown vs {DEFAULT_BASELINE!r}."]


def _common(spreads: dict[str, str | None]) -> str | None:
    names = set(spreads.values())
    return names.pop() if len(names) == 1 else None


def _spread_note(spreads: dict[str, str | None]) -> list[str]:
    # Studies whose spreads cover different sources of variance: each says its own.
    if _common(spreads) is not None or not spreads:
        return []
    return [f"{study}: {spread_sentence(s) or 'spread not recorded'}" for study, s in spreads.items()]


def load_data(run_dir: Path, tracking_uri: str | None = None, parent_run_id: str | None = None) -> ReportData:
    """Read a study from its directory, or from MLflow alone given a tracking URI and parent run id."""
    results = _read_json(run_dir / RESULTS_JSON) if (run_dir / RESULTS_JSON).is_file() else {}
    if "campaign" in results and not parent_run_id:
        return load_campaign(run_dir, results)
    ml = results.get("mlflow") or {}
    uri = tracking_uri or resolve_tracking_uri(ml.get("tracking_uri"), run_dir)
    parent = parent_run_id or ml.get("parent_run_id")
    trials, results, notes = _mlflow_trials(uri, parent, results)
    spec = _read_spec(run_dir)
    rows = _normalise_rows(results.get("rows") or rows_from_trials(trials), str(results.get("task", "")))
    rows = [{**r, OBJECTIVE_KEY: pretrain_objective(spec)} for r in rows]  # a campaign merges studies' rows
    if not rows and not trials:
        raise ReportError(str(run_dir), "no results.json rows and no MLflow trial runs to report on",
                          "pass a finished study's output directory, or a parent run id with --tracking-uri")
    read_from = f"MLflow {uri} · parent run {parent}" if uri and parent else str(run_dir / RESULTS_JSON)
    return ReportData(name=str(results.get("study") or run_dir.name), run_dir=run_dir, rows=rows, trials=trials,
                      spec=spec, timeline=list(results.get("timeline") or []), read_from=read_from,
                      notes=notes, baseline=str(results.get("baseline") or DEFAULT_BASELINE),
                      spread=results.get("spread"), tracking_uri=None if notes else uri,
                      parent_run_id=None if notes else parent, budget=dict(results.get("budget") or {}),
                      lr_extension=dict(results.get("lr_extension") or {}),
                      versus_trivial=trivial_checks(results), sequential=dict(results.get("sequential") or {}))
