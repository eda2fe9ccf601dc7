"""A finished study as typed, frozen values (`sptune.load_results` makes them from the study's folder,
`sptune.api.loading`): per variant its pick, its seeds' rows, its Δ and sequential verdict; the fairness flags; where
the MLflow runs, Optuna studies and files are."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sptune.judging.stats import Summary


@dataclass(frozen=True)
class Pick:
    """What a variant's selection picked on validation accuracy.

    config: the searched values (lr, batch_size and any other searched one); trial_id, stage, epoch: the selected
    trial, the stage it ran in (its search, an LR extension round or its candidates) and its best epoch; score: its
    validation score there. trial_id, stage, epoch and score are None for a study whose results.json predates
    `picks` and that re-ran the pick per seed (its rows are the re-runs, not the pick).
    """

    config: Mapping[str, Any]
    trial_id: str | None
    stage: str | None
    epoch: int | None
    score: float | None


@dataclass(frozen=True)
class SeedResult:
    """One selected checkpoint tested once (a row of results.json).

    seed: the trial's seed; test_acc / val_acc / train_acc: its accuracies at best_epoch (train_acc None in older
    results); test_loss: its test loss; lr, batch_size: the config it trained; trial_id, checkpoint, mlflow_run_id:
    where it is; delta_test: its test accuracy minus that of `delta_vs` with the same seed (None for the baseline or
    without a run of that seed); may_be_unconverged: best_epoch is in the last 10 % of its budget.
    """

    seed: int
    test_acc: float
    val_acc: float
    train_acc: float | None
    test_loss: float
    lr: float
    batch_size: int
    best_epoch: int
    trial_id: str
    checkpoint: str
    mlflow_run_id: str | None
    delta_test: float | None
    delta_vs: str | None
    may_be_unconverged: bool


@dataclass(frozen=True)
class Sequential:
    """A variant's sequential re-runs against `vs` (spec `rerun_sequential`).

    verdict: the decision on the test Δ (better | worse | equivalent | undecided); seeds_used of max_seeds;
    stopped_look / stopped_verdict: where the validation Δ stopped adding seeds; test_mean, test_interval (the
    sequential one), test_t_interval (the plain 95 % t-interval), boundary: the test Δ's numbers; fixed_n: the seeds
    a fixed-N design would need (None: not computed).
    """

    vs: str
    verdict: str
    seeds_used: int
    max_seeds: int
    stopped_look: int
    stopped_verdict: str
    test_mean: float | None
    test_interval: tuple[float, float] | None
    test_t_interval: tuple[float, float] | None
    boundary: float | None
    fixed_n: int | None


@dataclass(frozen=True)
class Delta:
    """A variant's Δ test accuracy against `vs` (the baseline, or its like-for-like variant).

    test: the Δ's mean, std, 95 % interval, n and how it was paired (`sptune.judging.stats.Summary`); train: the Δ of
    the selected checkpoints' train accuracy (None where unknown); like_for_like: both train the same model;
    pairing: the sentence results.md prints of it.
    """

    vs: str
    test: Summary | None
    train: Summary | None
    like_for_like: bool
    pairing: str


@dataclass(frozen=True)
class VariantResult:
    """One variant of the study.

    name, kind: the variant and its kind (scratch, spt, ...); pick: its validation-selected config; seeds: its
    tested rows, one per seed; test_acc: the mean over seeds with its interval (None: no usable seed);
    val_acc_mean, train_acc_mean: means over seeds; seeds_not_used: seeds that diverged or failed; delta: its Δ vs
    the variant it is compared with (None for the baseline); sequential: its sequential verdict (None without
    sequential re-runs).
    """

    name: str
    kind: str
    pick: Pick
    seeds: tuple[SeedResult, ...]
    test_acc: Summary | None
    val_acc_mean: float | None
    train_acc_mean: float | None
    seeds_not_used: tuple[str, ...]
    delta: Delta | None
    sequential: Sequential | None


@dataclass(frozen=True)
class Flag:
    """A fairness flag of the report: key (lr-edge, rank-flip, ...), level (warn | ok | info), title, summary and
    the items it names."""

    key: str
    level: str
    title: str
    summary: str
    items: tuple[str, ...]


@dataclass(frozen=True)
class MlflowRuns:
    """Where the study's MLflow runs are: the tracking URI, the experiment (id and name) and the parent run."""

    tracking_uri: str | None
    experiment_id: str | None
    experiment_name: str | None
    parent_run_id: str | None


@dataclass(frozen=True)
class OptunaStudies:
    """Where the study's Optuna searches are: storage (a URL without its password) and, per search (a variant,
    or a pretraining stage), its Optuna study name."""

    storage: str
    studies: Mapping[str, str]


@dataclass(frozen=True)
class StudyFiles:
    """The study's files: its output folder, results.json and results.md; report.html, flags.json and spec.yaml
    (None where the folder has none)."""

    output_dir: Path
    results_json: Path
    results_md: Path | None
    report_html: Path | None
    flags_json: Path | None
    spec: Path | None


@dataclass(frozen=True)
class StudyResult:
    """A finished study.

    name, task, baseline: the study, its task and the variant Δs are against by default; variants: one per variant,
    the baseline first as results.json lists them; flags: the report's fairness flags (None: no report was built,
    e.g. a folder copied without flags.json); mlflow, optuna (None: no Optuna search), files: where things are;
    document: results.json itself, for what the typed fields leave out (budget, expected_max, provenance, ...).
    """

    name: str
    task: str
    baseline: str
    variants: tuple[VariantResult, ...]
    flags: tuple[Flag, ...] | None
    mlflow: MlflowRuns
    optuna: OptunaStudies | None
    files: StudyFiles
    document: Mapping[str, Any]

    def variant(self, name: str) -> VariantResult:
        """The variant called `name` (KeyError naming the variants there are)."""
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"no variant '{name}' in study '{self.name}' (it has {', '.join(self.names)})")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.variants)


@dataclass(frozen=True)
class CampaignResult:
    """A finished campaign: its name, each study's result (in the campaign's order) and its merged results.json."""

    name: str
    studies: tuple[StudyResult, ...]
    results_json: Path

    def study(self, name: str) -> StudyResult:
        for s in self.studies:
            if s.name == name or s.files.output_dir.name == name:
                return s
        raise KeyError(f"no study '{name}' in campaign '{self.name}'")
