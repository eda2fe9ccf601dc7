"""The spec's rules across the budget fields (budget mode, until_converged, steps vs a variant's epochs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sptune.rules.budgets import TOTAL_MATCHED
from sptune.spec.fields import problem

if TYPE_CHECKING:
    from sptune.spec.sweep_spec import SweepSpec


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
