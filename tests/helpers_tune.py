"""What Tune's controller does with a scheduler, minus actors: the harness the scheduler tests and the
contract suite drive sptune's schedulers through with Ray Tune's own `Trial` objects."""

from __future__ import annotations

from types import SimpleNamespace

from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler


class PauseLog:
    """The searcher's side of pausing (what StagedSearcher does with on_pause / on_unpause)."""

    def __init__(self) -> None:
        self.paused: set[str] = set()

    def on_pause(self, trial_id: str) -> None:
        self.paused.add(trial_id)

    def on_unpause(self, trial_id: str) -> None:
        self.paused.discard(trial_id)


class Controller:
    """Trial statuses, stop and resume as Tune's controller handles them for a scheduler."""

    def __init__(self, scheduler: TrialScheduler) -> None:
        self.scheduler, self.trials = scheduler, []
        self.search_alg = SimpleNamespace(searcher=PauseLog())

    def get_trials(self) -> list[Trial]:
        return self.trials

    def add(self, trial: Trial) -> None:
        self.trials.append(trial)
        self.scheduler.on_trial_add(self, trial)

    def stop_trial(self, trial: Trial) -> None:
        if trial.status in (Trial.PENDING, Trial.PAUSED):
            self.scheduler.on_trial_remove(self, trial)
        else:
            self.scheduler.on_trial_complete(self, trial, {})
        trial.set_status(Trial.TERMINATED)

    def start_chosen(self) -> None:
        while (trial := self.scheduler.choose_trial_to_run(self)) is not None:
            trial.set_status(Trial.RUNNING)

    def running(self) -> list[Trial]:
        return [t for t in self.trials if t.status == Trial.RUNNING]


def stub_trial(index: int, stage: str = "a") -> Trial:
    return Trial("x", config={"stage": stage}, trial_id=f"t{index}", experiment_tag=f"{index}_lr=x", stub=True)
