"""The study plan: which searches run, over which search spaces, with how many trials.

A study has these phases, all run in ONE Tuner (`sptune.tuning.stages`: each search a stage that starts
once what it needs is selected): `pretrain` (one search per pretraining objective), `search`
(every variant's LR/batch search), `extend` (with `search.lr.extend`: LRs beyond a bound its pick sits at,
`sptune.rules.lr_extension`), `candidate` (with `selection.seeds`: its best configs re-trained with fresh
seeds, `sptune.plan.selection_steps`) and `rerun` (each variant's selected config
re-trained per seed, and with `rerun_pretrain` each pretraining's selected config re-pretrained
per seed first). A `SearchPlan` is one variant's (or objective's) trials in one phase.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sptune.plan.capacity import concurrency
from sptune.plan.phases import Phase
from sptune.rules import rungs, seeds
from sptune.rules.budgets import Budget, variant_budget
from sptune.spec import PretrainSource, SearchSpec, SweepSpec
from sptune.tasks.base import TaskInfo, TaskSplits


@dataclass(frozen=True)
class SearchPlan:
    """The trials of one variant, or of one pretraining objective, in one phase of the study:
    their space, budget, metric and searcher."""

    phase: Phase  # what its trials are (sptune.plan.phases)
    variant: str | None  # None when pretraining
    variant_kind: str | None  # the variant's kind (spec/variant_kinds.py); None when pretraining
    space: SearchSpec
    num_samples: int
    epochs: int
    # What the searcher, early stopping and selection all rank trials by: the best-so-far
    # validation score ("best_val_acc", max; pretraining "best_val_loss", min), never the last epoch's.
    metric: str
    mode: str
    searcher: str  # "grid" | "optuna" | "random"
    grid_repeats: int = 1  # a grid search: runs of each grid point, repeat r with seed + r (num_samples unused)
    init_from: str | None = None  # the label of the pretraining whose checkpoint initialises the variant
    fixed_configs: tuple[dict[str, Any], ...] | None = None  # re-runs: one given config per seed
    reuse_checkpoint: str | None = None  # pretraining: an existing SPT checkpoint replaces the Tuner
    pretrain_source: PretrainSource | None = None  # pretraining: objective and (for spt_cross) source task
    budget: Budget | None = None  # one trial's budget (sptune.rules.budgets); `epochs` is its max_iterations

    @property
    def epoch_score(self) -> str:
        """The per-epoch number whose best is `metric`: "val_acc" or "val_loss" (see sptune.rules.ranking)."""
        return self.metric.removeprefix("best_")

    @property
    def objective(self) -> str | None:
        """The pretraining objective (masked | causal); None for a variant's search or re-runs."""
        return self.pretrain_source.objective if self.pretrain_source else None

    @property
    def is_pretraining(self) -> bool:
        """A pretraining's trials (its search, or its re-runs per seed), not a variant's."""
        return self.variant is None

    @property
    def variant_or_objective(self) -> str:
        """The `variant` its trials carry in their config, MLflow params and the report: the variant,
        or for pretraining the objective."""
        return self.variant or self.pretrain_source.objective

    @property
    def n_trials(self) -> int:
        if self.reuse_checkpoint is not None or (self.is_pretraining and self.epochs == 0):
            return 0
        if self.fixed_configs is not None:
            return len(self.fixed_configs)
        return self.space.grid_size() * self.grid_repeats if self.searcher == "grid" else self.num_samples

    @property
    def label(self) -> str:
        """Unique in the study: pretrain, pretrain-causal, pretrain-on-TASK, search-spt, rerun-spt, ..."""
        if self.phase == Phase.RERUN:
            return self.rerun_label
        if self.phase == Phase.CANDIDATE:
            return self.candidates_label
        if self.phase == Phase.PRETRAIN:
            return self.pretrain_source.stage_name
        return f"{self.phase}-{self.variant}"

    @property
    def rerun_label(self) -> str:
        """The label of its re-runs per seed: rerun-spt, ...; a pretraining's: pretrain-rerun, pretrain-causal-rerun."""
        return f"{self.pretrain_source.stage_name}-rerun" if self.is_pretraining else f"rerun-{self.variant}"

    def look_label(self, look: int) -> str:
        """The label of look `look` (from 1) of its sequential re-runs: rerun-spt, rerun-spt-look2, ..."""
        return self.rerun_label if look == 1 else f"{self.rerun_label}-look{look}"

    def extend_label(self, round_: int) -> str:
        """The label of round `round_` of its LR extension (a variant's search only): extend-spt-1, ..."""
        return f"extend-{self.variant}-{round_}"

    @property
    def candidates_label(self) -> str:
        """The label of its seed-robust selection's candidates (a variant's search only): candidates-spt, ..."""
        return f"candidates-{self.variant}"


@dataclass(frozen=True)
class StudyPlan:
    spec: SweepSpec
    info: TaskInfo
    searches: list[SearchPlan]
    concurrency: int
    data_summary: str = ""
    # spt_cross: pretraining stage name (PretrainSource.stage_name) -> the other task's data (train/val only).
    source_data: dict[str, Any] = field(default_factory=dict)
    train_rows: int = 0  # the study's training rows (what an epoch's time scales with, sptune.plan.cost); 0: unknown
    val_rows: int = 0  # its validation rows (what an epoch's validation scales with, where a measurement splits it off)

    def variant_searches(self) -> list[SearchPlan]:
        return [s for s in self.searches if s.phase == Phase.SEARCH]

    def pretrainings(self) -> list[SearchPlan]:
        return [s for s in self.searches if s.phase == Phase.PRETRAIN]

    def search_seeds(self) -> list[int]:
        """Every seed a search trial uses: the spec's, and one more per further repeat of a grid point."""
        repeats = max(s.grid_repeats if s.searcher == "grid" else 1 for s in self.searches)
        return seeds.search_seeds(self.spec.seed, repeats)

    def rerun_seeds(self) -> list[int]:
        """The re-runs' seeds (none used by a search); [] without re-runs."""
        return seeds.rerun_seeds(self.spec.seed, self.spec.rerun_seeds) if self.spec.rerun_seeds > 1 else []

    def rerun_looks(self) -> tuple[int, ...]:
        """The re-run seeds each variant has after each look (rerun_sequential: min, min+step, ..., max); fixed
        re-runs: one look of all of them; () without re-runs."""
        q = self.spec.rerun_sequential
        if q is not None:
            return seeds.sequential_looks(q.min, q.max, q.step)
        return (self.spec.rerun_seeds,) if self.spec.rerun_seeds > 1 else ()

    def look_seeds(self, look: int) -> list[int]:
        """The seeds look `look` (from 1) adds."""
        looks = (0, *self.rerun_looks())
        return self.rerun_seeds()[looks[look - 1] : looks[look]]

    def rerun_labels(self, search: SearchPlan) -> list[str]:
        """The labels of a variant's re-run stages, one per look (fixed re-runs: its one rerun label)."""
        return [search.look_label(k) for k in range(1, len(self.rerun_looks()) + 1)]

    def candidate_seeds(self) -> list[int]:
        """The seeds seed-robust selection re-trains each candidate with (none a search's or a re-run's); []: off."""
        return seeds.candidate_seeds(self.spec.seed, self.spec.selection.seeds) if self.spec.selection.enabled else []

    def extend_rounds(self, search: SearchPlan) -> int:
        """The most rounds a variant's LR extension runs (0: its search.lr does not extend)."""
        return self.spec.lr_extend.max_rounds if search.space.lr.extend else 0

    def selection_labels(self, search: SearchPlan) -> list[str]:
        """The stages that make a variant's pick, in order: its search, its LR extension's rounds, its candidates;
        the last one's selection is what the variant tests (or re-runs)."""
        rounds = [search.extend_label(r) for r in range(1, self.extend_rounds(search) + 1)]
        return [search.label, *rounds] + ([search.candidates_label] if self.spec.selection.enabled else [])

    def pick_label(self, search: SearchPlan) -> str:
        return self.selection_labels(search)[-1]

    def spread(self) -> str:
        """What the reported spread over seeds covers (sptune.rules.seeds: none, finetune, pretrain+finetune)."""
        return seeds.spread(self.spec.rerun_seeds, self.spec.rerun_pretrain)

    def training_data(self, search: SearchPlan, study_data: TaskSplits) -> TaskSplits:
        """spt_cross pretraining (its search and its re-runs) trains on another task; every other search on
        the study's own."""
        if not search.is_pretraining:
            return study_data
        return self.source_data.get(search.pretrain_source.stage_name, study_data)


def _searcher(spec: SweepSpec, search: SearchSpec) -> str:
    # Optuna cannot take grid_search: grids go through Ray's own grid generator.
    return "grid" if search.has_grid() else spec.searcher.type


def build_plan(
    spec: SweepSpec,
    info: TaskInfo,
    cluster_cpus: float | None = None,
    cluster_gpus: float | None = None,
    data_summary: str = "",
    source_data: dict[str, Any] | None = None,
    train_rows: int = 0,
    val_rows: int = 0,
) -> StudyPlan:
    searches: list[SearchPlan] = []
    p, pretrain_budget = spec.pretrain, spec.pretrain_budget()
    for source in spec.pretraining_sources():
        searches.append(
            SearchPlan(
                Phase.PRETRAIN,
                None,
                None,
                p.search,
                p.num_samples,
                pretrain_budget.max_iterations,
                "best_val_loss",
                "min",
                _searcher(spec, p.search),
                grid_repeats=p.grid_repeats,
                reuse_checkpoint=p.checkpoint if source.objective == p.objective and source.task is None else None,
                pretrain_source=source,
                budget=pretrain_budget,
            )
        )
    for name, v in spec.variants.items():
        source, budget = spec.variant_source(name), variant_budget(spec, name)
        searches.append(
            SearchPlan(
                Phase.SEARCH,
                name,
                spec.variant_kind(name),
                v.search,
                spec.variant_samples(name),
                budget.max_iterations,
                "best_val_acc",
                "max",
                _searcher(spec, v.search),
                grid_repeats=spec.variant_repeats(name),
                init_from=source.stage_name if source else None,
                budget=budget,
            )
        )
    n = concurrency(spec, cluster_cpus, cluster_gpus)
    return StudyPlan(spec, info, searches, n, data_summary, source_data or {}, train_rows, val_rows)


def search_epochs(plan: StudyPlan, search: SearchPlan) -> int:
    """The most trial-epochs a search spends: exactly this under sha or hyperband without failures
    (their rung sizes are fixed, sptune.rules.rungs); n_trials x epochs under asha (asynchronous) or fifo."""
    s = plan.spec.scheduler
    if not search.n_trials or search.phase == Phase.RERUN:
        return search.n_trials * search.epochs
    return rungs.planned_epochs(s.type, search.n_trials, s.grace_period, s.reduction_factor, search.epochs)
