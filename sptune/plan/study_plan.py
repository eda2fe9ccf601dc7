"""The study plan: which searches run, over which search spaces, with how many trials.

A study has these phases, all run in ONE Tuner (`sptune.tuning.stages`: each search a stage that starts
once what it needs is selected): `pretrain` (one search per pretraining objective), `search`
(every variant's LR/batch search), `extend` (with `search.lr.extend`: LRs beyond a bound its pick sits at,
`sptune.plan.lr_extension`), `candidate` (with `selection.seeds`: its best configs re-trained with fresh
seeds, `sptune.plan.selection_steps`) and `rerun` (each variant's selected config
re-trained per seed, and with `rerun_pretrain` each pretraining's selected config re-pretrained
per seed first). A `SearchPlan` is one variant's (or objective's) trials in one phase.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sptune.judging.ranking import TIE_RULE
from sptune.plan import rungs, seeds
from sptune.plan.budget_text import describe_budgets
from sptune.plan.budgets import Budget
from sptune.plan.capacity import concurrency
from sptune.plan.phases import Phase
from sptune.plan.selection_steps import describe_selection
from sptune.spec import ParamSpace, PretrainSource, SearchSpec, SweepSpec
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
    budget: Budget | None = None  # one trial's budget (sptune.plan.budgets); `epochs` is its max_iterations

    @property
    def epoch_score(self) -> str:
        """The per-epoch number whose best is `metric`: "val_acc" or "val_loss" (see sptune.judging.ranking)."""
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
        """What the reported spread over seeds covers (sptune.plan.seeds: none, finetune, pretrain+finetune)."""
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
        source = spec.variant_source(name)
        searches.append(
            SearchPlan(
                Phase.SEARCH,
                name,
                spec.variant_kind(name),
                v.search,
                spec.variant_samples(name),
                spec.variant_epochs(name),
                "best_val_acc",
                "max",
                _searcher(spec, v.search),
                grid_repeats=spec.variant_repeats(name),
                init_from=source.stage_name if source else None,
                budget=spec.variant_budget(name),
            )
        )
    n = concurrency(spec, cluster_cpus, cluster_gpus)
    return StudyPlan(spec, info, searches, n, data_summary, source_data or {}, train_rows)


def _describe_param(p: ParamSpace) -> str:
    if p.type in ("loguniform", "uniform"):
        return f"{p.type}[{p.low:g}, {p.high:g}]"
    return f"{p.type}{[v if v != int(v) else int(v) for v in p.values]}"


def _trial_count(search: SearchPlan, seed: int) -> str:
    """How many distinct trainings a search runs, and with which seeds."""
    if search.searcher != "grid":
        return f"{search.n_trials:>3} trials (seed {seed})"
    repeats = search.grid_repeats
    used = seeds.seed_range(seeds.search_seeds(seed, repeats))
    return (f"{search.space.grid_size()} grid points x {repeats} seed{'s' if repeats > 1 else ''} ({used}) "
            f"= {search.n_trials} trials")


def _describe_search(plan: StudyPlan, search: SearchPlan) -> str:
    head = f"  {search.label:<24}"
    if search.reuse_checkpoint:
        return f"{head} reuses the SPT checkpoint {search.reuse_checkpoint} (no pretraining)"
    if search.phase == Phase.PRETRAIN and search.epochs == 0:
        return f"{head} 0 epochs: SPT variants start from an untrained (seeded) encoder"
    space = ", ".join(f"{k}={_describe_param(p)}" for k, p in search.space.items())
    if search.phase == Phase.PRETRAIN:
        p = plan.spec.pretrain
        what = f"objective={search.objective}"
        extra = f" on task {search.pretrain_source.task.name}" if search.pretrain_source.task else ""
        extra += (f" mask_ratio={p.mask_ratio:g}" if search.objective == "masked" else "") + f" loss={p.loss}"
    else:
        what = f"kind={search.variant_kind}"
        extra = f" init from {search.init_from}" if search.init_from else ""
    line = (
        f"{head} {what:<20} {search.searcher:<7} {_trial_count(search, plan.spec.seed)} x <= {search.epochs:>3} "
        f"{_search_unit(search)}s  rank {search.metric} ({search.mode})  {space}{extra}"
    )
    s = plan.spec.scheduler
    if s.type in ("sha", "hyperband"):  # synchronous: the rung sizes are known before anything runs
        line += "\n" + " " * 28 + rungs.describe_rungs(s.type, search.n_trials, s.grace_period,
                                                         s.reduction_factor, search.epochs, _search_unit(search))
    return line


def search_epochs(plan: StudyPlan, search: SearchPlan) -> int:
    """The most trial-epochs a search spends: exactly this under sha or hyperband without failures
    (their rung sizes are fixed, sptune.plan.rungs); n_trials x epochs under asha (asynchronous) or fifo."""
    s = plan.spec.scheduler
    if not search.n_trials or search.phase == Phase.RERUN:
        return search.n_trials * search.epochs
    return rungs.planned_epochs(s.type, search.n_trials, s.grace_period, s.reduction_factor, search.epochs)


def _describe_reruns(plan: StudyPlan) -> tuple[list[str], int, int]:
    """The re-run lines (pretraining re-runs first, as they run), their trials and trial-epochs."""
    s = plan.spec
    if s.rerun_seeds < 2:
        return [], 0, 0
    used, searched = seeds.seed_range(plan.rerun_seeds()), seeds.seed_range(plan.search_seeds())
    lines, trials, epochs = [], 0, 0
    for pretraining in plan.pretrainings() if s.rerun_pretrain else []:
        n = s.rerun_seeds if pretraining.epochs > 0 else 0
        what = f"re-pretrained with seeds {used}: {n} trials, no early stopping" if n else \
            f"0 epochs: an untrained encoder per seed {used}"
        lines.append(f"  {pretraining.rerun_label}: the selected pretraining config {what}; each SPT re-run "
                     "starts from the checkpoint of its own seed")
        trials, epochs = trials + n, epochs + n * pretraining.epochs
    variants = plan.variant_searches()
    n = s.rerun_seeds * len(variants)
    lines.append(f"  rerun: each variant's pick re-trained with seeds {used} (none used by the search: "
                 f"seeds {searched}): {n} trials, no early stopping, each tested once")
    return lines, trials + n, epochs + sum(s.rerun_seeds * search.epochs for search in variants)


def _warmup_note(plan: StudyPlan) -> list[str]:
    """Early stopping that decides during the LR warm-up ranks trials before their LR peaks."""
    s = plan.spec
    if s.scheduler.type == "fifo":
        return []
    late = [x for x in plan.searches if x.n_trials and s.training.warmup_fraction * x.epochs > s.scheduler.grace_period]
    if not late:
        return []
    worst = max(late, key=lambda x: x.epochs)
    unit = _search_unit(worst)
    return [f"Note: the first early-stopping rung ({unit} {s.scheduler.grace_period}) comes before the LR warm-up ends "
            f"({unit} {s.training.warmup_fraction * worst.epochs:g} of {worst.epochs} in {worst.label}); raise "
            "scheduler.grace_period or lower training.warmup_fraction to rank trials after their LR peaks."]


def round_unit(spec: SweepSpec) -> str:
    """What the plan counts trials' iterations in: 'epoch', or 'round' where a budget is in steps (an evaluation
    round of a steps budget, an epoch of the others: sptune.plan.budgets)."""
    sections = [spec.finetune, *([spec.pretrain] if spec.pretrain is not None else [])]
    return "round" if any(section.steps is not None for section in sections) else "epoch"


def _search_unit(search: SearchPlan) -> str:
    return "round" if search.budget is not None and search.budget.unit == "steps" else "epoch"


def _describe_scheduler(spec: SweepSpec) -> str:
    s = spec.scheduler
    if s.type == "fifo":
        return "Scheduler: FIFO (no early stopping: every trial trains all its epochs)"
    settings = f"grace {s.grace_period} {round_unit(spec)}s, η {s.reduction_factor:g}"
    if s.type == "sha":
        return (f"Scheduler: synchronous successive halving per variant ({settings}; each rung waits for all "
                "of the variant's trials: order-independent)")
    if s.type == "hyperband":
        return (f"Scheduler: synchronous Hyperband per variant ({settings}; its trials split across brackets of "
                "successive halving in creation order, each rung waits for all of its bracket's trials: "
                "order-independent)")
    return f"Scheduler: ASHA per variant ({settings}; asynchronous: decisions depend on finish order)"


def _describe_searcher(plan: StudyPlan) -> list[str]:
    """Only when some search uses Optuna: grids and random draws never depend on results."""
    if not any(search.searcher == "optuna" and search.fixed_configs is None for search in plan.searches):
        return []
    spec = plan.spec
    kept = ("  each search kept as an Optuna study named STUDY/VARIANT in OUTPUT/optuna.db (or --optuna-storage): "
            "optuna-dashboard opens it")
    tpe = "multivariate TPE: one joint model of the parameters" if spec.searcher.multivariate else "TPE"
    if spec.searcher.mode == "async":
        return [f"Searcher: Optuna ({tpe}) per variant, told results as trials finish (asynchronous: its proposals "
                "depend on finish order)", kept]
    first = f"at {round_unit(spec)} {spec.scheduler.grace_period} (first rung)"
    where = "when it ends" if spec.scheduler.type == "fifo" else first
    return [f"Searcher: Optuna ({tpe}) per variant in batches of {spec.searcher.batch_size} (searcher.batch_size, "
            f"whatever the concurrency), told each trial's result {where} in trial order once its batch is in: "
            "order-independent, and the same on any machine", kept]


def describe(plan: StudyPlan) -> str:
    s, info = plan.spec, plan.info
    m = s.model
    stops_early = s.scheduler.type != "fifo"
    lines = [
        f"Study '{s.name}' on task '{info.name}' ({info.input_kind}, length {info.seq_len}, "
        f"{info.num_classes} classes), seed {s.seed}",
        f"Data: {plan.data_summary}",
        f"Model: transformer d_model={m.d_model} layers={m.n_layers} heads={m.n_heads} ffn={m.d_ff} "
        f"pooling={m.pooling} positions={m.positions} dropout={m.dropout}",
        _describe_scheduler(s),
        *_describe_searcher(plan),
        f"Resources: {s.resources.cpu:g} CPU + {s.resources.gpu:g} GPU per trial, up to {plan.concurrency} "
        f"concurrent trials (as many as the {'CPUs and GPUs' if s.resources.gpu else 'CPUs'} hold"
        f"{', at most resources.max_concurrent' if s.resources.max_concurrent else ''})",
        *describe_budgets(s.budget, plan.searches, plan.train_rows),
        "Searches (ONE Tuner for the whole study: an SPT variant's search starts once its pretraining is selected, "
        f"each variant with its own searcher{' and early stopping' if stops_early else ''}):",
        *(_describe_search(plan, search) for search in plan.searches),
    ]
    picking, pick_trials, pick_epochs = describe_selection(plan.spec, plan.variant_searches())
    reruns, rerun_trials, rerun_epochs = _describe_reruns(plan)
    lines += picking + reruns
    total_trials = sum(search.n_trials for search in plan.searches) + pick_trials + rerun_trials
    total_epochs = sum(search_epochs(plan, search) for search in plan.searches) + pick_epochs + rerun_epochs
    lines.append(seeds.SPREAD_TEXT[plan.spread()])
    early = " (early stopping ends weak search trials sooner)" if stops_early else ""
    lines.append(
        f"Total: {total_trials} trials = {total_trials} distinct trainings (no config trained twice with one seed), "
        f"at most {total_epochs} trial-{round_unit(s)}s{early}"
    )
    lines += _warmup_note(plan)
    lines.append("Ranking: searcher, early stopping and selection all use each trial's best-so-far validation score; "
                 f"ties: {TIE_RULE}.")
    lines.append("Then: validation-best trial and epoch per variant; test split read once per selected checkpoint.")
    return "\n".join(lines)
