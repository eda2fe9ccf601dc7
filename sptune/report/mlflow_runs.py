"""Reading a study's MLflow child runs (through an ``MlflowClient``) into ``Trial`` records and result rows."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from sptune.output_files import RESULTS_JSON
from sptune.plan.phases import Phase
from sptune.report.records import (
    PRETRAIN_RERUN,
    Trial,
    as_float,
    as_int,
    seed_key,
)


def _search_children(client: Any, experiment_id: str, parent_id: str) -> list[Any]:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'",
                                  max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _history(client: Any, run_id: str, key: str) -> list[tuple[int, float]]:
    # Keyed by step: a resumed trial re-logs epochs, and the last value is the one that counted.
    by_step = {int(m.step): float(m.value) for m in client.get_metric_history(run_id, key)}
    return sorted(by_step.items())


def _status(tags: dict[str, str], run_status: str) -> str:
    if tags.get("sptune.status"):
        return tags["sptune.status"]
    return "failed" if run_status in ("FAILED", "KILLED") else "incomplete"


def _trial(client: Any, run: Any, default_task: str) -> Trial:
    tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
    phase = tags.get("sptune.phase", params.get("phase", ""))
    if phase == Phase.RERUN and params.get("objective"):  # a pretraining's re-run per seed, not a variant's
        phase = PRETRAIN_RERUN
    pretraining = phase in (Phase.PRETRAIN, PRETRAIN_RERUN)
    curve = _history(client, run.info.run_id, "val_loss" if pretraining else "val_acc")
    seconds = _history(client, run.info.run_id, "epoch_seconds")
    epochs = max([s for s, _ in curve] + [s for s, _ in seconds] + [0])
    best = metrics.get("best_val_acc")
    if best is None and not pretraining and curve:
        best = max(v for _, v in curve)
    variant = tags.get("sptune.variant", params.get("variant", ""))
    return Trial(
        run_id=run.info.run_id, phase=phase, variant=variant, variant_kind=params.get("kind", variant),
        task=params.get("task", default_task), seed=str(params.get("seed", "")), lr=as_float(params.get("lr")),
        batch_size=str(as_int(params.get("batch_size")) or ""), status=_status(tags, run.info.status),
        selected=tags.get("sptune.selected") == "true", max_epochs=as_int(params.get("max_epochs")),
        best_val_acc=as_float(best), test_acc=as_float(metrics.get("test_acc")),
        selected_epoch=as_int(metrics.get("selected_epoch", metrics.get("best_epoch"))),
        curve=curve, seconds=sum(v for _, v in seconds), epochs=epochs,
        objective=(params.get("objective") or "masked") if pretraining else None,
    )


def fetch_trials(client: Any, parent_id: str, default_task: str = "") -> list[Trial]:
    """Every sptune child run of a study's parent run."""
    experiment_id = client.get_run(parent_id).info.experiment_id
    runs = sorted(_search_children(client, experiment_id, parent_id), key=lambda r: r.info.start_time or 0)
    return [_trial(client, r, default_task) for r in runs if r.data.tags.get("sptune.phase")]


def _selected_row(t: Trial, trials: list[Trial]) -> dict[str, Any]:
    # The search trials behind this result: all seeds' for a re-run (one shared search), else its own seed's.
    group = [g for g in trials if (g.phase, g.task, g.variant) == (Phase.SEARCH, t.task, t.variant)
             and (t.phase == Phase.RERUN or g.seed == t.seed)]
    return {
        "variant": t.variant, "kind": t.variant_kind, "task": t.task, "seed": t.seed, "lr": t.lr,
        "batch_size": t.batch_size, "best_epoch": t.selected_epoch, "val_acc": t.best_val_acc,
        "test_acc": t.test_acc, "trials": len(group), "diverged": sum(g.status == "diverged" for g in group),
        "failed": sum(g.status == "failed" for g in group), "trial_epochs": sum(g.epochs for g in group),
        "trial_id": "", "mlflow_run_id": t.run_id,
    }


def rows_from_trials(trials: list[Trial]) -> list[dict[str, Any]]:
    """results.json-style rows rebuilt from the selected runs (when only MLflow is at hand): the per-seed
    re-runs where the study has them, else the search's selected trial."""
    reran = {(t.task, t.variant) for t in trials if t.phase == Phase.RERUN and t.selected}
    # Without re-runs the pick is a search trial, or one its LR extension added.
    picked = {True: (Phase.RERUN,), False: (Phase.SEARCH, Phase.EXTEND)}
    rows = [_selected_row(t, trials) for t in trials if t.selected and t.phase in picked[(t.task, t.variant) in reran]]
    order = {key: i for i, key in enumerate(dict.fromkeys((t.task, t.variant) for t in trials))}
    return sorted(rows, key=lambda r: (order[(r["task"], r["variant"])], seed_key(str(r["seed"]))))


def results_from_artifact(client: Any, parent_id: str) -> dict[str, Any]:
    """results.json as logged on the parent run, or {} when it is not there."""
    # A remote study's directory may be elsewhere; its parent run carries results.json as an artifact.
    try:
        if RESULTS_JSON not in {a.path for a in client.list_artifacts(parent_id)}:
            return {}
        with tempfile.TemporaryDirectory() as tmp:
            return json.loads(Path(client.download_artifacts(parent_id, RESULTS_JSON, tmp)).read_text())
    except Exception:
        return {}
