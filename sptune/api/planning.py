"""`sptune.plan(spec, ...)`: the dry run as data, every check a real run makes before it starts, nothing started
or written; `Plan.text` is what `python -m sptune.sweep --dry-run` prints."""

from __future__ import annotations

from dataclasses import dataclass

from sptune.plan.cost import DEVICES, describe_cost, describe_estimate, describe_total, estimate, stage_epochs
from sptune.plan.dry_run_text import describe, describe_param, round_unit, trial_totals
from sptune.plan.study_plan import SearchPlan, StudyPlan, search_epochs
from sptune.preflight import RunOptions, dry_run
from sptune.preflight.ready import PlannedStudy

PREFLIGHT_LINE = (
    "Preflight: every check a real run makes before it starts passed (output folder, resume, services, "
    "storage, GPUs, CPUs)"
)


@dataclass(frozen=True)
class PlannedSearch:
    """One search of the study's Tuner (a pretraining objective's, or a variant's LR/batch search).

    label: its stage (pretrain, search-spt, ...); phase: pretrain | search; variant and kind: the variant searched
    (None for a pretraining); objective: the pretraining objective (None for a variant); searcher: grid | optuna |
    random; trials: how many it trains; max_epochs: one trial's budget (in `unit`s); trial_epochs: the most it
    spends over its trials (early stopping counted where its rungs are fixed); metric, mode: what it ranks by;
    space: each searched parameter's space as text; init_from: the pretraining an SPT variant starts from;
    reuses_checkpoint: a given SPT checkpoint that replaces the pretraining (no trials).
    """

    label: str
    phase: str
    variant: str | None
    kind: str | None
    objective: str | None
    searcher: str
    trials: int
    max_epochs: int
    trial_epochs: int
    metric: str
    mode: str
    space: dict[str, str]
    init_from: str | None
    reuses_checkpoint: str | None


@dataclass(frozen=True)
class DeviceCost:
    """The study's estimated time on one device: seconds (None: no measurement of this config; `text` says what to
    measure), from the measurement `source` (`estimated`: arithmetic, not a measurement); text: the plan's line."""

    device: str
    seconds: float | None
    source: str
    estimated: bool
    text: str


@dataclass(frozen=True)
class StudyPlanData:
    """One study's plan.

    name, task, seed: the study; campaign_study: its name in a campaign (None alone); input_kind, seq_len,
    num_classes: the task's; data: the splits' sizes and source; concurrency: trials at once; searches: the
    Tuner's searches; selection_trials, rerun_trials, total_trials: the most trials the picks' selection steps, the
    re-runs and the whole study train; total_trial_epochs: the most trial-epochs (`unit`: epoch, or round for a
    steps budget); pretrain_epochs, finetune_epochs: the cost's trial-epochs per stage (rounds counted as the epochs
    they cover); costs: per device; text: this study's part of the dry-run text.
    """

    name: str
    task: str
    seed: int
    campaign_study: str | None
    input_kind: str
    seq_len: int
    num_classes: int
    data: str
    concurrency: int
    searches: tuple[PlannedSearch, ...]
    selection_trials: int
    rerun_trials: int
    total_trials: int
    total_trial_epochs: int
    unit: str
    pretrain_epochs: int
    finetune_epochs: int
    costs: tuple[DeviceCost, ...]
    text: str


@dataclass(frozen=True)
class Plan:
    """What a run would do: each study's plan (one, or a campaign's), the campaign's name and total cost line
    (None for one study), and the checks of a real run this dry run could not make, each with why."""

    studies: tuple[StudyPlanData, ...]
    campaign: str | None
    campaign_cost: str | None
    unchecked: tuple[str, ...]

    @property
    def text(self) -> str:
        """The dry run as `python -m sptune.sweep --dry-run` prints it."""
        parts = [s.text for s in self.studies]
        if self.campaign_cost is not None:
            parts.append(self.campaign_cost)
        parts.append(PREFLIGHT_LINE + ("; not checked:" if self.unchecked else "."))
        return "\n".join(parts + [f"  - {line}" for line in self.unchecked])


def plan_of(options: RunOptions) -> Plan:
    """The dry run of `options` as data (raises what the preflight raises: SpecError, DataError, ...)."""
    checked = dry_run(options)
    studies = tuple(_study(p) for p in checked.planned.studies)
    plans = [p.inputs.plan for p in checked.planned.studies]
    total = describe_total(plans) if len(plans) > 1 else None
    return Plan(studies, checked.planned.campaign, total, checked.unchecked)


def _study(planned: PlannedStudy) -> StudyPlanData:
    plan, member = planned.inputs.plan, planned.member
    title = f"=== study {member.name} ===\n" if member else ""
    text = title + describe(plan) + "\n" + describe_cost(plan) + ("\n" if member else "")
    totals, epochs, info = trial_totals(plan), stage_epochs(plan), plan.info
    return StudyPlanData(
        name=plan.spec.name,
        task=info.name,
        seed=plan.spec.seed,
        campaign_study=member.name if member else None,
        input_kind=info.input_kind,
        seq_len=info.seq_len,
        num_classes=info.num_classes,
        data=plan.data_summary,
        concurrency=plan.concurrency,
        searches=tuple(_search(plan, s) for s in plan.searches),
        selection_trials=totals.selection,
        rerun_trials=totals.reruns,
        total_trials=totals.trials,
        total_trial_epochs=totals.trial_epochs,
        unit=round_unit(plan.spec),
        pretrain_epochs=epochs.pretrain,
        finetune_epochs=epochs.finetune,
        costs=tuple(_cost(plan, device) for device in DEVICES),
        text=text,
    )


def _search(plan: StudyPlan, search: SearchPlan) -> PlannedSearch:
    return PlannedSearch(
        label=search.label,
        phase=str(search.phase),
        variant=search.variant,
        kind=search.variant_kind,
        objective=search.objective,
        searcher=search.searcher,
        trials=search.n_trials,
        max_epochs=search.epochs,
        trial_epochs=search_epochs(plan, search),
        metric=search.metric,
        mode=search.mode,
        space={name: describe_param(p) for name, p in search.space.items()},
        init_from=search.init_from,
        reuses_checkpoint=search.reuse_checkpoint,
    )


def _cost(plan: StudyPlan, device: str) -> DeviceCost:
    e = estimate(plan, device)
    return DeviceCost(device, e.seconds, e.source, e.estimated, describe_estimate(e, plan.concurrency))
