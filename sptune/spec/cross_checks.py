"""The rules a sweep spec must keep that need more than one of its sections, each a function of the whole spec
(`SweepSpec` runs them in `CROSS_CHECKS`' order once its sections are valid): a problem raises a one-paragraph
error naming the field and the fix."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sptune.rules.budgets import TOTAL_MATCHED, variant_budget
from sptune.rules.rungs import hyperband_brackets
from sptune.spec.budget import repeated_choice_problem
from sptune.spec.fields import problem
from sptune.spec.search import SearchSpec

if TYPE_CHECKING:  # the spec calls these; they only read it
    from sptune.spec.sweep_spec import SweepSpec


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
    # The default may be absent (then no Δ is printed, and the results say why); a name the
    # user wrote must be one of the variants.
    if "baseline" in spec.model_fields_set and spec.baseline not in spec.variants:
        fix = f"name one of the variants: {', '.join(spec.variants)}"
        raise problem(f"'{spec.baseline}' is not a variant of this spec", fix, "baseline")


def check_variant_budgets(spec: SweepSpec) -> None:
    # Here, not on VariantSpec: a variant's num_samples may be finetune's default.
    for name, variant in spec.variants.items():
        found = repeated_choice_problem(variant.search, spec.variant_samples(name), f"variants.{name}.")
        if found:
            raise found


def check_rerun_pretrain(spec: SweepSpec) -> None:
    if not spec.rerun_pretrain:
        return
    if spec.rerun_seeds < 2:
        fix = "set rerun_seeds: 3 (or more), or drop rerun_pretrain"
        raise problem("re-pretraining per seed needs seed re-runs (rerun_seeds > 1)", fix, "rerun_pretrain")
    if not spec.needs_pretraining():
        raise problem("no variant starts from SPT: nothing to re-pretrain", "drop rerun_pretrain", "rerun_pretrain")
    if spec.pretrain.checkpoint is not None:
        message = "a given SPT checkpoint (pretrain.checkpoint) cannot be re-pretrained per seed"
        raise problem(message, "drop pretrain.checkpoint or rerun_pretrain", "rerun_pretrain")


def check_budget_mode(spec: SweepSpec) -> None:
    if spec.budget != TOTAL_MATCHED or not spec.needs_pretraining():
        return
    if spec.pretrain.checkpoint is not None:
        message = ("total_matched adds SPT's pretraining budget to the other variants; a given checkpoint's "
                   "is unknown")
        fix = "use budget: finetune_matched, or pretrain here (drop pretrain.checkpoint)"
        raise problem(message, fix, "budget")
    pre, fine = spec.pretrain_budget(), spec.finetune_budget()
    if pre.amount and pre.unit != fine.unit:
        message = (f"total_matched adds the pretraining budget ({pre.describe()}) to the finetuning one "
                   f"({fine.describe()}): they must count the same unit")
        raise problem(message, "give pretrain and finetune both steps, or both epochs", "budget")


def check_until_converged(spec: SweepSpec) -> None:
    u = spec.finetune.until_converged
    if u is not None and spec.training.schedule == "cosine":
        message = ("until_converged stops a trial once validation stalls, but a cosine schedule decays over "
                   "max_epochs: a trial stopped early stalls at a still-high LR, not at convergence")
        fix = "use training.schedule: constant (a fixed LR after the warm-up)"
        raise problem(message, fix, "training.schedule")
    longest = max(spec.finetune_budget(name).amount for name in spec.variants)
    if u is not None and u.max_epochs < longest:
        message = f"max_epochs {u.max_epochs} is below the {longest} finetuning epochs a variant trains anyway"
        fix = f"use max_epochs >= {longest}, e.g. {2 * longest}"
        raise problem(message, fix, "finetune.until_converged.max_epochs")


def check_variant_units(spec: SweepSpec) -> None:
    # A variant's own epochs would leave the steps budget every other variant trains with.
    if spec.finetune.steps is None:
        return
    for name, variant in spec.variants.items():
        if variant.epochs is not None:
            message = f"the finetuning budget is {spec.finetune.steps} optimizer steps (finetune.steps)"
            raise problem(message, "drop the variant's epochs", f"variants.{name}.epochs")


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
)
