"""One scheduler per stage inside the study's one Tuner: a trial is only ever compared with its own stage's."""

from __future__ import annotations

import math
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from sptune.tuning.schedulers.halving import SuccessiveHalving, trial_index
from sptune.tuning.schedulers.pack_starts import pack_aware_pick


class _StageTrials:
    """The Tune controller as one stage's scheduler sees it when choosing what to run: only that stage's
    trials still to end (FIFO or ASHA would otherwise resume another stage's trial that synchronous halving
    keeps waiting at a rung). Follows the controller's trial list from where it left off: choosing happens
    every step, and rescanning every trial of the study each time would grow with its trial count."""

    def __init__(self, tune_controller: Any, stage: str) -> None:
        self._controller, self._stage = tune_controller, stage
        # Tune hands schedulers a new wrapper of its controller every step, around the same trial list:
        # the list (it only grows) is what the view follows.
        self._source: list | None = None
        self._seen = 0  # how many of the list's trials were looked at
        self._open: list = []  # this stage's trials, in the controller's order, not yet ended

    def get_trials(self) -> list:
        trials = self._controller.get_trials()
        if trials is not self._source:
            self._source, self._seen, self._open = trials, 0, []
        for trial in trials[self._seen :]:
            if trial.config.get("stage") == self._stage:
                self._open.append(trial)
        self._seen = len(trials)
        # An ended trial never runs again in this controller: only PENDING and PAUSED ones are chosen.
        self._open = [t for t in self._open if t.status not in (Trial.TERMINATED, Trial.ERROR)]
        return self._open

    def __getattr__(self, name: str) -> Any:
        return getattr(self._controller, name)


class StageScheduler(FIFOScheduler):
    """Routes each trial to its stage's own scheduler (synchronous halving, Hyperband, ASHA or FIFO), by the
    `stage` its config names. Among what the stages' schedulers would run next, the trial created first goes
    first; a paused trial resumes only within the concurrency limit."""

    _supports_buffered_results = False  # early stopping must see every epoch's result
    packed = False  # trials train in packs (resources.pack > 1): resume paused ones pack by pack

    def __init__(self, schedulers: dict[str, TrialScheduler], max_concurrent: int | None = None,
                 packed: bool = False) -> None:
        super().__init__()
        self.schedulers, self.max_concurrent, self.packed = schedulers, max_concurrent, packed

    def _of(self, trial: Any) -> TrialScheduler:
        return self.schedulers[trial.config["stage"]]

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        # A scheduler built with its stage's metric keeps it (the Tuner's metric is bookkeeping only);
        # one built without (FIFO) takes the Tuner's.
        unset = [s for s in self.schedulers.values() if getattr(s, "_metric", None) is None]
        return all([s.set_search_properties(metric, mode, **spec) for s in unset])

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        self._of(trial).on_trial_add(tune_controller, trial)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self._of(trial).on_trial_error(tune_controller, trial)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        return self._of(trial).on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        self._of(trial).on_trial_complete(tune_controller, trial, result)

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        self._of(trial).on_trial_remove(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        picks = sorted((t for name, s in self.schedulers.items() for t in self._startable(s, name, tune_controller)),
                       key=trial_index)
        if not picks:
            return None
        if self.packed:
            return pack_aware_pick(picks, tune_controller.get_trials(), self.max_concurrent)
        trial = picks[0]
        # Tune starts every PENDING trial anyway; resuming a paused one is ours to hold back
        # while the concurrency limit is reached (several may be promoted at once).
        if trial.status == Trial.PAUSED and self._busy(tune_controller) >= (self.max_concurrent or math.inf):
            return None
        return trial

    def _startable(self, scheduler: TrialScheduler, stage: str, tune_controller: Any) -> list:
        """What the stage's scheduler would start: all of it (synchronous halving), or its one pick."""
        view = self._view(tune_controller, stage)
        if isinstance(scheduler, SuccessiveHalving):
            return scheduler.startable(view)
        pick = scheduler.choose_trial_to_run(view)
        return [] if pick is None else [pick]

    def _view(self, tune_controller: Any, stage: str) -> _StageTrials:
        views = self.__dict__.setdefault("_views", {})  # not in __init__: a scheduler unpickled by restore
        view = views.get(stage)
        if view is None:
            view = views[stage] = _StageTrials(tune_controller, stage)
        view._controller = tune_controller  # this step's wrapper; its trial list is the same
        return view

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_views"}  # this driver's controller only

    def state(self) -> dict[str, Any]:
        """What each stage's scheduler has decided, by stage label, as plain JSON (`SuccessiveHalving.state`,
        `Hyperband.state`); FIFO keeps nothing and ASHA's state is not saved (docs/design/tuning.md)."""
        return {name: s.state() for name, s in self.schedulers.items() if hasattr(s, "state")}

    def load(self, state: dict[str, Any]) -> None:
        """Take back a `state()` before Tuner.restore re-adds the trials."""
        for name, saved in state.items():
            self.schedulers[name].load(saved)

    @staticmethod
    def _busy(tune_controller: Any) -> int:
        return sum(t.status in (Trial.RUNNING, Trial.PENDING) for t in tune_controller.get_trials())

    def debug_string(self) -> str:
        return "\n".join(f"{name}: {s.debug_string()}" for name, s in self.schedulers.items())
