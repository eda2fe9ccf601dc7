"""How a study's trials pack (`resources.pack`; sptune.training.packing): packs per search and the steps they train.

A pack holds up to K trials of one search that share a batch size (and, within a search, the budget): a search
whose batch size is searched forms its packs per batch size drawn, so the count lies between the fewest (every
trial drew one batch size) and the most (each batch size's last pack partly filled). Every member is still a
trial: the cost counts its member-epochs as trial-epochs; what packing changes is how many optimizer steps run
(one pack step trains all its members), so the pack steps are printed beside them, and what a packed study
takes on a device is priced per pack-epoch (sptune.plan.cost): a pack trains while one of its members does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sptune.plan.selection_steps import candidate_trials, extension_trials
from sptune.plan.study_plan import SearchPlan, StudyPlan
from sptune.rules.budgets import steps_per_epoch
from sptune.rules.rungs import rung_epochs, rung_sizes


@dataclass(frozen=True)
class SearchPacks:
    label: str
    trials: int
    batch_sizes: tuple[int, ...]
    fewest: int
    most: int
    pack_steps: int | None  # the most optimizer steps its packs take (None: the training rows are unknown)


def _trial_steps(plan: StudyPlan, search: SearchPlan, batch_size: int) -> int | None:
    """The most optimizer steps one trial of ``search`` takes at ``batch_size``."""
    budget = search.budget
    if budget is not None and budget.unit == "steps":
        return search.epochs * budget.eval_every
    return search.epochs * steps_per_epoch(plan.train_rows, batch_size) if plan.train_rows else None


def search_packs(plan: StudyPlan, search: SearchPlan) -> SearchPacks | None:
    """The packs of a search that trains (None for one that reuses a checkpoint or trains 0 epochs)."""
    size = plan.spec.resources.pack
    if search.reuse_checkpoint or search.epochs == 0 or not search.n_trials:
        return None
    n = search.n_trials
    batches = tuple(sorted({int(b) for b in search.space.batch_size.candidates()}))
    fewest = math.ceil(n / size)
    most = min(n, fewest + len(batches) - 1)
    steps = _trial_steps(plan, search, batches[0])  # the smallest batch takes the most steps
    return SearchPacks(search.label, n, batches, fewest, most, None if steps is None else most * steps)


def all_packs(plan: StudyPlan) -> list[SearchPacks]:
    found = (search_packs(plan, search) for search in plan.searches)
    return [p for p in found if p is not None]


def describe_packs(plan: StudyPlan) -> list[str]:
    """The dry run's pack lines; none without packing."""
    size = plan.spec.resources.pack
    if size == 1:
        return []
    lines = [f"Packs (resources.pack: {size}): each search's trials train up to {size} to a pack, one fused model per "
             "pack; members share the search, batch size and budget, differ in lr, weight decay, warm-up and seed, and "
             "each stays a trial in every record (its own Optuna trial, MLflow run, checkpoint and early stopping)"]
    for p in all_packs(plan):
        count = f"{p.fewest}" if p.fewest == p.most else f"{p.fewest}-{p.most}"
        per = f" (per batch size drawn of {list(p.batch_sizes)})" if len(p.batch_sizes) > 1 else ""
        lines.append(f"  {p.label:<24} {p.trials} trials in {count} packs{per}")
    return lines


def describe_pack_cost(plan: StudyPlan, member_epochs: int) -> list[str]:
    """The cost's pack line: member-epochs (the trial-epochs), and the most optimizer steps the packs take."""
    if plan.spec.resources.pack == 1:
        return []
    packs = all_packs(plan)
    steps = [p.pack_steps for p in packs]
    total = f"at most {sum(steps)} pack steps" if all(s is not None for s in steps) else "pack steps unknown"
    return [f"  packed: the {member_epochs} trial-epochs are member-epochs; the searches' trials train in at most "
            f"{sum(p.most for p in packs)} packs ({total}, each step training all its members at once)"]


def halving_pack_epochs(n_trials: int, packs: int, rungs: list[int], reduction_factor: float, max_t: int) -> int:
    """Pack-epochs of one bracket of synchronous halving: a pack trains while one of its members survives, so
    between two rungs at most min(packs, survivors) packs train (the survivors may sit in as many packs)."""
    sizes = rung_sizes(n_trials, reduction_factor, len(rungs))
    stops = [*rungs, max_t]
    return sum(min(packs, size) * (stop - start) for size, stop, start in zip(sizes, stops, [0, *rungs], strict=True))


def search_pack_epochs(plan: StudyPlan, search: SearchPlan) -> int:
    """The most pack-epochs (rounds of a steps budget) a search's packs train: under sha as its rungs leave packs
    with a survivor; under asha, hyperband or fifo every pack to the end (an upper bound)."""
    packs = search_packs(plan, search)
    if packs is None:
        return 0
    s = plan.spec.scheduler
    if s.type != "sha":
        return packs.most * search.epochs
    rungs = rung_epochs(s.grace_period, s.reduction_factor, search.epochs)
    return halving_pack_epochs(packs.trials, packs.most, rungs, s.reduction_factor, search.epochs)


def packs_of(trials: int, size: int) -> int:
    """Packs of up to ``size`` members that ``trials`` trials of one stage fill."""
    return math.ceil(trials / size)


def selection_packs(plan: StudyPlan, search: SearchPlan) -> int:
    """The most packs a variant's selection adds, each trained to the end: its LR extension's rounds (one stage
    each, one after another) and its candidates (one stage)."""
    s, size = plan.spec, plan.spec.resources.pack
    extension = extension_trials(s, search)
    rounds = s.lr_extend.max_rounds if extension else 0
    per_round = packs_of(extension // rounds, size) if rounds else 0
    return rounds * per_round + packs_of(candidate_trials(s, search), size)


def rerun_packs(plan: StudyPlan) -> int:
    """The packs one selected config's re-runs fill (its seeds' trials, to the end); 0 without re-runs."""
    s = plan.spec
    return packs_of(s.rerun_seeds, s.resources.pack) if s.rerun_seeds >= 2 else 0
