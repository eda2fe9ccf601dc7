"""How long one trial trains, and the study's budget mode: the one place a variant's budget is decided.

A budget counts epochs (passes over the training split) or optimizer steps. With steps, a trial's Tune
iteration is an *evaluation round* of `eval_every` optimizer steps (the last one may be shorter): every
trial of a search does the same steps whatever its batch size, and halving's rungs (`grace_period`) keep
one time unit. With epochs, the iteration is the epoch.

The mode (the spec's `budget:`): `finetune_matched` gives every variant the same finetuning budget, SPT's
pretraining on top (the papers' main tables); `total_matched` adds the pretraining budget to every variant
that does not start from SPT, so every variant's model trains the same number of epochs (or steps).
Pure Python (no spec, no torch): the spec checks with these numbers, the plan computes each trial's budget with
them once (`sptune.plan.trial_budgets`), and the trainables and the results read the plan's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

Unit = Literal["epochs", "steps"]
FINETUNE_MATCHED, TOTAL_MATCHED = "finetune_matched", "total_matched"
BUDGET_MODES = (FINETUNE_MATCHED, TOTAL_MATCHED)
# A steps budget without eval_every is evaluated this many times: as often as the default epochs.
DEFAULT_ROUNDS = 10

MODE_TEXT = {
    FINETUNE_MATCHED: "every variant gets the same finetuning budget; SPT variants pretrain on top of it",
    TOTAL_MATCHED: "variants that do not start from SPT also train for SPT's pretraining budget, so every "
                   "variant's model trains as long in all",
}


@dataclass(frozen=True)
class Budget:
    """One trial's budget in one stage (a pretraining, or a variant's finetuning)."""

    unit: Unit
    amount: int  # epochs or optimizer steps a trial trains (the nominal budget)
    eval_every: int | None = None  # steps: optimizer steps per evaluation round (None with epochs)
    added: int = 0  # total_matched: the pretraining budget (same unit) included in `amount`
    patience: int | None = None  # until_converged: epochs without improvement that end a trial past `rounds`
    max_rounds: int | None = None  # until_converged: the most epochs a trial trains

    @property
    def rounds(self) -> int:
        """Nominal Tune iterations: the epochs, or the evaluation rounds of a steps budget."""
        if self.unit == "epochs":
            return self.amount
        return math.ceil(self.amount / self.eval_every)

    @property
    def max_iterations(self) -> int:
        """The most Tune iterations a trial runs: what the schedulers' max_t and the LR schedule span."""
        return max(self.max_rounds or 0, self.rounds)

    @property
    def round_word(self) -> str:
        return "epochs" if self.unit == "epochs" else "evaluation rounds"

    def round_steps(self, round_index: int) -> int:
        """Optimizer steps of evaluation round `round_index` (1-based) of a steps budget."""
        done = (round_index - 1) * self.eval_every
        return max(0, min(self.eval_every, self.amount - done))

    def optim_fields(self) -> dict[str, int | None]:
        """What the training loop needs (sptune.training.loops.OptimConfig): its iterations, and with steps
        the total steps (the LR schedule's horizon) and the steps of each round."""
        if self.unit == "epochs":
            return {"epochs": self.max_iterations, "steps": None, "eval_every": None}
        return {"epochs": self.rounds, "steps": self.amount, "eval_every": self.eval_every}

    def describe(self) -> str:
        """e.g. '20 epochs', '2000 optimizer steps (20 rounds of 100)', '20 epochs, then until converged ...'."""
        if self.unit == "steps":
            text = f"{self.amount} optimizer steps ({self.rounds} evaluation rounds of {self.eval_every})"
        else:
            text = f"{self.amount} epochs"
        if self.max_rounds:
            text += (f", then on until validation has not improved for {self.patience} epochs "
                     f"(at most {self.max_rounds})")
        return text


def steps_per_epoch(rows: int, batch_size: int) -> int:
    """Optimizer steps in one pass over `rows` training rows (the last batch may be short)."""
    return math.ceil(rows / batch_size)


def section_budget(epochs: int, steps: int | None, eval_every: int | None) -> Budget:
    """A spec section's budget: its steps when set (evaluated every `eval_every` steps, by default
    DEFAULT_ROUNDS times), else its epochs."""
    if steps is None:
        return Budget("epochs", epochs)
    return Budget("steps", steps, eval_every or math.ceil(steps / DEFAULT_ROUNDS))


def until_converged(budget: Budget, patience: int, max_epochs: int) -> Budget:
    """An epochs budget that may train past its epochs until validation stops improving (at most max_epochs)."""
    return Budget(budget.unit, budget.amount, budget.eval_every, budget.added, patience, max_epochs)


def matched(finetune: Budget, pretraining: Budget | None, mode: str, starts_from_spt: bool) -> Budget:
    """A variant's finetuning budget under the study's mode: with total_matched, a variant that does not
    start from SPT also trains for the pretraining budget (its cap, with until_converged, too)."""
    if mode != TOTAL_MATCHED or starts_from_spt or pretraining is None or not pretraining.amount:
        return finetune
    if pretraining.unit != finetune.unit:
        raise ValueError("total_matched needs pretraining and finetuning budgets in one unit")
    added = pretraining.amount
    cap = finetune.max_rounds + added if finetune.max_rounds else None
    return Budget(finetune.unit, finetune.amount + added, finetune.eval_every, added, finetune.patience, cap)


class BudgetedSpec(Protocol):
    """What `variant_budget` reads of a spec (`sptune.spec.SweepSpec`): its budgets as written and its mode."""

    budget: str

    def pretrain_budget(self) -> Budget: ...

    def finetune_budget(self, name: str | None = None) -> Budget: ...

    def needs_pretraining(self) -> bool: ...

    def variant_objective(self, name: str) -> str | None: ...


def variant_budget(spec: BudgetedSpec, name: str) -> Budget:
    """A variant's budget under the study's mode (`budget:`): what each of its trials trains. The spec checks
    its stages against it; the plan gives it to the variant's trials."""
    pretraining = spec.pretrain_budget() if spec.needs_pretraining() else None
    return matched(spec.finetune_budget(name), pretraining, spec.budget, spec.variant_objective(name) is not None)
