"""results.json's `budget` key and results.md's budget table: the study's budget mode and, per variant, what
each of its tested models trained (finetuning, and the SPT pretraining it starts from, counted apart).

Nominal numbers come from the plan (sptune.rules.budgets): epochs, and optimizer steps at the selected batch
size (steps per epoch = ceil(training rows / batch size)). What the tested trials did train comes from their
last Tune result (`Selection.trial_totals`): iterations, optimizer steps and Ray's `time_total_s`.
"""

from __future__ import annotations

from statistics import mean
from typing import Any

from sptune.judging.convergence import may_be_unconverged
from sptune.judging.selection import Selection
from sptune.plan.study_plan import SearchPlan, StudyPlan
from sptune.rules.budgets import MODE_TEXT, Budget, steps_per_epoch

SECONDS_SOURCE = ("Ray Tune's time_total_s of each tested trial's whole run (training, validation, checkpoints; "
                  "not time spent paused at a rung), mean over the variant's tested trials; pretraining: the selected "
                  "pretraining trial's (with rerun_pretrain, the mean over the per-seed ones)")


def _rows_of(plan: StudyPlan, search: SearchPlan) -> int:
    """Training rows one pass of the search covers (pretraining unpairs a paired task's pairs)."""
    source = plan.source_data.get(search.label) if search.is_pretraining else None
    rows, paired = (len(source.train), source.info.paired) if source is not None else (plan.train_rows,
                                                                                       plan.info.paired)
    return rows * 2 if paired and search.is_pretraining else rows


def _trained(selections: list[Selection], budget: Budget, per_epoch: int | None) -> dict[str, Any]:
    totals = [s.trial_totals for s in selections if s.trial_totals]
    if not totals:
        return {}
    steps = [int(t["optimizer_steps"]) or (int(t["iterations"]) * (per_epoch or 0)) for t in totals]
    if budget.unit == "epochs":
        epochs = [int(t["iterations"]) for t in totals]
    else:
        epochs = [round(n / per_epoch, 2) if per_epoch else None for n in steps]
    return {"epochs_trained": epochs, "optimizer_steps_trained": steps,
            "trial_seconds": round(mean(float(t["seconds"]) for t in totals), 2)}


def stage_budget(budget: Budget, selections: list[Selection], rows: int) -> dict[str, Any]:
    """One stage of a tested model: its nominal budget in epochs and optimizer steps at the selected batch size,
    and what its tested trials trained."""
    batch = int(selections[0].config.get("batch_size") or 0) or None if selections else None
    per_epoch = steps_per_epoch(rows, batch) if rows and batch else None
    if budget.unit == "epochs":
        epochs, steps = budget.amount, budget.amount * per_epoch if per_epoch else None
    else:
        epochs, steps = (round(budget.amount / per_epoch, 2) if per_epoch else None), budget.amount
    entry = {"unit": budget.unit, "epochs": epochs, "optimizer_steps": steps, "batch_size": batch,
             "steps_per_epoch": per_epoch}
    if budget.unit == "steps":
        entry["eval_every"] = budget.eval_every
    if budget.added:
        entry["added_for_pretraining"] = budget.added
    if budget.max_rounds:
        entry.update(until_converged={"patience": budget.patience, "max_epochs": budget.max_rounds})
    return {**entry, **_trained(selections, budget, per_epoch)}


def _in_all(parts: list[dict[str, Any]]) -> dict[str, Any]:
    def total(key: str) -> float | None:
        values = [p.get(key) for p in parts]
        return None if any(v is None for v in values) else round(sum(values), 2)

    return {"epochs": total("epochs"), "optimizer_steps": total("optimizer_steps"),
            "trial_seconds": total("trial_seconds")}


def _convergence(budget: Budget, tested: list[Selection]) -> dict[str, Any]:
    """The tested checkpoints' epochs and whether any is in the last 10 % of the budget."""
    epochs = [s.epoch for s in tested]
    return {"selected_epochs": epochs, "selected_in": budget.round_word,
            "may_be_unconverged": any(may_be_unconverged(e, budget) for e in epochs)}


def _tested(selected: dict[str, list[Selection]], labels: list[str], rerun_labels: list[str]) -> list[Selection]:
    """The re-runs (over every look of sequential ones), else the last pick made of `labels` (a search's, then
    what makes its variant's pick)."""
    reruns = [s for label in rerun_labels for s in selected.get(label, [])]
    return reruns or next((selected[x][:1] for x in reversed(labels) if x in selected), [])


def budget_document(plan: StudyPlan, selected: dict[str, list[Selection]]) -> dict[str, Any]:
    """results.json's `budget`: the mode and, per variant, its finetuning, the pretraining it starts from (None
    for none) and both in all. `selected`: every finished search's selections, by label."""
    pretrainings = {p.label: p for p in plan.pretrainings()}
    variants = {}
    for search in plan.variant_searches():
        tested = _tested(selected, plan.selection_labels(search), plan.rerun_labels(search))
        finetune = stage_budget(search.budget, tested, _rows_of(plan, search))
        pre = pretrainings.get(search.init_from)
        pretraining = None
        if pre is not None:
            pretraining = {"stage": pre.label, **stage_budget(pre.budget, _tested(selected, [pre.label],
                                                                                  [pre.rerun_label]),
                                                              _rows_of(plan, pre))}
        variants[search.variant] = {"finetune": finetune, "pretraining": pretraining,
                                    "in_all": _in_all([finetune] + ([pretraining] if pretraining else [])),
                                    **_convergence(search.budget, tested)}
    return {"mode": plan.spec.budget, "mode_text": MODE_TEXT[plan.spec.budget], "trial_seconds_source": SECONDS_SOURCE,
            "variants": variants}


def _cell(stage: dict[str, Any] | None) -> str:
    if not stage:
        return "—"
    epochs = stage.get("epochs")
    text = f"{epochs:g} epochs" if epochs is not None else "? epochs"
    text += f" · {stage['optimizer_steps']} steps" if stage.get("optimizer_steps") is not None else ""
    text += f" (batch {stage['batch_size']})" if stage.get("batch_size") else ""
    trained = stage.get("epochs_trained")
    if trained and any(t != epochs for t in trained):
        text += f", trained {'/'.join(f'{t:g}' for t in trained if t is not None)}"
    return text


def budget_table(budget: dict[str, Any]) -> str:
    """results.md's budget section: the mode, then per variant what one tested model trained."""
    lines = [f"Budget: {budget['mode']} ({budget['mode_text']}).", "",
             "| variant | finetuning | SPT pretraining | in all | trial-seconds | selected epochs |",
             "|---|---|---|---|---|---|"]
    for variant, entry in budget["variants"].items():
        whole = entry["in_all"]
        seconds = whole.get("trial_seconds")
        lines.append(f"| {variant} | {_cell(entry['finetune'])} | {_cell(entry['pretraining'])} | "
                     f"{_cell(whole)} | {'-' if seconds is None else f'{seconds:.0f}'} | {_epochs_cell(entry)} |")
    return "\n".join(lines + ["", f"Trial-seconds: {budget['trial_seconds_source']}."])


def _epochs_cell(entry: dict[str, Any]) -> str:
    epochs = "/".join(str(e) for e in entry.get("selected_epochs") or []) or "-"
    rounds = " (rounds)" if entry.get("selected_in") == "evaluation rounds" else ""
    return epochs + rounds + (" ⚠ may be unconverged" if entry.get("may_be_unconverged") else "")
