"""Synchronous Hyperband for one stage: several brackets of successive halving, order-independent.

Hyperband (Li et al. 2018) hedges successive halving's bet that early epochs rank configs well: it splits
the trial budget across brackets that start halving later and later, the last training to the end. Bracket
k is `SuccessiveHalving` over the rungs of `sha` from the k-th on; the stage's trials fill the brackets in
creation order (`sptune.rules.rungs.hyperband_plan`), so the same results give the same decisions in any
finish order and the trial-epochs spent are the plan's. Why not Ray's HyperBandScheduler: docs/design/tuning.md.
"""

from __future__ import annotations

from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler

from sptune.rules.rungs import hyperband_plan
from sptune.tuning.schedulers.halving import SuccessiveHalving, trial_index


class Hyperband(FIFOScheduler):
    """Brackets of synchronous successive halving over one stage's `n_trials` trials."""

    _supports_buffered_results = False  # every epoch's result must be seen at its rung

    def __init__(
        self, n_trials: int, max_t: int, grace_period: int, reduction_factor: float, metric: str, mode: str
    ) -> None:
        super().__init__()
        self.plan = hyperband_plan(n_trials, grace_period, reduction_factor, max_t)
        self.brackets = [
            SuccessiveHalving(n, max_t, grace_period, reduction_factor, metric, mode, rungs=rungs)
            for n, rungs in self.plan
        ]
        self.bracket_of: dict[str, SuccessiveHalving] = {}

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        return True  # built with its search's own metric and mode

    def _assign(self, trial: Trial) -> SuccessiveHalving:
        """The k-th trial of the stage (in creation order) goes to the bracket whose share
        holds k; a trial added again (a retry, or after Tuner.restore) keeps its bracket."""
        if trial.trial_id not in self.bracket_of:
            seen, k = 0, len(self.bracket_of)
            bracket = self.brackets[-1]  # more trials than the budget (never planned): no early stopping
            for candidate, (n, _) in zip(self.brackets, self.plan, strict=True):
                if k < seen + n:
                    bracket = candidate
                    break
                seen += n
            self.bracket_of[trial.trial_id] = bracket
        return self.bracket_of[trial.trial_id]

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        self._assign(trial).on_trial_add(tune_controller, trial)

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict) -> str:
        return self.bracket_of[trial.trial_id].on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller: Any, trial: Trial, result: dict) -> None:
        self.bracket_of[trial.trial_id].on_trial_complete(tune_controller, trial, result)

    def on_trial_error(self, tune_controller: Any, trial: Trial) -> None:
        self.bracket_of[trial.trial_id].on_trial_error(tune_controller, trial)

    def on_trial_remove(self, tune_controller: Any, trial: Trial) -> None:
        self.bracket_of[trial.trial_id].on_trial_remove(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller: Any) -> Trial | None:
        """What the brackets would run next, the trial created first going first."""
        picks = [b.choose_trial_to_run(tune_controller) for b in self.brackets]
        picks = [t for t in picks if t is not None]
        return min(picks, key=trial_index) if picks else None

    def state(self) -> dict[str, Any]:
        """Plain JSON: each bracket's `SuccessiveHalving.state()` and the bracket (its position) of each trial id."""
        position = {id(b): k for k, b in enumerate(self.brackets)}
        return {"brackets": [b.state() for b in self.brackets],
                "bracket_of": {tid: position[id(b)] for tid, b in self.bracket_of.items()}}

    def load(self, state: dict[str, Any]) -> None:
        """Take back a `state()` before Tune re-adds the trials: each keeps its bracket and its rungs."""
        for bracket, saved in zip(self.brackets, state["brackets"], strict=True):
            bracket.load(saved)
        self.bracket_of = {tid: self.brackets[k] for tid, k in state["bracket_of"].items()}

    def debug_string(self) -> str:
        return "Hyperband: " + "; ".join(f"[{b.debug_string()}]" for b in self.brackets)
