"""Compute spent per variant: its own LR search (with its LR extension and seed-robust selection's candidates)
and seed re-runs, plus the SPT pretraining it is initialised from, which is counted in full for every variant
that builds on it."""

from __future__ import annotations

from typing import Any

from sptune.plan.phases import Phase
from sptune.report.records import (
    PRETRAIN_RERUN,
    ReportData,
    Trial,
    pretrain_objective,
)
from sptune.spec.variant_kinds import KINDS, as_built

# SPT pretraining's compute: its search and, with rerun_pretrain, its re-runs per seed.
PRETRAINING_PHASES = (Phase.PRETRAIN, PRETRAIN_RERUN)
# What a variant spent finding its pick: its search, its LR extension's trials, its candidates.
PICKING_PHASES = (Phase.SEARCH, Phase.EXTEND, Phase.CANDIDATE)

COMPUTE_HEADER = ("variant", "search trials", "seed re-runs", "trial-epochs", "seconds", "+ SPT pretraining (shared)",
                  "total epochs", "total seconds")


def variant_objectives(spec: dict[str, Any], kinds: dict[str, str]) -> dict[str, str | None]:
    """The pretraining objective each variant is initialised from (None: none, or a kind outside the table), by
    the kinds table's one rule (``as_built``: `spt` and `spt_cross` follow pretrain.objective)."""
    objective = pretrain_objective(spec)
    return {v: as_built(KINDS[kind], objective).pretraining if kind in KINDS else None for v, kind in kinds.items()}


def cost(trials: list[Trial]) -> tuple[int, float]:
    """(epochs trained, seconds) summed over trials."""
    return sum(t.epochs for t in trials), sum(t.seconds for t in trials)


def compute_table(data: ReportData, task: str, variants: list[str],
                  objectives: dict[str, str | None]) -> tuple[list[list[str]], dict[str, tuple[int, float]]]:
    """Rows per variant: own search and seed re-runs, the SPT pretraining it builds on, and the total."""
    pre = {obj: cost(ts) for obj, ts in data.pretraining(task, PRETRAINING_PHASES).items()}
    table, totals = [list(COMPUTE_HEADER)], {}
    for v in variants:
        search, reruns = data.phase_trials(PICKING_PHASES, task, v), data.phase_trials((Phase.RERUN,), task, v)
        if not search and not reruns:
            continue
        ep, s = cost(search + reruns)
        add_ep, add_s = pre.get(objectives.get(v), (0, 0.0))
        totals[v] = (ep + add_ep, s + add_s)
        table.append([v, str(len(search)), str(len(reruns)), str(ep), f"{s:.0f}",
                      f"{add_ep} ep · {add_s:.0f} s" if add_ep else "—", str(ep + add_ep), f"{s + add_s:.0f}"])
    return table + _pretraining_rows(data, task, variants, objectives, pre), totals


def _pretraining_rows(data: ReportData, task: str, variants: list[str], objectives: dict[str, str | None],
                      pre: dict[str, tuple[int, float]]) -> list[list[str]]:
    rows = []
    for obj, trials in data.pretraining(task, PRETRAINING_PHASES).items():
        users = ", ".join(v for v in variants if objectives.get(v) == obj) or "none"
        ep, s = pre[obj]
        rows.append([f"SPT pretraining, {obj} (used by {users})", str(len(trials)), "", str(ep), f"{s:.0f}",
                     "", "", ""])
    return rows


# ---------------------------------------------------------------- the budget mode and compute per tested model

# What one tested model's compute is compared in: seconds where every variant has them, else optimizer steps,
# else epochs (results.json's budget `in_all`).
MODEL_MEASURES = (("trial_seconds", "trial-seconds"), ("optimizer_steps", "optimizer steps"), ("epochs", "epochs"))


def model_compute(budget: dict[str, Any]) -> tuple[str, dict[str, float]] | None:
    """(measure, variant -> compute of one tested model, pretraining included) from results.json's budget."""
    whole = {v: entry.get("in_all") or {} for v, entry in (budget.get("variants") or {}).items()}
    for key, name in MODEL_MEASURES:
        values = {v: w.get(key) for v, w in whole.items()}
        if values and all(isinstance(x, int | float) and x > 0 for x in values.values()):
            return name, values
    return None


def budget_note(budget: dict[str, Any], spec: dict[str, Any]) -> tuple[str, float | None, str]:
    """(sentence naming the mode and each tested model's compute, the largest / smallest ratio, which pair)."""
    mode = budget.get("mode") or spec.get("budget") or "finetune_matched"
    found = model_compute(budget)
    if found is None:
        return f"Budget mode: {mode}; per-model compute not recorded in results.json.", None, ""
    measure, values = found
    hi, lo = max(values, key=values.get), min(values, key=values.get)
    ratio = values[hi] / values[lo]
    each = ", ".join(f"{v} {x:g}" for v, x in values.items())
    text = (f"Budget mode: {mode}. One tested model, its SPT pretraining included ({measure}): {each}; "
            f"{hi} {ratio:.2f}× {lo}.")
    return text, ratio, f"{hi} vs {lo} ({measure})"
