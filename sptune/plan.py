"""The study plan: which Tuners run, over which search spaces, with how many trials."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from sptune.spec import ParamSpace, PretrainSource, SearchSpec, SweepSpec
from sptune.tasks.base import TaskInfo


@dataclass(frozen=True)
class StagePlan:
    stage: str  # "pretrain" | "finetune"
    variant: str  # variant name ("spt" for the pretraining stage's consumer)
    kind: str
    search: SearchSpec
    num_samples: int
    epochs: int
    metric: str
    mode: str
    searcher: str  # "grid" | "optuna" | "random"
    static: dict[str, Any] = field(default_factory=dict)
    pretrain_stage: str | None = None  # finetune stages: whose checkpoint initialises them
    fixed_configs: tuple[dict[str, Any], ...] | None = None  # seed re-runs: one given config per seed
    reuse_checkpoint: str | None = None  # pretraining: an existing SPT checkpoint replaces the Tuner
    source: PretrainSource | None = None  # pretraining: objective and (for spt_cross) source task

    @property
    def n_trials(self) -> int:
        if self.reuse_checkpoint is not None or (self.stage == "pretrain" and self.epochs == 0):
            return 0
        if self.fixed_configs is not None:
            return len(self.fixed_configs)
        return self.search.grid_size() * self.num_samples if self.searcher == "grid" else self.num_samples

    @property
    def name(self) -> str:
        if self.stage == "pretrain":
            return self.source.stage_name
        if self.stage == "seed":
            return f"seeds-{self.variant}"
        return f"finetune-{self.variant}"


@dataclass(frozen=True)
class TunerPlan:
    """One Tuner: its experiment directory under the storage path and the stages it runs
    together (all variants' searches share one Tuner; each keeps its own searcher and ASHA)."""

    name: str
    stages: tuple[StagePlan, ...]

    @property
    def kind(self) -> str:
        return self.stages[0].stage

    @property
    def metric(self) -> str:
        return self.stages[0].metric

    @property
    def mode(self) -> str:
        return self.stages[0].mode

    @property
    def epochs(self) -> int:
        return max(st.epochs for st in self.stages)

    @property
    def n_trials(self) -> int:
        return sum(st.n_trials for st in self.stages)


@dataclass(frozen=True)
class StudyPlan:
    spec: SweepSpec
    info: TaskInfo
    stages: list[StagePlan]
    concurrency: int
    data_summary: str = ""
    # spt_cross: pretraining stage name -> the other task's data (train/val only are used).
    source_data: dict[str, Any] = field(default_factory=dict)

    def finetune_stages(self) -> list[StagePlan]:
        return [s for s in self.stages if s.stage == "finetune"]

    def pretrain_stages(self) -> list[StagePlan]:
        return [s for s in self.stages if s.stage == "pretrain"]


def _searcher(spec: SweepSpec, search: SearchSpec) -> str:
    # Optuna cannot take grid_search: grids go through Ray's own grid generator.
    return "grid" if search.has_grid() else spec.searcher.type


def concurrency(spec: SweepSpec, cluster_cpus: float | None = None) -> int:
    cpus = cluster_cpus if cluster_cpus is not None else (os.cpu_count() or 1)
    fits = max(1, math.floor(cpus / spec.resources.cpu))
    return min(fits, spec.resources.max_concurrent or fits)


def build_plan(
    spec: SweepSpec,
    info: TaskInfo,
    cluster_cpus: float | None = None,
    data_summary: str = "",
    source_data: dict[str, Any] | None = None,
) -> StudyPlan:
    stages: list[StagePlan] = []
    p = spec.pretrain
    for source in spec.pretraining_sources():
        objective = source.objective
        stages.append(
            StagePlan(
                "pretrain",
                objective,
                objective,
                p.search,
                p.num_samples,
                p.epochs,
                "val_loss",
                "min",
                _searcher(spec, p.search),
                static={"objective": objective},
                reuse_checkpoint=p.checkpoint if objective == p.objective and source.task is None else None,
                source=source,
            )
        )
    for name, v in spec.variants.items():
        objective = spec.variant_objective(name)
        stages.append(
            StagePlan(
                "finetune",
                name,
                spec.variant_kind(name),
                v.search,
                spec.variant_samples(name),
                spec.variant_epochs(name),
                "val_acc",
                "max",
                _searcher(spec, v.search),
                pretrain_stage=spec.variant_source(name).stage_name if objective else None,
            )
        )
    return StudyPlan(spec, info, stages, concurrency(spec, cluster_cpus), data_summary, source_data or {})


def _describe_param(p: ParamSpace) -> str:
    if p.type in ("loguniform", "uniform"):
        return f"{p.type}[{p.low:g}, {p.high:g}]"
    return f"{p.type}{[v if v != int(v) else int(v) for v in p.values]}"


def describe(plan: StudyPlan) -> str:
    s, info = plan.spec, plan.info
    m = s.model
    lines = [
        f"Study '{s.name}' on task '{info.name}' ({info.input_kind}, length {info.seq_len}, "
        f"{info.num_classes} classes), seed {s.seed}",
        f"Data: {plan.data_summary}",
        f"Model: transformer d_model={m.d_model} layers={m.n_layers} heads={m.n_heads} ffn={m.d_ff} "
        f"pooling={m.pooling} positions={m.positions} dropout={m.dropout}",
        f"Scheduler: {s.scheduler.type}"
        + (
            f" (grace {s.scheduler.grace_period} epochs, reduction {s.scheduler.reduction_factor:g}, per variant)"
            if s.scheduler.type == "asha"
            else ""
        ),
        f"Resources: {s.resources.cpu:g} CPU + {s.resources.gpu:g} GPU per trial, up to {plan.concurrency} "
        "concurrent trials",
        "Stages (each pretraining objective its own Tuner, then ONE Tuner for all variants' searches, "
        "each variant with its own searcher and early stopping):",
    ]
    total_trials = total_epochs = 0
    for st in plan.stages:
        space = ", ".join(f"{k}={_describe_param(p)}" for k, p in st.search.items())
        extra = ""
        if st.reuse_checkpoint:
            lines.append(f"  {st.name:<24} reuses the SPT checkpoint {st.reuse_checkpoint} (no pretraining)")
            continue
        if st.stage == "pretrain" and st.epochs == 0:
            lines.append(f"  {st.name:<24} 0 epochs: SPT variants start from an untrained (seeded) encoder")
            continue
        if st.stage == "pretrain":
            p = s.pretrain
            on = f" on task {st.source.task.name}" if st.source.task else ""
            extra = f" objective={st.variant}{on}" + (f" mask_ratio={p.mask_ratio:g}" if st.variant == "masked" else "")
            extra += f" loss={p.loss}"
        elif st.pretrain_stage:
            extra = f" init from {st.pretrain_stage}"
        lines.append(
            f"  {st.name:<24} kind={st.kind:<15} {st.searcher:<7} {st.n_trials:>3} trials x <= {st.epochs:>3} "
            f"epochs  select {st.metric} ({st.mode})  {space}{extra}"
        )
        total_trials += st.n_trials
        total_epochs += st.n_trials * st.epochs
    if s.rerun_seeds > 1:
        reruns = s.rerun_seeds * len(plan.finetune_stages())
        lines.append(
            f"  seeds: each variant's selected config re-trained with {s.rerun_seeds} seeds ({reruns} trials, "
            "no early stopping), each tested once"
        )
        total_trials += reruns
        total_epochs += sum(s.rerun_seeds * st.epochs for st in plan.finetune_stages())
    lines.append(f"Total: {total_trials} trials, at most {total_epochs} trial-epochs (ASHA stops weak trials early)")
    lines.append("Then: validation-best trial and epoch per variant; test split read once per selected checkpoint.")
    return "\n".join(lines)
