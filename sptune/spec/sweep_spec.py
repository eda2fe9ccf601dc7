"""The whole sweep spec: its sections, and the rules that need more than one of them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from sptune import machine
from sptune.rules.budgets import BUDGET_MODES, Budget, section_budget, until_converged, variant_budget
from sptune.rules.rungs import hyperband_brackets
from sptune.rules.seeds import MAX_RERUN_SEEDS, MAX_SEED
from sptune.spec.budget import repeated_choice_problem
from sptune.spec.budget_rules import check_budget_mode, check_until_converged, check_variant_units
from sptune.spec.fields import Strict, problem, ranged
from sptune.spec.gpu_share import auto_gpu_share, auto_pack, small_model
from sptune.spec.names import checked_folder_name
from sptune.spec.pack_rules import check_packing, packable
from sptune.spec.reruns import SequentialRerunSpec, check_rerun_pretrain, resolve_sequential_reruns
from sptune.spec.search import SearchSpec
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
from sptune.spec.task_defaults import validated_under_task_defaults
from sptune.spec.variant_kinds import KINDS, VARIANT_KINDS, VariantKind, as_built


class SweepSpec(Strict):
    """A whole study as its YAML spec gives it, validated; each field's comment says what it is (docs/reference/)."""

    name: str  # the study's name: its output folder's, MLflow experiment's and Optuna studies' prefix
    # Every seed of the study is this plus an offset (sptune.rules.seeds): all must stay numpy's and torch's.
    seed: int = ranged(0, f"use a seed in [0, {MAX_SEED}], e.g. 0", ge=0, le=MAX_SEED)
    # Retries per trial that raises (Ray Tune FailureConfig).
    max_failures: int = ranged(0, "use 0 for no retries", ge=0)
    # > 1: each variant's selected config is re-trained with this many seeds (seed+1000, seed+1001, ...:
    # seeds no search trial used, so no re-run replays the trial that won the search).
    rerun_seeds: int = ranged(1, "use 1 (no re-training) or e.g. 3", ge=1, le=MAX_RERUN_SEEDS)
    # true: before the re-runs, the selected pretraining config is re-pretrained with each re-run seed, and
    # each SPT variant's re-run starts from the checkpoint of its own seed: the spread includes pretraining.
    rerun_pretrain: bool = False
    # Re-runs until decided (off by default): seeds added per look while a variant's Δ is undecided, at an error
    # rate that holds across the looks (sptune.judging.sequential). Sets rerun_seeds to its max: the worst case.
    rerun_sequential: SequentialRerunSpec | None = None
    task: TaskSpec  # the data: a task's name and its options
    model: ModelSpec = Field(default_factory=ModelSpec)  # family, sizes, positions, attention kernel, pooling
    pretrain: PretrainSpec | None = None  # SPT's objective, masking, budget and search (None: no SPT variant)
    finetune: FinetuneSpec = Field(default_factory=FinetuneSpec)  # every variant's finetuning budget and defaults
    variants: dict[str, VariantSpec]  # name -> what is compared: its kind and its own search
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
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)  # early stopping and its rungs
    searcher: SearcherSpec = Field(default_factory=SearcherSpec)  # how range searches propose configs
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)  # CPUs, GPU share, concurrency, packs
    training: TrainingSpec = Field(default_factory=TrainingSpec)  # device, precision, LR schedule, clipping, ...
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)  # where MLflow writes
    language_model: LanguageModelSpec | None = None  # a local Hugging Face checkpoint for the FPT variants
    # The fields (section.field) the task's defaults filled in: a check may treat a value the spec did not ask for
    # differently from one it wrote (sptune.plan.warmups).
    _inherited: frozenset[str] = PrivateAttr(default=frozenset())

    # ------------------------------------------------------------ rules

    _task_defaults = model_validator(mode="wrap")(validated_under_task_defaults)
    _folder_name = field_validator("name")(checked_folder_name)

    @property
    def inherited_defaults(self) -> frozenset[str]:
        """The fields (section.field) taken from the task's defaults, not written by the spec."""
        return self._inherited

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
    def _resources_resolved(self) -> SweepSpec:
        # Resolved here, once, so every reader of the spec (plan, Tuner, trials, spec.yaml) sees a number: the pack
        # first, as a pack is one trial to the GPU share.
        res, gpus = self.resources, machine.local_gpus()
        small = small_model(self.task.name, self.model.d_model, self.model.n_layers)
        if res.pack == "auto":
            res.pack = auto_pack(small, gpus, packable(self))
        if res.gpu == "auto":
            res.gpu = auto_gpu_share(small, gpus, res.pack)
        return self

    @model_validator(mode="after")
    def _sequential_resolved(self) -> SweepSpec:
        # Before the cross checks: every reader of rerun_seeds (plan, cost, dry run) sees the most seeds.
        if self.rerun_sequential is not None:
            resolve_sequential_reruns(self)
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


# ------------------------------------------------------------ the rules across sections
# Each a function of the whole spec, run by SweepSpec._sections_agree in CROSS_CHECKS' order once every section
# is valid; a problem raises a one-paragraph error naming the field and the fix.


def check_model_family(spec: SweepSpec) -> None:
    attention_only = [name for name, kind in spec.facts_by_variant().items() if kind.attention_only]
    if spec.model.family == "ssm" and attention_only:
        fix = "use model.family: transformer, or drop the variant"
        raise problem("this variant is defined on attention weights", fix, f"variants.{attention_only[0]}")


def check_shared_positions(spec: SweepSpec) -> None:
    # qk_init copies, and frozen_attn freezes, attention maps that read the position code: with a learned
    # table each model has its own trainable one, so the maps would meet positions they never saw.
    if spec.model.positions != "learned":
        return
    attention_only = [name for name, kind in spec.facts_by_variant().items() if kind.attention_only]
    if attention_only:
        message = (f"variant '{attention_only[0]}' copies or freezes attention maps that read the position "
                   "code, but positions: learned gives each model its own trainable table (the maps would meet "
                   "positions they were not trained with)")
        fix = "use model.positions: sinusoidal (the reference's fixed table) or rotary, which every model shares"
        raise problem(message, fix, "model.positions")


def check_pretraining_stage(spec: SweepSpec) -> None:
    if spec.needs_pretraining() and (spec.pretrain is None or not spec.pretrain.enabled):
        message = "variants initialised from SPT need a pretraining stage"
        raise problem(message, "add a pretrain: section (see digits_quick.yaml)", "pretrain")


def check_language_model(spec: SweepSpec) -> None:
    uses_lm = [name for name, kind in spec.facts_by_variant().items() if kind.language_model]
    if uses_lm and spec.language_model is None:
        fix = "add language_model: {path: DIR} with a local Hugging Face checkpoint (e.g. GPT-2)"
        raise problem("this variant needs a pretrained language model", fix, f"variants.{uses_lm[0]}")


def check_pooling(spec: SweepSpec) -> None:
    # With a causal model position 0 sees only itself: cls pooling would classify a constant. Refused
    # rather than replaced by another pooling, so the spec says what is trained.
    causal = [name for name in spec.variants if spec.variant_is_causal(name)]
    if spec.model.pooling == "cls" and causal:
        message = f"cls pooling reads position 0, which sees only itself in a causal model (variant '{causal[0]}')"
        raise problem(message, "use last or mean pooling for causal models", "model.pooling")


def check_grace_period(spec: SweepSpec) -> None:
    s = spec.scheduler
    if s.type == "fifo":
        return
    # Halving stops trials after grace_period rounds (epochs, or a steps budget's evaluation rounds) at the
    # earliest: no stage may be shorter.
    budgets = [variant_budget(spec, v) for v in spec.variants]
    budgets += [spec.pretrain_budget()] if spec.pretrain and spec.pretrain_budget().rounds > 0 else []
    shortest = min(budgets, key=lambda b: b.rounds)
    if s.grace_period > shortest.rounds:
        message = f"{s.grace_period} exceeds the shortest stage ({shortest.rounds} {shortest.round_word})"
        raise problem(message, "lower grace_period", "scheduler.grace_period")


def check_searcher_mode(spec: SweepSpec) -> None:
    # Under synchronous halving every trial waits at the first rung for all of its variant's
    # trials, so none finishes before all are proposed: an async Optuna would learn nothing.
    synchronous = spec.scheduler.type in ("sha", "hyperband")
    if synchronous and spec.searcher.mode == "async" and spec.searcher.type == "optuna":
        fix = "use searcher.mode: batched (told each trial's result at the first rung), or scheduler.type: asha"
        what = "synchronous halving" if spec.scheduler.type == "sha" else "synchronous Hyperband"
        raise problem(f"an async Optuna search learns nothing under {what}", fix, "searcher.mode")


def check_hyperband_budget(spec: SweepSpec) -> None:
    # Each bracket needs a trial of its own, in every search (sptune.rules.rungs.bracket_trials).
    s = spec.scheduler
    if s.type != "hyperband":
        return
    for where, trials, epochs in _searches_for_budget(spec):
        brackets = len(hyperband_brackets(s.grace_period, s.reduction_factor, epochs))
        if trials < brackets:
            message = (f"hyperband over {epochs} epochs (grace {s.grace_period}, η {s.reduction_factor:g}) "
                       f"has {brackets} brackets, one trial each at least; this search has {trials}")
            fix = (f"give it >= {brackets} trials (num_samples; a grid: more points or grid_repeats), raise "
                   "grace_period (fewer brackets), or use scheduler.type: sha")
            raise problem(message, fix, where)


def _searches_for_budget(spec: SweepSpec) -> list[tuple[str, int, int]]:
    """(field to fix, trials, epochs) of every search that trains: the pretraining's, each variant's."""
    def budget(at: str, search: SearchSpec, samples: int, repeats: int, epochs: int) -> tuple[str, int, int]:
        if search.has_grid():
            return f"{at}grid_repeats", search.grid_size() * repeats, epochs
        return f"{at}num_samples", samples, epochs

    found = []
    p, rounds = spec.pretrain, spec.pretrain_budget().max_iterations
    if p is not None and spec.needs_pretraining() and rounds > 0 and p.checkpoint is None:
        found.append(budget("pretrain.", p.search, p.num_samples, p.grid_repeats, rounds))
    for name, v in spec.variants.items():
        at = f"variants.{name}."
        found.append(budget(at, v.search, spec.variant_samples(name), spec.variant_repeats(name),
                            variant_budget(spec, name).max_iterations))
    return found


def check_baseline(spec: SweepSpec) -> None:
    # The default may be absent (then no Δ is printed, and the results say why); a written name must be a variant.
    if "baseline" in spec.model_fields_set and spec.baseline not in spec.variants:
        fix = f"name one of the variants: {', '.join(spec.variants)}"
        raise problem(f"'{spec.baseline}' is not a variant of this spec", fix, "baseline")


def check_selection_top_k(spec: SweepSpec) -> None:
    # A search with fewer trials than top_k compares all of them (a one-point grid beside wider searches); a top_k
    # above every search's trials can never be met and was meant for another spec.
    s = spec.selection
    if not s.enabled:
        return
    trials = [n for at, n, _ in _searches_for_budget(spec) if at.startswith("variants.")]
    if s.top_k > max(trials):
        message = f"{s.top_k} candidates per variant, but no variant searches more than {max(trials)} trials"
        raise problem(message, f"use top_k <= {max(trials)}, or give the variants more trials (num_samples)",
                      "selection.top_k")


def check_variant_budgets(spec: SweepSpec) -> None:
    # Here, not on VariantSpec: a variant's num_samples may be finetune's default.
    for name, variant in spec.variants.items():
        found = repeated_choice_problem(variant.search, spec.variant_samples(name), f"variants.{name}.")
        if found:
            raise found


# The order matters: the budget mode is checked before any rule that reads a variant's budget.
CROSS_CHECKS = (
    check_model_family,
    check_shared_positions,
    check_pretraining_stage,
    check_budget_mode,
    check_variant_units,
    check_until_converged,
    check_language_model,
    check_pooling,
    check_grace_period,
    check_searcher_mode,
    check_hyperband_budget,
    check_baseline,
    check_variant_budgets,
    check_rerun_pretrain,
    check_selection_top_k,
    check_packing,
)
