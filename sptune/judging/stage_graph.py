"""The study's stages and what each waits for: every search of the study is a *stage* of its one Tuner.

A stage is one `SearchPlan`'s trials, of an explicit `StageKind`: a search (a pretraining's or a variant's), an
LR extension's round or seed-robust selection's candidates (what makes a variant's pick after its search), or the
re-runs per seed of a selected config. A stage that needs another's selection (an SPT variant's search needs its
pretraining's checkpoint; an extension round or the candidates need the pick so far; re-runs need their variant's
pick) starts once that selection is made (`sptune.judging.ledger`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from functools import cached_property

from sptune.judging.sequential_reruns import LookRule, look_rule
from sptune.plan.phases import Phase
from sptune.plan.study_plan import SearchPlan, StudyPlan
from sptune.rules import seeds
from sptune.rules.lr_extension import MAX_ROUND_POINTS, round_trials

# label -> seed -> the SPT checkpoint a finetuning trial starts from (selected, or given without trials);
# seed None: the one checkpoint every trial starts from.
StartingCheckpoints = dict[str, dict[int | None, str]]


class StageKind(str, Enum):
    """What a stage of the Tuner is; its label starts with it (search-spt, extend-spt-1, candidates-spt, rerun-spt).
    Its trials' phase (`Phase`) is what each of them is: a candidates stage re-trains candidates."""

    SEARCH = "search"  # its own searcher proposes; early stopping as the spec asks
    EXTEND = "extend"  # an LR extension's round: LRs beyond the bound the pick so far sits at, to the end
    CANDIDATES = "candidates"  # the `top_k` best configs it continues from, each once per candidate seed, to the end
    RERUN = "rerun"  # the pick it continues from, once per re-run seed, to the end


# The phase of a stage's trials; a search stage's are its search's own (pretrain or search).
_PHASE = {StageKind.RERUN: Phase.RERUN, StageKind.EXTEND: Phase.EXTEND, StageKind.CANDIDATES: Phase.CANDIDATE}


@dataclass(frozen=True)
class Stage:
    """One search of the study inside its one Tuner."""

    search: SearchPlan  # what it searches; any other kind: the search whose configs it re-trains
    kind: StageKind = StageKind.SEARCH
    seeds: tuple[int, ...] = ()  # rerun: one trial per seed; candidates: each config per seed; extend: its LRs'
    spt_from: str | None = None  # finetuning from SPT: the label whose checkpoint(s) its trials start from
    after: str | None = None  # the stage whose pick it continues from (None: its search)
    top_k: int = 1  # a search or extension: how many best configs it ranks; candidates: how many it re-trains
    final: bool = True  # its pick is the one its variant (or pretraining) goes on with: marked selected in MLflow
    extend_round: int = 0  # an extension's round, from 1
    # Sequential re-runs (rerun_sequential): the look it is (from 1), the looks before it waits for, and the rule
    # that says, once it is released, whether it trains its seeds (sptune.judging.sequential_reruns).
    look: int = 0
    waits: tuple[str, ...] = ()
    rule: LookRule | None = None

    def __post_init__(self) -> None:
        fits = {StageKind.SEARCH: not self.seeds and self.after is None, StageKind.EXTEND: True,
                StageKind.CANDIDATES: bool(self.seeds), StageKind.RERUN: bool(self.seeds)}[self.kind]
        fits = fits and (self.kind is StageKind.RERUN or not (self.look or self.waits or self.rule))
        if not fits or (self.kind is StageKind.EXTEND) != (self.extend_round >= 1):
            raise ValueError(f"a {self.kind.value} stage of {self.search.label} with fields it does not take: {self}")

    @classmethod
    def rerun(cls, search: SearchPlan, seeds: tuple[int, ...], spt_from: str | None = None,
              after: str | None = None) -> Stage:
        return cls(search, StageKind.RERUN, tuple(seeds), spt_from, after)

    @property
    def continues_from(self) -> str:
        """The label of the stage whose selection gives its configs (a search: its own)."""
        return self.after or self.search.label

    @cached_property
    def trial_plan(self) -> SearchPlan:
        """The plan its trials run under (given configs are filled in when it is released)."""
        if self.kind is StageKind.SEARCH:
            return self.search
        return replace(self.search, phase=_PHASE[self.kind], num_samples=1, searcher="grid", grid_repeats=1)

    @property
    def label(self) -> str:
        if self.kind is StageKind.EXTEND:
            return self.search.extend_label(self.extend_round)
        return self.search.look_label(self.look) if self.look > 1 else self.trial_plan.label

    def wanted(self, selected: dict) -> bool:
        """Whether it trains what it was given once released (a later look of sequential re-runs may not)."""
        return self.rule is None or self.rule.wants(self.search.variant, self.look, selected)

    @property
    def budget(self) -> int:
        """Its most trials (a stage given fewer configs when released ends sooner)."""
        if self.kind is StageKind.RERUN:
            return len(self.seeds)
        if self.kind is StageKind.CANDIDATES:
            return self.top_k * len(self.seeds)
        if self.kind is StageKind.EXTEND:
            return round_trials(self.search.space.lr)
        return self.search.n_trials

    @property
    def needs(self) -> tuple[str, ...]:
        """The labels whose selections (or given checkpoints) it waits for."""
        continued = (self.continues_from,) if self.kind is not StageKind.SEARCH else ()
        return continued + ((self.spt_from,) if self.spt_from else ()) + self.waits


def variant_stages(plan: StudyPlan, search: SearchPlan, rerun_seeds: tuple[int, ...],
                   rerun_spt: str | None) -> list[Stage]:
    """A variant's stages in order: its search, its LR extension's rounds, its candidates (seed-robust selection),
    its re-runs (`rerun_seeds`, starting from `rerun_spt`'s checkpoints); each continues from the one before."""
    top_k, candidate_seeds = plan.spec.selection.top_k, tuple(plan.candidate_seeds())
    rounds, after = plan.extend_rounds(search), {"spt_from": search.init_from, "top_k": top_k}
    chain = [Stage(search, **after, final=not (rounds or candidate_seeds))]
    for r in range(1, rounds + 1):
        round_seeds = tuple(seeds.extension_seeds(plan.spec.seed, (r - 1) * MAX_ROUND_POINTS, MAX_ROUND_POINTS))
        chain.append(Stage(search, StageKind.EXTEND, round_seeds, **after, after=chain[-1].label, extend_round=r,
                           final=r == rounds and not candidate_seeds))
    if candidate_seeds:
        chain.append(Stage(search, StageKind.CANDIDATES, candidate_seeds, **after, after=chain[-1].label))
    rule = look_rule(plan)
    if rerun_seeds and rule is None:
        chain.append(Stage.rerun(search, rerun_seeds, rerun_spt, after=chain[-1].label))
    elif rerun_seeds:
        chain += _looks(plan, search, rule, rerun_spt, chain[-1].label)
    return chain


def _looks(plan: StudyPlan, search: SearchPlan, rule: LookRule, spt: str | None, pick: str) -> list[Stage]:
    """Sequential re-runs: one stage per look, each continuing from the pick; a later look waits for the look
    before of the variant and of every variant it is compared with."""
    looks = []
    for k in range(1, len(plan.rerun_looks()) + 1):
        others = {v for pair in rule.partners(search.variant) for v in pair}
        waits = tuple(sorted(dict(rule.labels)[v][k - 2] for v in others | {search.variant})) if k > 1 else ()
        looks.append(Stage(search, StageKind.RERUN, tuple(plan.look_seeds(k)), spt, pick, look=k, waits=waits,
                           rule=rule))
    return looks
