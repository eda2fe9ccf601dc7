"""The study's results: results.json and results.md (written by `sptune.judging.results`), the
per-variant test accuracy and both files on the MLflow parent run, and the printed tables; a campaign's
results.json merged from its studies'."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sptune.judging.budget_report import budget_document
from sptune.judging.expected_max import budget_table
from sptune.judging.extension_results import extension_lines
from sptune.judging.results import (
    EXPECTED_MAX_SCORE,
    ResultRow,
    expected_max_lines,
    markdown_table,
    summarize,
    summary_table,
    write_results,
)
from sptune.judging.robust_selection import CANDIDATE_RULE, candidate_lines
from sptune.judging.sequential_reruns import look_rule, sequential_document
from sptune.judging.sequential_results import mlflow_fields, sequential_lines
from sptune.judging.stage_picks import searched
from sptune.judging.stats import values_by_seed
from sptune.judging.trivial_check import versus_trivial
from sptune.output_files import RESULTS_JSON, TEST_READS
from sptune.plan.study_plan import SearchPlan, StudyPlan
from sptune.rules.lr_extension import extension_record
from sptune.spec.campaign import CampaignStudy
from sptune.study.data_provenance import count_test_reads, provenance_document
from sptune.study.state import StudyState, TunerRun
from sptune.tasks.base import TaskSplits
from sptune.tracking.mlflow_tracker import Tracker

# results.json is a contract (read by sptune.report, campaigns and scripts): its timeline entries and
# pretraining entries keep their original keys, where "stage" is the Tuner's experiment or the phase,
# and "variant(s)" the trials' variant (a pretraining's objective).


# A selection's fields kept out of the pretraining entries: its metrics, and its trial's totals (in `budget`).
_NOT_IN_ENTRIES = ("metrics", "trial_totals")


def _timeline_entry(run: TunerRun) -> dict[str, Any]:
    return {"stage": run.experiment, "variants": run.trial_variants, "start": run.start, "end": run.end,
            "trials": run.trials}


def _pretraining_entry(pretraining: SearchPlan, state: StudyState) -> dict[str, Any]:
    record = state.searches.get(pretraining.label)
    if record is not None:
        selection = {k: v for k, v in asdict(record.best.selection).items() if k not in _NOT_IN_ENTRIES}
        entry = {"stage": pretraining.phase, "variant": pretraining.variant_or_objective, **selection}
        trivial = versus_trivial(record.best.selection.metrics)
        return {**entry, "versus_trivial": trivial} if trivial else entry
    # No Tuner ran: 0 epochs, or a given or cached checkpoint replaced it.
    if pretraining.epochs == 0:
        return {"epochs": 0}
    return {"reused_checkpoint": pretraining.reuse_checkpoint or state.spt_from_cache[pretraining.label]}


def _picks(plan: StudyPlan, state: StudyState) -> dict[str, dict[str, Any]]:
    """Per variant what its selection picked on validation (its search, an LR extension round or its candidates):
    the searched values, the trial, its best epoch and score; its re-runs per seed are the rows."""
    found = {}
    for search in plan.variant_searches():
        label = plan.pick_label(search)
        record = state.searches.get(label)
        if record is not None:
            best = record.best.selection
            found[search.variant] = {"stage": label, "trial_id": best.trial_id, "epoch": best.epoch,
                                     "config": searched(search, best.config), "metric": best.metric,
                                     "score": best.score}
    return found


def _pretraining_reruns(plan: StudyPlan, state: StudyState) -> dict[str, list[dict[str, Any]]]:
    """rerun_pretrain: per pretraining, each seed's re-pretrained checkpoint (label-rerun -> one entry per seed)."""
    found = {}
    for pretraining in plan.pretrainings():
        record = state.searches.get(pretraining.rerun_label)
        if record is not None:
            found[pretraining.rerun_label] = [
                {k: v for k, v in asdict(picked.selection).items() if k not in _NOT_IN_ENTRIES}
                for picked in record.selected]
    return found


def _attempted_seeds(plan: StudyPlan, state: StudyState, rows: list[ResultRow]) -> dict[str, list[int]]:
    """variant -> the seeds it was tested with: every re-run seed (a diverged or failed re-run has no row; with
    sequential re-runs, the seeds of the looks that trained), or without re-runs the one its search picked."""
    picked: dict[str, list[int]] = {}
    for r in rows:
        picked.setdefault(r.variant, []).append(r.seed)
    if plan.spec.rerun_sequential is None:
        reruns = plan.rerun_seeds()
        return {variant: list(reruns) if reruns else seeds for variant, seeds in picked.items()}
    trained = {}
    for search in plan.variant_searches():
        records = [state.searches.get(label) for label in plan.rerun_labels(search)]
        trained[search.variant] = [seed for k, record in enumerate(records, 1)
                                   if record is not None and record.trial_scores for seed in plan.look_seeds(k)]
    return {variant: trained.get(variant) or seeds for variant, seeds in picked.items()}


def _sequential(plan: StudyPlan, state: StudyState, rows: list[ResultRow],
                summary: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """results.json's `sequential` (None without rerun_sequential); each compared variant's summary entry gets its
    comparison as `sequential` too."""
    rule = look_rule(plan)
    if rule is None:
        return None
    selected = {label: [p.selection for p in record.selected] for label, record in state.searches.items()}
    by_variant: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_variant.setdefault(r.variant, []).append(asdict(r))
    doc = sequential_document(rule, selected, {v: values_by_seed(mine, "test_acc") for v, mine in by_variant.items()})
    for variant, comparison in doc["comparisons"].items():
        if variant in summary:
            summary[variant]["sequential"] = comparison
    return doc


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
    study["picks"] = _picks(plan, state)
    study.update({p.label: _pretraining_entry(p, state) for p in plan.pretrainings()})
    study.update(_pretraining_reruns(plan, state))
    # Which seeds the trainings used, and what the reported spread over seeds covers (seeds.SPREAD_TEXT).
    study["seeds"] = {"search": plan.search_seeds(), "rerun": plan.rerun_seeds()}
    study["spread"] = plan.spread()
    study["summary"] = summarize(rows, plan.spec.baseline, plan.spec.pretrain_objective,
                                 _attempted_seeds(plan, state, rows))
    sequential = _sequential(plan, state, rows, study["summary"])
    if sequential is not None:
        study["sequential"] = sequential
    study["budget"] = _budget(plan, state)
    study.update(_selection_steps(plan, state))
    return study


def _selection_steps(plan: StudyPlan, state: StudyState) -> dict[str, Any]:
    """results.json's account of what made each variant's pick after its search (nothing when off): its LR
    extension (`lr_extension`) and seed-robust selection's `candidates` per variant."""
    found: dict[str, Any] = {}
    extended = {s.variant: _lr_extension(plan, state, s) for s in plan.variant_searches() if plan.extend_rounds(s)}
    if extended:
        found["lr_extension"] = {v: e for v, e in extended.items() if e is not None}
    if plan.spec.selection.enabled:
        found["selection"] = {"top_k": plan.spec.selection.top_k, "seeds": plan.candidate_seeds(),
                              "rule": CANDIDATE_RULE}
        records = {s.variant: state.searches.get(s.candidates_label) for s in plan.variant_searches()}
        found["candidates"] = {v: r.candidates for v, r in records.items() if r is not None and r.candidates}
    return found


def _budget(plan: StudyPlan, state: StudyState) -> dict[str, Any]:
    """results.json's `budget`: the mode and what each variant's tested models trained (judging.budget_report)."""
    selected = {label: [picked.selection for picked in record.selected] for label, record in state.searches.items()}
    return budget_document(plan, selected)


def _lr_extension(plan: StudyPlan, state: StudyState, search: SearchPlan) -> dict[str, Any] | None:
    """What the variant's LR extension did, from its picks after its search and each round (None: no search pick)."""
    ranked = []
    for label in [search.label] + [search.extend_label(r) for r in range(1, plan.extend_rounds(search) + 1)]:
        record = state.searches.get(label)
        if record is None:
            break
        best = record.ranked or [record.best.selection]  # the configs the pick may come from, best first
        ranked.append([float(s.config["lr"]) for s in best])
    return extension_record(search.space.lr, ranked, plan.extend_rounds(search)) if ranked else None


def audit_document(data: TaskSplits, output_dir: Path) -> dict[str, Any]:
    """results.json's ``provenance`` and ``test_reads`` (`sptune.study.data_provenance`)."""
    audit = output_dir / TEST_READS
    return {"provenance": provenance_document(data, audit), "test_reads": count_test_reads(audit)}


def expected_max_document(plan: StudyPlan, state: StudyState, summary: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """results.json's ``expected_max`` (`sptune.judging.expected_max`) over each variant's search trials that
    have a validation score; the order of a variant vs the one its Δ is against (``delta_vs``)."""
    scores, without = {}, {}
    for search in plan.variant_searches():
        record = state.searches.get(search.label)
        if record is not None and record.trial_scores is not None:
            scores[search.variant] = [x for x in record.trial_scores if x is not None]
            without[search.variant] = len(record.trial_scores) - len(scores[search.variant])
    baselines = {v: e["delta_vs"] for v, e in summary.items() if e.get("delta_vs") and v in scores}
    return {"score": EXPECTED_MAX_SCORE, **budget_table(scores, baselines), "trials_without_score": without}


def publish(plan: StudyPlan, state: StudyState, output_dir: Path, tracker: Tracker, rows: list[ResultRow],
            data: TaskSplits) -> None:
    study = {**results_document(plan, state, rows), **audit_document(data, output_dir)}
    study["expected_max"] = expected_max_document(plan, state, study["summary"])
    json_path, md_path = write_results(output_dir, study, rows, plan.spec.baseline)
    parent = tracker.parent_run_id
    for variant, stats in study["summary"].items():
        tracker.client.log_metric(parent, f"test_acc.{variant}", stats["test_acc_mean"])
    _log_sequential(tracker, study.get("sequential"))
    tracker.client.log_artifact(parent, str(json_path))
    tracker.client.log_artifact(parent, str(md_path))
    budget = "\n".join(sequential_lines(study.get("sequential")) + expected_max_lines(study["expected_max"])
                       + extension_lines(study.get("lr_extension")) + candidate_lines(study.get("candidates")))
    print("\n" + markdown_table(rows) + "\n\n" + summary_table(study["summary"], plan.spec.baseline) + "\n" + budget
          + "\n", flush=True)


def _log_sequential(tracker: Tracker, doc: dict[str, Any] | None) -> None:
    """The parent run's account of sequential re-runs: the design as params, per variant its numbers as metrics and
    its verdict as tags (`sptune.judging.sequential_results.mlflow_fields`)."""
    params, metrics, tags = mlflow_fields(doc)
    parent = tracker.parent_run_id
    for key, value in params.items():
        tracker.client.log_param(parent, key, value)
    for key, value in metrics.items():
        tracker.client.log_metric(parent, key, value)
    for key, value in tags.items():
        tracker.client.set_tag(parent, key, value)


def merge_results(output_dir: Path, studies: list[CampaignStudy], campaign: str) -> Path:
    """One results.json for the campaign: every study's rows, tagged with the study name."""
    rows, parts = [], {}
    for study in studies:
        result = json.loads((output_dir / study.name / RESULTS_JSON).read_text())
        parts[study.name] = {k: v for k, v in result.items() if k != "rows"}
        rows += [{**row, "study": study.name, "overrides": list(study.overrides)} for row in result["rows"]]
    path = output_dir / RESULTS_JSON
    path.write_text(json.dumps({"campaign": campaign, "studies": parts, "rows": rows}, indent=2, default=str))
    return path
