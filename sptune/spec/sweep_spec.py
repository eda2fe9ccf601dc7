"""The whole sweep spec: its sections, and the rules that need more than one of them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from sptune import machine
from sptune.rules.budgets import BUDGET_MODES, Budget, section_budget, until_converged
from sptune.rules.seeds import MAX_RERUN_SEEDS
from sptune.spec.cross_checks import CROSS_CHECKS
from sptune.spec.fields import Strict, problem, ranged
from sptune.spec.gpu_share import auto_gpu_share
from sptune.spec.sections import (
    FinetuneSpec,
    LanguageModelSpec,
    LrExtendSpec,
    ModelSpec,
    PretrainSource,
    PretrainSpec,
    ResourcesSpec,
    SchedulerSpec,
    SearcherSpec,
    SelectionSpec,
    TaskSpec,
    TrackingSpec,
    TrainingSpec,
    VariantSpec,
)
from sptune.spec.task_defaults import under_task_defaults
from sptune.spec.variant_kinds import KINDS, VARIANT_KINDS, VariantKind, as_built


class SweepSpec(Strict):
    name: str
    seed: int = 0
    # Retries per trial that raises (Ray Tune FailureConfig).
    max_failures: int = ranged(0, "use 0 for no retries", ge=0)
    # > 1: each variant's selected config is re-trained with this many seeds (seed+1000, seed+1001, ...:
    # seeds no search trial used, so no re-run replays the trial that won the search).
    rerun_seeds: int = ranged(1, "use 1 (no re-training) or e.g. 3", ge=1, le=MAX_RERUN_SEEDS)
    # true: before the re-runs, the selected pretraining config is re-pretrained with each re-run seed, and
    # each SPT variant's re-run starts from the checkpoint of its own seed: the spread includes pretraining.
    rerun_pretrain: bool = False
    task: TaskSpec
    model: ModelSpec = Field(default_factory=ModelSpec)
    pretrain: PretrainSpec | None = None
    finetune: FinetuneSpec = Field(default_factory=FinetuneSpec)
    variants: dict[str, VariantSpec]
    # The variant every other one's Δ is paired against (by seed); no Δ when no variant has this name.
    baseline: str = "scratch"
    # finetune_matched (the papers' main tables): every variant the same finetuning budget, SPT's pretraining
    # on top. total_matched: variants that do not start from SPT also train for the pretraining budget, so
    # every model trains as long (sptune.rules.budgets, the one place this is decided).
    budget: Literal[BUDGET_MODES] = "finetune_matched"
    # Seed-robust selection (off by default): each variant's best configs compared over fresh seeds.
    selection: SelectionSpec = Field(default_factory=SelectionSpec)
    # How far a variant's `search.lr.extend` may go beyond its LR range (rounds of half a decade).
    lr_extend: LrExtendSpec = Field(default_factory=LrExtendSpec)
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)
    searcher: SearcherSpec = Field(default_factory=SearcherSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    language_model: LanguageModelSpec | None = None

    # ------------------------------------------------------------ rules

    _task_defaults = model_validator(mode="before")(under_task_defaults)

    @field_validator("variants")
    @classmethod
    def _known_kinds(cls, variants: dict[str, VariantSpec]) -> dict[str, VariantSpec]:
        # Here rather than on VariantSpec: a variant's kind defaults to its name, its key here.
        if not variants:
            raise problem("no variants to compare", "add at least 'scratch' and 'spt'")
        for name, variant in variants.items():
            kind = variant.kind or name
            if kind not in KINDS:
                fix = f"use one of: {', '.join(VARIANT_KINDS)} (or set kind:)"
                raise problem(f"unknown variant kind '{kind}'", fix, f"{name}.kind" if variant.kind else name)
            _check_source_task(name, variant, KINDS[kind])
        return variants

    @model_validator(mode="after")
    def _gpu_share_resolved(self) -> SweepSpec:
        # Resolved here, once, so every reader of the spec (plan, Tuner, trials, spec.yaml) sees a number.
        if self.resources.gpu == "auto":
            self.resources.gpu = auto_gpu_share(self.task.name, self.model.d_model, self.model.n_layers,
                                               machine.local_gpus())
        return self

    @model_validator(mode="after")
    def _sections_agree(self) -> SweepSpec:
        for check in CROSS_CHECKS:
            check(self)
        return self

    # ------------------------------------------------------------ reading the spec

    def facts_by_variant(self) -> dict[str, VariantKind]:
        """Each variant's kind as this study builds it (`variant_facts`)."""
        return {name: self.variant_facts(name) for name in self.variants}

    def variant_kind(self, name: str) -> str:
        return self.variants[name].kind or name

    @property
    def pretrain_objective(self) -> str | None:
        """The objective kinds following pretrain.objective take (None: no pretrain section)."""
        return self.pretrain.objective if self.pretrain is not None else None

    def variant_facts(self, name: str) -> VariantKind:
        """The variant's kind as this study builds it (`spt` follows pretrain.objective: `as_built`)."""
        return as_built(KINDS[self.variant_kind(name)], self.pretrain_objective)

    def variant_is_causal(self, name: str) -> bool:
        """Whether the variant trains a causal model: its attention never looks ahead."""
        return self.variant_facts(name).architecture == "causal"

    def pretrain_budget(self) -> Budget:
        """The pretraining budget as written (0 epochs without a pretrain section); the plan gives it to the
        pretraining trials (`sptune.plan.trial_budgets`)."""
        p = self.pretrain
        return section_budget(p.epochs, p.steps, p.eval_every) if p is not None else section_budget(0, None, None)

    def finetune_budget(self, name: str | None = None) -> Budget:
        """The finetuning budget as written: the finetune section's, or a variant's own epochs (a variant's trials
        train `sptune.rules.budgets.variant_budget`: this under the study's budget mode)."""
        f = self.finetune
        epochs = (self.variants[name].epochs if name else None) or f.epochs
        budget = section_budget(epochs, f.steps, f.eval_every)
        u = f.until_converged
        return budget if u is None else until_converged(budget, u.patience, u.max_epochs)

    def variant_samples(self, name: str) -> int:
        return self.variants[name].num_samples or self.finetune.num_samples

    def variant_repeats(self, name: str) -> int:
        """How many times (each with its own seed) the variant's grid search trains each grid point."""
        return self.variants[name].grid_repeats or self.finetune.grid_repeats

    def variant_objective(self, name: str) -> str | None:
        """The pretraining objective a variant's init comes from (None: random init)."""
        return self.variant_facts(name).pretraining

    def variant_source(self, name: str) -> PretrainSource | None:
        """Which pretraining (objective, and task if not the study's own) a variant starts from."""
        objective = self.variant_objective(name)
        if objective is None:
            return None
        cross_task = KINDS[self.variant_kind(name)].cross_task
        return PretrainSource(objective, self.variants[name].source_task if cross_task else None)

    def pretraining_sources(self) -> list[PretrainSource]:
        """Distinct pretraining runs the variants need (each runs once and is shared)."""
        found: dict[str, PretrainSource] = {}
        for name in self.variants:
            source = self.variant_source(name)
            if source is not None:
                found.setdefault(source.stage_name, source)
        return sorted(found.values(), key=lambda s: (s.task is not None, s.objective != "masked", s.stage_name))

    def pretraining_objectives(self) -> list[str]:
        return sorted({s.objective for s in self.pretraining_sources()})

    def needs_pretraining(self) -> bool:
        return bool(self.pretraining_objectives())


def _check_source_task(name: str, variant: VariantSpec, kind: VariantKind) -> None:
    if kind.cross_task and variant.source_task is None:
        fix = "add source_task: {name: TASK} (e.g. listops)"
        raise problem(f"{kind.name} needs the task to pretrain on", fix, f"{name}.source_task")
    if not kind.cross_task and variant.source_task is not None:
        message = "only spt_cross variants pretrain on another task"
        raise problem(message, "set kind: spt_cross or remove source_task", f"{name}.source_task")
