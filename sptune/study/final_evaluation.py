"""The final evaluation: the only place the test split is read, once per selected checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sptune.judging.convergence import may_be_unconverged
from sptune.judging.results import ResultRow, add_deltas
from sptune.output_files import TEST_READS
from sptune.plan.study_plan import SearchPlan, StudyPlan
from sptune.study.state import SearchRecord, SelectedTrial
from sptune.tasks import holdout
from sptune.tasks.base import ArraySplit, TaskSplits
from sptune.tracking.mlflow_tracker import Tracker
from sptune.training.final_scores import HeldOutScore, accuracy_on, accuracy_on_test

# Training rows each selected checkpoint's train_acc is measured on (sptune.study.final_evaluation.train_sample).
TRAIN_SAMPLE = 5000


@dataclass(frozen=True)
class Candidate:
    """A selected checkpoint to test: from the variant's search, or from one of its re-runs."""

    search: SearchPlan  # the variant's search
    search_record: SearchRecord  # what the search selected: its statistics go in every row of the variant
    tested: SelectedTrial


def _row(plan: StudyPlan, candidate: Candidate, score: HeldOutScore, train_score: HeldOutScore) -> ResultRow:
    sel, search = candidate.tested.selection, candidate.search_record.best.selection
    return ResultRow(
        variant=candidate.search.variant, kind=candidate.search.variant_kind, task=plan.info.name,
        seed=int(sel.config.get("seed", plan.spec.seed)), lr=float(sel.config["lr"]),
        batch_size=int(sel.config["batch_size"]), best_epoch=sel.epoch, val_acc=sel.score,
        test_acc=score.accuracy, test_loss=score.loss, test_device=score.device, test_precision=score.precision,
        trials=search.n_trials, diverged=search.n_diverged, failed=search.n_failed, trial_epochs=search.trial_epochs,
        failures=search.n_failures,
        trial_id=sel.trial_id, mlflow_run_id=candidate.tested.mlflow_run_id, checkpoint=sel.checkpoint_path,
        may_be_unconverged=_may_be_unconverged(candidate),
        train_acc=train_score.accuracy,
    )


def train_sample(data: TaskSplits) -> ArraySplit:
    """The training rows a selected checkpoint's train accuracy is measured on: the first TRAIN_SAMPLE (all of
    a smaller split), the same rows for every checkpoint of the study."""
    return ArraySplit(data.train.x[:TRAIN_SAMPLE], data.train.y[:TRAIN_SAMPLE])


def _may_be_unconverged(candidate: Candidate) -> bool:
    """The tested checkpoint's epoch in the last 10 % of the variant's budget (sptune.judging.convergence)."""
    budget = candidate.search.budget
    return budget is not None and may_be_unconverged(candidate.tested.selection.epoch, budget)


def evaluate_on_test(
    plan: StudyPlan, data: TaskSplits, output_dir: Path, candidates: list[Candidate]
) -> list[ResultRow]:
    """Test every candidate once (each read audited in test_reads.jsonl). Nothing else happens here:
    the caller records the rows before anything that can fail (MLflow), so a resume never reads again."""
    rows = []
    train_rows = train_sample(data)
    with holdout.final_evaluation(output_dir / TEST_READS):
        for candidate in candidates:
            checkpoint = candidate.tested.selection.checkpoint_path
            with holdout.reading_for(checkpoint):
                test = data.test
            score = accuracy_on_test(plan.spec, plan.info, checkpoint, test, candidate.search.variant)
            # Coser & Orvieto compare how well each model fits its training data: the checkpoint itself, in eval
            # mode, on training rows (not the running minibatch mean of its last epoch, with dropout on).
            train_score = accuracy_on(plan.spec, plan.info, checkpoint, train_rows, candidate.search.variant)
            rows.append(_row(plan, candidate, score, train_score))
    add_deltas(rows, plan.spec.baseline, plan.spec.pretrain_objective)
    return rows


def log_test_metrics(tracker: Tracker, rows: list[ResultRow]) -> None:
    """test_acc / test_loss on each tested trial's run (repeating this after a resume is harmless)."""
    for row in rows:
        if row.mlflow_run_id:
            tracker.client.log_metric(row.mlflow_run_id, "test_acc", row.test_acc)
            tracker.client.log_metric(row.mlflow_run_id, "test_loss", row.test_loss)
