"""The stage ledger: the one owner of the study's stages, what each needs, its trials' outcomes, its selection and
its failure. No Ray: the study's Tune searcher (`sptune.tuning.stages`) asks it which stages are released and tells
it which trial it started; the driver tells it each trial's end and records the events it returns
(`sptune.study.tuner_run`).

A stage is *released* once what it needs is selected (or given: an SPT checkpoint known without trials); its
configs, when it re-trains selected ones, are fixed then (`sptune.judging.stage_picks`). It is *selected* once its
last trial has ended, from the outcomes alone: the same selections whatever order its trials end in. A stage
whose selection finds nothing usable *fails*, and so does every stage that needs it, never waiting forever."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from sptune.errors import RuntimeFailure
from sptune.judging.selection import Selection, TrialOutcome
from sptune.judging.stage_graph import Stage, StageKind, StartingCheckpoints
from sptune.judging.stage_picks import Pick, given_configs, pick, spt_checkpoints_of
from sptune.judging.stats import finite_float

STALL_FIX = "rerun with --resume --output DIR; if it stalls again, report it"


@dataclass(frozen=True)
class StageReleased:
    """A stage may start: `configs` are what it trains (None: its own searcher proposes), `carry` what each of
    its trials carries besides (an SPT variant's search: the checkpoint every trial starts from)."""

    label: str
    configs: list[dict[str, Any]] | None
    carry: dict[str, Any]


@dataclass(frozen=True)
class StageSelected:
    """A stage's selection, with what the state records of it."""

    label: str
    kind: StageKind
    variant: str  # its plan's variant_or_objective
    final: bool  # the pick its variant (or pretraining) goes on with
    pick: Pick
    trial_scores: list[float | None]  # each trial's best epoch score as it last reported it, in the order started
    released_at: float


@dataclass(frozen=True)
class StageFailed:
    label: str
    where: str
    problem: str
    fix: str


Event = StageReleased | StageSelected | StageFailed


@dataclass
class _Released:
    """A released stage: how and when, its trials started (in order) and ended, and the most it may start."""

    release: StageReleased
    at: float
    budget: int
    started: list[str] = field(default_factory=list)
    ended: dict[str, TrialOutcome] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return len(self.started) >= self.budget and len(self.ended) == len(self.started)

    @property
    def running(self) -> int:
        """Trials started and not yet ended."""
        return len(self.started) - len(self.ended)


def _selected(stage: Stage, chosen: Pick, outcomes: list[TrialOutcome], released_at: float) -> StageSelected:
    """A stage's selection event, with each trial's best epoch score as it last reported it."""
    score = "best_" + stage.trial_plan.epoch_score
    scores = [finite_float((o.metrics or {}).get(score)) for o in outcomes]
    return StageSelected(stage.label, stage.kind, stage.trial_plan.variant_or_objective, stage.final, chosen, scores,
                         released_at)


def chain_depths(stages: list[Stage]) -> dict[str, int]:
    """Each stage's longest chain of stages waiting on it (deepest first: pretraining before what needs it)."""
    def depth(label: str) -> int:
        return 1 + max((depth(s.label) for s in stages if label in s.needs), default=0)

    return {s.label: depth(s.label) for s in stages}


class Ledger:
    """Every stage of the study's one Tuner, from what was selected before (`selections`, `ranked`: a resumed
    study's state) and what pretrainings give without trials (`checkpoints`).

    stages: the plan's stages, each naming the stages it waits for (`needs`)
    checkpoints: pretraining label -> seed (None: the one checkpoint every trial starts from) -> the SPT
        checkpoint a spec gives, so that stage needs no trials
    selections: stage label -> the selections already made (a resumed study's), in seed order
    ranked: stage label -> its best configs, best first (a resumed study's), for the stages that choose among
        them (seed-robust candidates); None: none yet
    """

    def __init__(self, stages: list[Stage], checkpoints: StartingCheckpoints, selections: dict[str, list[Selection]],
                 ranked: dict[str, list[Selection]] | None = None) -> None:
        self.stages = {s.label: s for s in stages}
        self.checkpoints = {label: dict(c) for label, c in checkpoints.items()}
        self.selected = {label: list(s) for label, s in selections.items()}
        self.ranked = {label: list(r) for label, r in (ranked or {}).items()}  # label -> its best configs, best first
        self.candidates: dict[str, list[dict[str, Any]]] = {}  # a candidates stage's label -> results.json's entries
        self.failed: dict[str, tuple[str, str, str]] = {}  # label -> (where, problem, fix)
        self.released: dict[str, _Released] = {}  # in the order released
        self.owner: dict[str, str] = {}  # trial -> its stage
        self.unread: list[Event] = []  # events not yet taken
        self.depth = chain_depths(stages)

    def load(self, other: Ledger) -> None:
        """Take `other`'s state in place: whoever holds this ledger sees the restored one (Tune restores its
        searcher into the object the driver's callbacks were unpickled with)."""
        vars(self).update(vars(other))

    # ------------------------------------------------------------ events

    def take_events(self) -> list[Event]:
        """Every event since the last take, in the order they happened."""
        events, self.unread = self.unread, []
        return events

    # ------------------------------------------------------------ release

    def _satisfied(self, need: str) -> bool:
        return need in self.selected or need in self.checkpoints

    def _can_run(self, label: str) -> bool:
        """It has run, or will once what it waits for is selected (nothing it needs failed)."""
        if label in self.failed:
            return False
        return all(self._satisfied(n) or (n in self.stages and self._can_run(n)) for n in self.stages[label].needs)

    def _release_ready(self) -> bool:
        ready = [s for label, s in self.stages.items()
                 if label not in self.released and label not in self.failed and all(map(self._satisfied, s.needs))]
        for stage in ready:
            self._release(stage)
        return bool(ready)

    def _release(self, stage: Stage) -> None:
        spt = self.checkpoints.get(stage.spt_from) if stage.spt_from else None
        if stage.kind is StageKind.SEARCH:
            # An SPT variant's search: every trial starts from the selected checkpoint.
            event = StageReleased(stage.label, None, {} if spt is None else {"spt_checkpoint": spt[None]})
            budget = stage.budget
        else:
            # A later look of sequential re-runs whose comparisons are all decided trains nothing.
            configs = given_configs(stage, self._continued(stage), spt) if stage.wanted(self.selected) else []
            event, budget = StageReleased(stage.label, configs, {}), len(configs)
        self.released[stage.label] = _Released(event, time.time(), budget)
        self.unread.append(event)

    def releases(self) -> list[StageReleased]:
        """Every stage released so far, in the order released."""
        return [r.release for r in self.released.values()]

    def _continued(self, stage: Stage) -> list[Selection]:
        """The best configs, best first, of the stage it continues from (re-runs: its pick; a search: none)."""
        if stage.kind is StageKind.SEARCH:
            return []
        if stage.kind is StageKind.RERUN:
            return self.selected[stage.continues_from][:1]
        return self.ranked.get(stage.continues_from) or self.selected[stage.continues_from][:1]

    def advance(self) -> None:
        """Release what is ready and select what is complete, until neither changes anything (a stage released
        with no trials is selected at once, which may release the next)."""
        while self._release_ready() | self._select_ready():
            pass

    # ------------------------------------------------------------ trials

    def wants_trial(self, label: str) -> bool:
        """The released stage may start another trial (within its budget, and not failed)."""
        trials = self.released[label]
        return len(trials.started) < trials.budget and label not in self.failed

    def trial_started(self, trial_id: str, label: str) -> None:
        self.released[label].started.append(trial_id)
        self.owner[trial_id] = label

    def ran_out(self, label: str) -> None:
        """Its searcher has no more configs (e.g. a short grid): it ends with the trials it started."""
        self.released[label].budget = len(self.released[label].started)

    def stage_of(self, trial_id: str) -> str | None:
        return self.owner.get(trial_id)

    def open(self) -> bool:
        """Some stage has trials still to start: a released one within its budget, or one that will be released."""
        return any(map(self.wants_trial, self.released)) or any(
            label not in self.released and self._can_run(label) for label in self.stages)

    def trial_ended(self, trial_id: str, outcome: TrialOutcome) -> list[Event]:
        """A trial ended (the driver saw it): its stage is selected once all its trials have. Returns every event
        since the last take, this end's included."""
        label = self.owner.get(trial_id)
        if label is not None:
            self.released[label].ended[trial_id] = outcome
            self._select_ready()
        return self.take_events()

    def stall(self) -> None:
        """Tune runs none of our trials while stages still wait for some (a searcher state that does not match
        Tune's trial list does this): nothing can ever end, select or release a stage, so every stage not yet
        selected fails, and the study stops with an error instead of waiting forever."""
        for label in self.stages:
            if label not in self.selected and label not in self.failed:
                waited = self.released[label].running if label in self.released else 0
                problem = f"stalled: waits for {waited} trial(s) that Tune is not running, with none left to run"
                self._fail(label, (label, problem, STALL_FIX))

    # ------------------------------------------------------------ selection

    def _select_ready(self) -> bool:
        ready = [label for label, trials in self.released.items()
                 if label not in self.selected and label not in self.failed and trials.complete]
        for label in ready:
            self._select(self.stages[label])
        return bool(ready)

    def _select(self, stage: Stage) -> None:
        trials = self.released[stage.label]
        outcomes = [trials.ended[t] for t in trials.started]  # the order does not matter: ranking breaks ties
        try:
            chosen = pick(stage, outcomes, self._continued(stage))
        except RuntimeFailure as failure:
            self._fail(stage.label, (failure.where, failure.problem, failure.fix))
            return
        self.selected[stage.label] = chosen.picked
        if chosen.ranked is not None:
            self.ranked[stage.label] = chosen.ranked
        if chosen.candidates is not None:
            self.candidates[stage.label] = chosen.candidates
        spt = spt_checkpoints_of(stage, chosen.picked)
        if spt is not None:
            self.checkpoints[stage.label] = spt
        self.unread.append(_selected(stage, chosen, outcomes, trials.at))

    def _fail(self, label: str, failure: tuple[str, str, str]) -> None:
        self.failed[label] = failure
        self.unread.append(StageFailed(label, *failure))
