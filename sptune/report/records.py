"""The plain data a report is built from: the study's trials and result rows, and tolerant readers of the values
they carry (MLflow params are strings; results.json values may be missing, null or NaN)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sptune.errors import SptuneError
from sptune.judging.stats import DEFAULT_BASELINE, finite_float
from sptune.plan.phases import Phase

# Set by sptune.report.gather on every result row: its study's pretrain.objective, which `spt` follows.
OBJECTIVE_KEY = "pretrain_objective"
# The report's own group (never a tag) for a Phase.RERUN run that names a pretraining objective (rerun_pretrain):
# SPT re-pretrained per seed, kept apart so a variant's search and re-runs never include it.
PRETRAIN_RERUN = "pretrain-rerun"


class ReportError(SptuneError):
    """The report's input (run directory, run id, tracking store) is missing or unusable."""


@dataclass
class Trial:
    """One MLflow child run (one Ray Tune trial)."""

    run_id: str
    phase: str  # a Phase (MLflow tag sptune.phase), or PRETRAIN_RERUN
    variant: str
    variant_kind: str  # MLflow param `kind`
    task: str
    seed: str
    lr: float | None
    batch_size: str
    status: str  # finished | diverged | failed | incomplete
    selected: bool
    max_epochs: int | None
    best_val_acc: float | None
    test_acc: float | None
    selected_epoch: int | None
    curve: list[tuple[int, float]]  # val_acc (finetune) or val_loss (pretrain) per epoch
    seconds: float
    epochs: int  # epochs actually trained (the study's scheduler may stop a trial early)
    objective: str | None = None  # pretraining runs: masked | causal

    @property
    def completed(self) -> bool:
        return self.status == "finished"


@dataclass
class ReportData:
    """Everything read for one study: results.json rows, MLflow trials, spec.yaml and the Tuners' timeline."""

    name: str
    run_dir: Path
    rows: list[dict[str, Any]]
    trials: list[Trial]
    spec: dict[str, Any]
    timeline: list[dict[str, Any]]
    read_from: str  # MLflow (tracking URI and parent run) or the results.json it was read from
    notes: list[str] = field(default_factory=list)
    baseline: str = DEFAULT_BASELINE  # the variant Δ is taken against, as results.json records it
    spread: str | None = None  # what the spread over seeds covers (sptune.rules.seeds), as results.json records it
    # The MLflow store and parent run the trials were read from (None when they were not): where the report's
    # figures and page are logged.
    tracking_uri: str | None = None
    parent_run_id: str | None = None
    # results.json's `budget` (sptune.judging.budget_report): the mode and what each tested model trained; {}: none.
    budget: dict[str, Any] = field(default_factory=dict)
    # results.json's `lr_extension` (sptune.rules.lr_extension): per extending variant, what its search added.
    lr_extension: dict[str, Any] = field(default_factory=dict)
    # Each pretraining's selected checkpoint against the trivial predictors (results.json's `versus_trivial`
    # of each pretraining entry, sptune.judging.trivial_check), by the pretraining's label.
    versus_trivial: dict[str, dict[str, Any]] = field(default_factory=dict)
    # results.json's `sequential` (sptune.judging.sequential_reruns): the design and each comparison's verdict; {}:
    # fixed re-runs (or a campaign, whose studies each have their own).
    sequential: dict[str, Any] = field(default_factory=dict)

    def phase_trials(self, phases: tuple[str, ...], task: str, variant: str) -> list[Trial]:
        """One variant's trials on one task in the given phases."""
        return [t for t in self.trials if t.phase in phases and (t.task, t.variant) == (task, variant)]

    def pretraining(self, task: str, phases: tuple[str, ...] = (Phase.PRETRAIN,)) -> dict[str, list[Trial]]:
        """objective -> its pretraining trials (one shared Tuner per objective; PRETRAIN_RERUN: its re-runs)."""
        out: dict[str, list[Trial]] = {}
        for t in self.trials:
            if t.phase in phases and t.task == task:
                out.setdefault(t.objective or "masked", []).append(t)
        return out


def pretrain_objective(spec: dict[str, Any]) -> str | None:
    """The objective of the spec's pretrain section (masked unless it says), None without one."""
    pretrain = spec.get("pretrain")
    return (pretrain.get("objective") or "masked") if isinstance(pretrain, dict) else None


def as_int(value: Any) -> int | None:
    """An integer from a number or numeric string ("8", "8.0"), else None."""
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


# One reading of "a usable number" (finite float, else None) for the report and the statistics.
as_float = finite_float


def seed_key(seed: str) -> tuple[int, Any]:
    """Sort key: numeric seeds in numeric order (2 before 10), then any named ones."""
    return (0, int(seed)) if seed.lstrip("-").isdigit() else (1, seed)
