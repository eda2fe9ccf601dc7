"""The study's stages: every search of the study is a *stage* of its one Tuner, run by one staged searcher.

A stage is one `SearchPlan`'s trials: a pretraining search, a variant's search, what makes a variant's pick after
it (`sptune.tuning.selection_stages`: its LR extension's rounds, seed-robust selection's candidates), or the
re-runs per seed of a selected config (a variant's, or with `rerun_pretrain` a pretraining's). A stage that needs
another's selection (an SPT variant's search needs its pretraining's checkpoint; an extension round or the
candidates need the pick so far; re-runs need their variant's pick) suggests nothing until that selection is made;
then it is *released*: its own searcher starts proposing, and its trials carry what the selection gave them
(`spt_checkpoint`, the selected config). Each stage keeps its own searcher, trial budget and early stopping
(`sptune.tuning.schedulers.by_stage`), and is selected by the rule a finished search is
(`sptune.judging.selection`), from what the driver saw of its ended trials.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from ray.tune.search import Searcher

from sptune.errors import RuntimeFailure
from sptune.judging.selection import Selection, TrialOutcome, rank_trials, select_each
from sptune.plan import seeds
from sptune.plan.lr_extension import MAX_ROUND_POINTS, round_trials
from sptune.plan.study_plan import SearchPlan, StudyPlan
from sptune.tuning.searchers import FixedConfigs
from sptune.tuning.selection_stages import (
    candidate_configs,
    extension_configs,
    rerun_configs,
    select_candidates,
    select_extension,
)

# label -> seed -> the SPT checkpoint a finetuning trial starts from (selected, or given without trials);
# seed None: the one checkpoint every trial starts from.
StartingCheckpoints = dict[str, dict[int | None, str]]


@dataclass(frozen=True)
class Stage:
    """One search of the study inside its one Tuner."""

    search: SearchPlan  # what it searches; any other stage: the search whose configs it re-trains
    rerun_seeds: tuple[int, ...] = ()  # a re-run stage: one trial per seed, no early stopping
    spt_from: str | None = None  # finetuning from SPT: the label whose checkpoint(s) its trials start from
    after: str | None = None  # the stage whose pick it continues from (None: its search)
    candidate_seeds: tuple[int, ...] = ()  # a candidates stage: each of `top_k` configs once per seed, to the end
    top_k: int = 1  # a search: how many best configs it ranks (for candidates); candidates: how many it re-trains
    final: bool = True  # its pick is the one its variant (or pretraining) goes on with: marked selected in MLflow
    extend_round: int = 0  # an LR extension's round (from 1): LRs beyond the bound its pick sits at, to the end
    extend_seeds: tuple[int, ...] = ()  # ... the seeds of its trials, in the order of its LRs

    @property
    def kind(self) -> str:
        """search | extend | candidates | rerun."""
        if self.rerun_seeds:
            return "rerun"
        return "extend" if self.extend_round else "candidates" if self.candidate_seeds else "search"

    @property
    def is_rerun(self) -> bool:
        return self.kind == "rerun"

    @property
    def source(self) -> str:
        """The label of the stage whose selection gives its configs (a search: its own)."""
        return self.after or self.search.label

    @cached_property
    def plan(self) -> SearchPlan:
        """The plan its trials run under (given configs are filled in when it is released)."""
        phase = {"rerun": "rerun", "extend": "extend", "candidates": "candidate"}.get(self.kind)
        if phase is None:
            return self.search
        return replace(self.search, phase=phase, num_samples=1, searcher="grid", grid_repeats=1)

    @property
    def label(self) -> str:
        return self.search.extend_label(self.extend_round) if self.extend_round else self.plan.label

    @property
    def budget(self) -> int:
        """Its most trials (a stage given fewer configs when released ends sooner)."""
        if self.kind == "rerun":
            return len(self.rerun_seeds)
        if self.kind == "candidates":
            return self.top_k * len(self.candidate_seeds)
        if self.kind == "extend":
            return round_trials(self.search.space.lr)
        return self.search.n_trials

    @property
    def needs(self) -> tuple[str, ...]:
        """The labels whose selections (or given checkpoints) it waits for."""
        return ((self.source,) if self.kind != "search" else ()) + ((self.spt_from,) if self.spt_from else ())


def variant_stages(plan: StudyPlan, search: SearchPlan, rerun_seeds: tuple[int, ...],
                   rerun_spt: str | None) -> list[Stage]:
    """A variant's stages in order: its search, its LR extension's rounds, its candidates (seed-robust selection),
    its re-runs (`rerun_seeds`, starting from `rerun_spt`'s checkpoints); each continues from the one before."""
    top_k, candidate_seeds = plan.spec.selection.top_k, tuple(plan.candidate_seeds())
    rounds, after = plan.extend_rounds(search), {"spt_from": search.init_from, "top_k": top_k}
    chain = [Stage(search, **after, final=not (rounds or candidate_seeds))]
    for r in range(1, rounds + 1):
        round_seeds = tuple(seeds.extension_seeds(plan.spec.seed, (r - 1) * MAX_ROUND_POINTS, MAX_ROUND_POINTS))
        chain.append(Stage(search, **after, after=chain[-1].label, extend_round=r, extend_seeds=round_seeds,
                           final=r == rounds and not candidate_seeds))
    if candidate_seeds:
        chain.append(Stage(search, **after, after=chain[-1].label, candidate_seeds=candidate_seeds))
    if rerun_seeds:
        chain.append(Stage(search, rerun_seeds, rerun_spt, after=chain[-1].label))
    return chain


def spt_checkpoints_of(stage: Stage, picked: list[Selection]) -> dict[int | None, str] | None:
    """What a pretraining stage's selection gives the stages that start from it: its checkpoint, or
    for its re-runs one per seed. None for a variant's stage."""
    if not stage.search.is_pretraining:
        return None
    if stage.is_rerun:
        return {int(s.config["seed"]): s.checkpoint_path for s in picked}
    return {None: picked[0].checkpoint_path}


class StagedSearcher(Searcher):
    """Every stage's own searcher in one Tune searcher. A stage suggests only once released (what it needs is
    selected or given), round-robin with the other released stages within its own budget, and is selected as
    soon as its last trial has ended; each result goes back to the searcher that proposed the trial.
    `selections` holds what was selected before (a resumed study's state; `ranked`: the best configs of those
    that rank some for candidates), `checkpoints` what pretrainings give without trials (a given or cached
    checkpoint, 0 epochs). Among released stages, those with the
    longest chain of stages waiting on them go first (pretraining before the searches that need it).
    It also limits how many trials run at once, leaving out trials paused at a rung (docs/design/tuning.md)."""

    def __init__(
        self,
        stages: list[Stage],
        searchers: dict[str, Searcher],
        fixed: dict[str, dict[str, Any]],
        checkpoints: StartingCheckpoints,
        selections: dict[str, list[Selection]],
        ranked: dict[str, list[Selection]] | None = None,
    ) -> None:
        super().__init__()
        self.stages = {s.label: s for s in stages}
        self.pending = dict(searchers)  # built up front (not re-runs), not released yet
        self.searchers: dict[str, Searcher] = {}  # the released stages' searchers, in the order released
        self.stage_fixed = fixed  # what each stage's trials carry besides their searched values
        self.fixed: dict[str, dict[str, Any]] = {}  # ... and once released, its SPT checkpoint too
        self.budgets: dict[str, int] = {}
        self.suggested: dict[str, int] = {}
        self.owner: dict[str, str] = {}  # trial -> its stage
        self.turn = 0  # round-robin: the released stage after the last one to suggest
        self.max_concurrent: int | None = None
        self.live: set[str] = set()  # suggested, not yet ended
        self.paused: set[str] = set()  # live, but waiting at a rung without a slot
        self.checkpoints = {label: dict(c) for label, c in checkpoints.items()}
        self.selected = {label: list(s) for label, s in selections.items()}
        self.ranked = {label: list(r) for label, r in (ranked or {}).items()}  # label -> its best configs, best first
        self.candidates: dict[str, list[dict[str, Any]]] = {}  # a candidates stage's label -> results.json's entries
        self.failed: dict[str, tuple[str, str, str]] = {}  # label -> RuntimeFailure's (where, problem, fix)
        self.outcomes: dict[str, dict[str, TrialOutcome]] = {label: {} for label in self.stages}
        self.released_at: dict[str, float] = {}
        self.news: list[str] = []  # labels selected (or failed) since the driver last looked
        self.depth = {label: self._depth(label) for label in self.stages}

    def _depth(self, label: str) -> int:
        waiting = [s.label for s in self.stages.values() if label in s.needs]
        return 1 + max((self._depth(w) for w in waiting), default=0)

    # ------------------------------------------------------------ release

    def _satisfied(self, need: str) -> bool:
        return need in self.selected or need in self.checkpoints

    def _can_run(self, label: str) -> bool:
        """It has run, or will once what it waits for is selected (nothing it needs failed)."""
        if label in self.failed:
            return False
        needs = self.stages[label].needs
        return all(self._satisfied(n) or (n in self.stages and self._can_run(n)) for n in needs)

    def _release_ready(self) -> bool:
        released = False
        for label, stage in self.stages.items():
            if label not in self.searchers and label not in self.failed and all(map(self._satisfied, stage.needs)):
                self._release(stage)
                released = True
        return released

    def _release(self, stage: Stage) -> None:
        label, fixed = stage.label, dict(self.stage_fixed[stage.label])
        spt = self.checkpoints.get(stage.spt_from) if stage.spt_from else None
        budget = stage.budget
        if stage.kind == "search":
            searcher: Searcher = self.pending.pop(label)
            if spt is not None:  # an SPT variant's search: every trial starts from the selected checkpoint
                fixed["spt_checkpoint"] = spt[None]
        else:
            configs = self._given_configs(stage, spt)
            searcher, budget = FixedConfigs(configs), len(configs)
        self.searchers[label], self.budgets[label], self.fixed[label] = searcher, budget, fixed
        self.suggested[label] = 0
        self.released_at[label] = time.time()

    def _given_configs(self, stage: Stage, spt: dict[int | None, str] | None) -> list[dict[str, Any]]:
        """What a stage that re-trains selected configs trains, fixed when it is released."""
        if stage.kind == "candidates":
            return candidate_configs(stage.search, self._ranked(stage.source), stage.candidate_seeds, spt)
        if stage.kind == "extend":
            return extension_configs(stage.search, self._ranked(stage.source), stage.extend_round, stage.extend_seeds,
                                     spt)
        return rerun_configs(stage.search, self.selected[stage.source][0], stage.rerun_seeds, spt)

    def _ranked(self, label: str) -> list[Selection]:
        """A selected stage's best configs, best first (its pick alone if it ranked none)."""
        return self.ranked.get(label) or self.selected[label][:1]

    # ------------------------------------------------------------ Tune's calls

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        self.max_concurrent = max_concurrent
        return True  # we limit, so Ray's ConcurrencyLimiter around us does not

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return True  # every stage's searcher was built with its own space, metric and mode

    def on_pause(self, trial_id: str) -> None:
        self.paused.add(trial_id)

    def on_unpause(self, trial_id: str) -> None:
        self.paused.discard(trial_id)

    def _at_limit(self) -> bool:
        return self.max_concurrent is not None and len(self.live - self.paused) >= self.max_concurrent

    def _open(self) -> list[str]:
        """Stages with trials still to suggest: released ones within their budget, and those that will be."""
        released = [label for label in self.searchers if self.suggested[label] < self.budgets[label]]
        waiting = [label for label in self.stages if label not in self.searchers and self._can_run(label)]
        return released + waiting

    def _order(self) -> list[str]:
        """The released stages in the order they are asked: deepest first, round-robin within a depth."""
        names = list(self.searchers)
        turn = names[self.turn :] + names[: self.turn]
        return sorted(turn, key=lambda label: -self.depth[label])  # stable

    def _advance(self) -> None:
        """Release what is ready and select what is complete, until neither changes anything (a stage released
        with no trials is selected at once, which may release the next)."""
        while self._release_ready() | self._select_ready():
            pass

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        self._advance()  # a stage whose searcher ran out before its budget may be complete now
        if self._at_limit():
            return None if self._open() else Searcher.FINISHED
        for label in self._order():
            config = self._suggest_from(label, trial_id)
            if config is not None:
                return config
        if self._open():
            return None if self.live else self._stalled()
        return Searcher.FINISHED

    def _suggest_from(self, label: str, trial_id: str) -> dict[str, Any] | None:
        """The stage's next config, with what its trials carry; None if it has none to give now."""
        if self.suggested[label] >= self.budgets[label]:
            return None
        config = self.searchers[label].suggest(trial_id)
        if config == Searcher.FINISHED:  # ran out before its budget (e.g. a short grid)
            self.budgets[label] = self.suggested[label]
            return None
        if config is None:  # it waits for results (its batch)
            return None
        names = list(self.searchers)
        self.turn = (names.index(label) + 1) % len(names)
        self.suggested[label] += 1
        self.owner[trial_id] = label
        self.live.add(trial_id)
        return {**self.fixed[label], **config}  # a given config (a re-run, a grid repeat) names its own seed

    def _stalled(self) -> str:
        """Waiting with no trial of ours live: nothing can ever end, select or release a stage, and Tune
        would wait forever (a searcher state that does not match Tune's trial list does this). Every stage
        not yet selected fails instead, so the study stops with an error."""
        for label in self.stages:
            if label not in self.selected and label not in self.failed:
                waited = self.suggested.get(label, 0) - len(self.outcomes[label])
                problem = f"stalled: waits for {waited} trial(s) that Tune is not running, with none left to run"
                self.failed[label] = (label, problem, "rerun with --resume --output DIR; if it stalls again, report it")
                self.news.append(label)
        return Searcher.FINISHED

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self.owner:
            self.searchers[self.owner[trial_id]].on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self.live.discard(trial_id)
        self.paused.discard(trial_id)
        if trial_id in self.owner:
            self.searchers[self.owner[trial_id]].on_trial_complete(trial_id, result=result, error=error)

    # Tune saves the searcher with the experiment, so Tuner.restore continues each stage's search
    # (Optuna's history included) and keeps what was released and selected.
    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.__dict__, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.__dict__.update(pickle.load(f))  # our own file, written by save() above
        self.paused = set()  # Tuner.restore queues every unfinished trial to run again

    # ------------------------------------------------------------ selection

    def trial_ended(self, trial_id: str, outcome: TrialOutcome) -> None:
        """The driver saw a trial end (a Tune callback): select its stage once all its trials have."""
        label = self.owner.get(trial_id)
        if label is not None:
            self.outcomes[label][trial_id] = outcome
            self._select_ready()

    def _select_ready(self) -> bool:
        selected = False
        for label in list(self.searchers):
            if label in self.selected or label in self.failed or self.suggested[label] < self.budgets[label]:
                continue
            owned = sum(owner == label for owner in self.owner.values())
            if len(self.outcomes[label]) == owned:
                self._select(self.stages[label])
                selected = True
        return selected

    def _select(self, stage: Stage) -> None:
        label = stage.label
        outcomes = list(self.outcomes[label].values())  # the order does not matter: ranking breaks ties
        try:
            picked = self._picked(stage, outcomes)
            self._check_seeds(stage, picked)
        except RuntimeFailure as failure:
            self.failed[label] = (failure.where, failure.problem, failure.fix)
        else:
            self.selected[label] = picked
            spt = spt_checkpoints_of(stage, picked)
            if spt is not None:
                self.checkpoints[label] = spt
        self.news.append(label)

    def _picked(self, stage: Stage, outcomes: list[TrialOutcome]) -> list[Selection]:
        """What the stage selects: a search its best trial, an extension round the best so far and its own trials'
        best (both ranking `top_k` for candidates), candidates the pick among them, re-runs each seed's best
        epoch."""
        if stage.kind == "rerun":
            return select_each(outcomes, stage.plan)
        if stage.kind == "candidates":
            ranked = self._ranked(stage.source)
            best, self.candidates[stage.label] = select_candidates(stage.plan, ranked, stage.candidate_seeds, outcomes)
            return [best]
        if stage.kind == "extend":
            ranked = select_extension(stage.plan, self._ranked(stage.source), outcomes, stage.top_k)
        else:
            ranked = rank_trials(outcomes, stage.plan, stage.top_k)
        if stage.top_k > 1:
            self.ranked[stage.label] = ranked
        return ranked[:1]

    @staticmethod
    def _check_seeds(stage: Stage, picked: list[Selection]) -> None:
        """Re-pretraining: every seed's variant re-runs need that seed's checkpoint."""
        if not (stage.is_rerun and stage.search.is_pretraining):
            return
        missing = sorted(set(stage.rerun_seeds) - {int(s.config["seed"]) for s in picked})
        if missing:
            fix = "lower the pretraining LR range, or drop rerun_pretrain; then rerun with --resume --output DIR"
            raise RuntimeFailure(stage.label, f"re-pretraining with seed(s) {missing} diverged or failed", fix)

    def take_news(self) -> list[str]:
        """Stages selected or failed since the last call (the driver records them)."""
        news, self.news = self.news, []
        return news
