"""The study's results: results.json and results.md (written by `sptune.judging.results`), the
per-variant test accuracy and both files on the MLflow parent run, and the printed tables."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from sptune.judging.results import ResultRow, markdown_table, summarize, summary_table, write_results
from sptune.plan.study_plan import SearchPlan, StudyPlan
from sptune.study.state import StudyState, TunerRun
from sptune.tracking.mlflow_tracker import Tracker

# results.json is a contract (read by sptune.report, campaigns and scripts): its timeline entries and
# pretraining entries keep their original keys, where "stage" is the Tuner's experiment or the phase,
# and "variant(s)" the trials' variant (a pretraining's objective).


def _timeline_entry(run: TunerRun) -> dict[str, Any]:
    return {"stage": run.experiment, "variants": run.trial_variants, "start": run.start, "end": run.end,
            "trials": run.trials}


def _pretraining_entry(pretraining: SearchPlan, state: StudyState) -> dict[str, Any]:
    record = state.searches.get(pretraining.label)
    if record is not None:
        selection = {k: v for k, v in asdict(record.best.selection).items() if k != "metrics"}
        return {"stage": pretraining.phase, "variant": pretraining.trial_variant, **selection}
    # No Tuner ran: 0 epochs, or a given or cached checkpoint replaced it.
    if pretraining.epochs == 0:
        return {"epochs": 0}
    return {"reused_checkpoint": pretraining.reuse_checkpoint or state.spt_from_cache[pretraining.label]}


def _pretraining_reruns(plan: StudyPlan, state: StudyState) -> dict[str, list[dict[str, Any]]]:
    """rerun_pretrain: per pretraining, each seed's re-pretrained checkpoint (label-rerun -> one entry per seed)."""
    found = {}
    for pretraining in plan.pretrainings():
        record = state.searches.get(pretraining.rerun_label)
        if record is not None:
            found[pretraining.rerun_label] = [
                {k: v for k, v in asdict(picked.selection).items() if k != "metrics"} for picked in record.selected]
    return found


def results_document(plan: StudyPlan, state: StudyState, rows: list[ResultRow]) -> dict[str, Any]:
    """results.json without its rows."""
    study = {
        "study": plan.spec.name,
        "task": plan.info.name,
        "mlflow": {
            "tracking_uri": state.tracking_uri,
            "experiment_id": state.experiment_id,
            "parent_run_id": state.parent_run_id,
        },
        "timeline": [_timeline_entry(run) for run in state.timeline],
    }
    study.update({p.label: _pretraining_entry(p, state) for p in plan.pretrainings()})
    study.update(_pretraining_reruns(plan, state))
    # Which seeds the trainings used, and what the reported spread over seeds covers (seeds.SPREAD_TEXT).
    study["seeds"] = {"search": plan.search_seeds(), "rerun": plan.rerun_seeds()}
    study["spread"] = plan.spread()
    study["summary"] = summarize(rows, plan.spec.baseline, plan.spec.pretrain_objective)
    return study


def publish(plan: StudyPlan, state: StudyState, output_dir: Path, tracker: Tracker, rows: list[ResultRow]) -> None:
    study = results_document(plan, state, rows)
    json_path, md_path = write_results(output_dir, study, rows, plan.spec.baseline)
    parent = tracker.parent_run_id
    for variant, stats in study["summary"].items():
        tracker.client.log_metric(parent, f"test_acc.{variant}", stats["test_acc_mean"])
    tracker.client.log_artifact(parent, str(json_path))
    tracker.client.log_artifact(parent, str(md_path))
    print("\n" + markdown_table(rows) + "\n\n" + summary_table(study["summary"], plan.spec.baseline) + "\n", flush=True)
