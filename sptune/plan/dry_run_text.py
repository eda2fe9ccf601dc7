"""What `--dry-run` prints, and a study prints as it starts: its plan as text (`describe`), every search with
its trials, rungs, seeds and budget, what selection adds, the re-runs and the totals."""

from __future__ import annotations

from dataclasses import dataclass

from sptune.plan.budget_text import describe_budgets
from sptune.plan.packs import describe_packs
from sptune.plan.phases import Phase
from sptune.plan.selection_steps import describe_selection
from sptune.plan.study_plan import SearchPlan, StudyPlan, search_epochs
from sptune.plan.warmups import long_warmups, warmup_rounds
from sptune.rules import rungs, seeds
from sptune.rules.ranking import TIE_RULE
from sptune.spec import ParamSpace, SweepSpec, plugin_refs
from sptune.spec.plugin_refs import BUILT_IN_FAMILIES
from sptune.tasks.registry import task_origin


def describe_param(p: ParamSpace) -> str:
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
    space = ", ".join(f"{k}={describe_param(p)}" for k, p in search.space.items())
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
    most = "up to " if s.rerun_sequential else ""
    lines.append(f"  rerun: each variant's pick re-trained with seeds {used} (none used by the search: "
                 f"seeds {searched}): {most}{n} trials, no early stopping, each tested once")
    lines += _sequential_lines(plan, len(variants))
    return lines, trials + n, epochs + sum(s.rerun_seeds * search.epochs for search in variants)


def _sequential_lines(plan: StudyPlan, n_variants: int) -> list[str]:
    """rerun_sequential: the looks, the stopping rule, and the best and worst case (what Total counts)."""
    q = plan.spec.rerun_sequential
    if q is None:
        return []
    looks = seeds.sequential_looks(q.min, q.max, q.step)
    spending = {"obrien_fleming": "O'Brien-Fleming-type", "pocock": "Pocock-type"}[q.spending]
    return [f"  sequential: looks after {', '.join(map(str, looks))} seeds; a variant gets the next seeds while a "
            f"comparison it is in (its Δ vs its baseline, or another's Δ vs it) is undecided on validation "
            f"accuracy: two-sided alpha {q.alpha:g} across the looks ({spending} Lan-DeMets spending), "
            f"equivalent within ±{q.effect:g}; at least {looks[0] * n_variants} trials (all decided at the first "
            f"look), at most {q.max * n_variants}: Total and the cost count the most (the worst case)"]


def _warmup_note(plan: StudyPlan) -> list[str]:
    """Early stopping that decides during the LR warm-up ranks trials before their LR peaks."""
    s = plan.spec
    if s.scheduler.type == "fifo":
        return []
    ends = {x.label: warmup_rounds(plan, x) for x in plan.searches if x.n_trials}
    late = [x for x in plan.searches if (ends.get(x.label) or 0) > s.scheduler.grace_period]
    if not late:
        return []
    worst = max(late, key=lambda x: ends[x.label])
    unit = _search_unit(worst)
    return [f"Note: the first early-stopping rung ({unit} {s.scheduler.grace_period}) comes before the LR warm-up ends "
            f"({unit} {ends[worst.label]:.3g} of {worst.epochs} in {worst.label}); raise scheduler.grace_period, "
            "or shorten the warm-up (training.warmup_fraction, or warmup_steps where given), to rank trials after "
            "their LR peaks."]


def _batch_note(plan: StudyPlan) -> list[str]:
    """Batch sizes above the training rows (the preflight refuses a search where none fits)."""
    lines = []
    for search in plan.searches:
        cross_task = search.pretrain_source is not None and search.pretrain_source.task is not None
        over = [b for b in search.space.batch_size.candidates() if plan.train_rows and b > plan.train_rows]
        if search.n_trials and over and not cross_task:
            lines.append(f"Note: batch size {', '.join(f'{b:g}' for b in over)} of {search.label} exceeds the "
                         f"{plan.train_rows} training rows: such a trial takes the whole set as one batch per epoch.")
    return lines


def _long_warmup_note(plan: StudyPlan) -> list[str]:
    """A warm-up the spec wrote that lasts a whole budget (one it inherited from its task is refused)."""
    return [f"Note: {w.field} {w.steps} (as the spec writes it) is at least the {w.budget_steps} optimizer steps "
            f"{w.search.label} trains at its largest batch: its LR rises the whole budget and never reaches the peak "
            "its search asks for." for w in long_warmups(plan) if not w.inherited]


def round_unit(spec: SweepSpec) -> str:
    """What the plan counts trials' iterations in: 'epoch', or 'round' where a budget is in steps (an evaluation
    round of a steps budget, an epoch of the others: sptune.rules.budgets)."""
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


def _share_holder(spec: SweepSpec) -> str:
    """What holds one resources share: a trial, or a pack (its executor; each member trial reserves 1/K CPU)."""
    pack = spec.resources.pack
    return "trial" if pack == 1 else f"pack of {pack} trials (each member trial reserves 1/{pack} of the CPUs)"


def _task_origin(name: str) -> str:
    origin = task_origin(name)
    return "" if origin == "built-in" else f" from {origin}"


def _describe_model(s: SweepSpec) -> str:
    m = s.model
    if m.family in BUILT_IN_FAMILIES:
        return (f"Model: {m.family} d_model={m.d_model} layers={m.n_layers} heads={m.n_heads} ffn={m.d_ff} "
                f"pooling={m.pooling} positions={m.positions} dropout={m.dropout}")
    options = f" options={m.options}" if m.options else ""
    return (f"Model: plug-in family '{m.family}' from {plugin_refs.origin(m.family, plugin_refs.MODEL_GROUP)}, "
            f"d_model={m.d_model} layers={m.n_layers} pooling={m.pooling} dropout={m.dropout}{options}")


@dataclass(frozen=True)
class TrialTotals:
    """The most trials a plan trains: its searches', what the variants' selections add (LR extension rounds,
    candidates) and the re-runs'; and the most trial-epochs (rounds of a steps budget) they spend in all."""

    searches: int
    selection: int
    reruns: int
    trial_epochs: int

    @property
    def trials(self) -> int:
        return self.searches + self.selection + self.reruns


def trial_totals(plan: StudyPlan) -> TrialTotals:
    """What the plan's Total line counts (sequential re-runs at their most)."""
    _, pick_trials, pick_epochs = describe_selection(plan.spec, plan.variant_searches())
    _, rerun_trials, rerun_epochs = _describe_reruns(plan)
    searched = sum(search_epochs(plan, search) for search in plan.searches)
    return TrialTotals(sum(search.n_trials for search in plan.searches), pick_trials, rerun_trials,
                       searched + pick_epochs + rerun_epochs)


def describe(plan: StudyPlan) -> str:
    s, info = plan.spec, plan.info
    stops_early = s.scheduler.type != "fifo"
    lines = [
        f"Study '{s.name}' on task '{info.name}' ({info.input_kind}, length {info.seq_len}, "
        f"{info.num_classes} classes){_task_origin(s.task.name)}, seed {s.seed}",
        f"Data: {plan.data_summary}",
        _describe_model(s),
        _describe_scheduler(s),
        *_describe_searcher(plan),
        f"Resources: {s.resources.cpu:g} CPU + {s.resources.gpu:g} GPU per {_share_holder(s)}, "
        f"up to {plan.concurrency} concurrent trials "
        f"(as many as the {'CPUs and GPUs' if s.resources.gpu else 'CPUs'} hold"
        f"{', at most resources.max_concurrent' if s.resources.max_concurrent else ''})",
        *describe_packs(plan),
        *describe_budgets(s.budget, plan.searches, plan.train_rows),
        "Searches (ONE Tuner for the whole study: an SPT variant's search starts once its pretraining is selected, "
        f"each variant with its own searcher{' and early stopping' if stops_early else ''}):",
        *(_describe_search(plan, search) for search in plan.searches),
    ]
    lines += describe_selection(plan.spec, plan.variant_searches())[0] + _describe_reruns(plan)[0]
    total = trial_totals(plan)
    lines.append(seeds.SPREAD_TEXT[plan.spread()])
    early = " (early stopping ends weak search trials sooner)" if stops_early else ""
    lines.append(
        f"Total: {total.trials} trials = {total.trials} distinct trainings (no config trained twice with one seed), "
        f"at most {total.trial_epochs} trial-{round_unit(s)}s{early}"
    )
    lines += _warmup_note(plan) + _long_warmup_note(plan) + _batch_note(plan)
    lines.append("Ranking: searcher, early stopping and selection all use each trial's best-so-far validation score; "
                 f"ties: {TIE_RULE}.")
    lines.append("Then: validation-best trial and epoch per variant; test split read once per selected checkpoint.")
    return "\n".join(lines)
