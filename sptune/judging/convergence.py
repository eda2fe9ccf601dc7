"""Convergence: when a trial is done, and when a selected epoch says its model may not have converged.

Pure functions of one trial's own history (its round and best round), so every decision is the same in any
order trials run or finish. A round is an epoch, or an evaluation round of a steps budget (sptune.rules.budgets).
"""

from __future__ import annotations

from sptune.rules.budgets import Budget

# A selected epoch in the last tenth of its budget may still have been improving when the budget ran out.
LAST_SHARE = 0.1

UNCONVERGED_TEXT = "may be unconverged (selected in the last 10 % of its budget; with until_converged: at max_epochs)"


def trial_done(round_index: int, best_round: int, budget: Budget) -> bool:
    """Whether a trial stops after `round_index` rounds: at its budget's rounds; with until_converged, past them
    once validation has not improved for `patience` rounds, and at max_epochs at the latest."""
    if budget.max_rounds is None:
        return round_index >= budget.rounds
    if round_index >= budget.max_iterations:
        return True
    return round_index >= budget.rounds and round_index - best_round >= budget.patience


def may_be_unconverged(best_round: int, budget: Budget) -> bool:
    """A selected round in the last LAST_SHARE of the budget (always the last round itself); with until_converged,
    a trial that could not see `patience` rounds without improvement before max_epochs."""
    if budget.max_rounds is not None:
        return budget.max_iterations - best_round < budget.patience
    return best_round > (1 - LAST_SHARE) * budget.rounds or best_round >= budget.rounds
