"""The fairness flags: best LR on the edge of its search, rankings that flip across LRs, unequal
completed trials, diverged or failed runs, searches that learned nothing, selected epochs at the end of their
budget, and compute per variant."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sptune.judging.trivial_check import describe
from sptune.plan.phases import Phase
from sptune.report.cells import Cell
from sptune.report.compute import budget_note, compute_table, variant_objectives
from sptune.report.formatting import fmt_lr
from sptune.report.lr_search import (
    BIN_DECADES,
    CurvePoint,
    describe_space,
    lr_binner,
    lr_curves,
    lr_space,
    searched_space,
    sig,
    usable,
)
from sptune.report.records import ReportData, as_float
from sptune.rules.lr_extension import EDGE_FACTOR

FLIP_TOL = 0.01  # accuracy differences below one point are noise at these sizes, not a ranking
COMPUTE_RATIO = 1.5  # total-compute imbalance worth a warning


@dataclass
class Flag:
    key: str
    title: str
    level: str  # warn | ok | info
    summary: str
    items: list[str] = field(default_factory=list)
    table: list[list[str]] | None = None  # first row is the header


# ---------------------------------------------------------------- best LR on the edge


def _grid_edge(best: float, space: dict[str, Any]) -> tuple[str, str] | None:
    vals = sorted(float(v) for v in space["values"])
    if len(vals) == 1:
        return "high", f"the only LR searched ({describe_space(space)})"
    if best <= vals[0] * (1 + 1e-6):
        return "low", f"the lowest value of its {describe_space(space)}"
    if best >= vals[-1] * (1 - 1e-6):
        return "high", f"the highest value of its {describe_space(space)}"
    return None


def _range_edge(best: float, space: dict[str, Any]) -> tuple[str, str] | None:
    low, high = float(space["low"]), float(space["high"])
    if best <= low * EDGE_FACTOR:
        return "low", f"within {EDGE_FACTOR:g}× of the lower bound of its {describe_space(space)}"
    if best >= high / EDGE_FACTOR:
        return "high", f"within {EDGE_FACTOR:g}× of the upper bound of its {describe_space(space)}"
    return None


def _tried_edge(best: float, tried: list[float]) -> tuple[str, str] | None:
    # Without a spec the tried LRs are all we know; with fewer than three the best is always an end, not news.
    distinct = sorted({sig(x) for x in tried})
    if len(distinct) >= 3 and sig(best) in (distinct[0], distinct[-1]):
        side = "low" if sig(best) == distinct[0] else "high"
        return side, f"the {'lowest' if side == 'low' else 'highest'} of the {len(distinct)} LRs tried (no spec.yaml)"
    return None


def edge_side(best: float, space: dict[str, Any] | None, tried: list[float]) -> tuple[str, str] | None:
    """('low'|'high', why) when the best LR does not have searched LRs on both sides of it."""
    if space and space.get("values"):
        return _grid_edge(best, space)
    if space and as_float(space.get("low")) and as_float(space.get("high")):
        return _range_edge(best, space)
    return _tried_edge(best, tried)


def flag_lr_edge(data: ReportData, cells: dict[tuple[str, str], Cell]) -> Flag:
    items = []
    for (task, variant), cell in cells.items():
        tried = [t.lr for t in data.trials if usable(t) and (t.task, t.variant) == (task, variant)]
        extension = data.lr_extension.get(variant) or {}
        space = searched_space(lr_space(data.spec, variant), extension)  # widened by what its extension added
        hits = {seed: edge_side(lr, space, tried) for seed, lr in cell.lrs.items()}
        hits = {s: h for s, h in hits.items() if h}
        if not hits:
            continue
        side, why = next(iter(hits.values()))
        lrs = ", ".join(dict.fromkeys(fmt_lr(cell.lrs[s]) for s in hits))
        rounds = extension.get("rounds")
        after = f" after {rounds} round(s) of LR extension (the limit, lr_extend.max_rounds)" if rounds else ""
        items.append(f"{variant} on {task}: best LR {lrs} ({len(hits)}/{len(cell.lrs)} seeds) is {why}{after} — "
                     f"extend the search {'down' if side == 'low' else 'up'}ward; its optimum may lie outside.")
    if items:
        return Flag("lr-edge", "Best LR on the edge of the searched range", "warn",
                    "A variant whose best LR sits on a bound was not given an LR range that brackets its optimum, "
                    "so its reported accuracy may be an underestimate.", items)
    return Flag("lr-edge", "Best LR inside the searched range", "ok",
                f"Every variant's selected LR has searched LRs on both sides (not a grid end, not within "
                f"{EDGE_FACTOR:g}× of a range bound; a range an LR extension widened counts as searched).")


# ---------------------------------------------------------------- ranking flips across LRs


def _pair_flip(a: dict[Any, CurvePoint], b: dict[Any, CurvePoint]) -> tuple[list, list, int]:
    """(LRs where a leads, LRs where b leads, LRs compared) by more than FLIP_TOL."""
    common = sorted(set(a) & set(b), key=lambda k: a[k].lr)
    diffs = [(a[k].mean - b[k].mean, math.sqrt(a[k].lr * b[k].lr), a[k].mean, b[k].mean) for k in common]
    return [d for d in diffs if d[0] > FLIP_TOL], [d for d in diffs if d[0] < -FLIP_TOL], len(common)


def _lead(winner: str, loser: str, diff: tuple[float, float, float, float], sign: int = 1) -> str:
    d, lr, a, b = diff
    win, lose = (a, b) if sign > 0 else (b, a)
    return f"{winner} ahead at LR≈{fmt_lr(lr)} ({100 * win:.1f}% vs {100 * lose:.1f}%, {100 * sign * d:.1f} pts)"


def _task_flips(curves: dict[str, dict[Any, CurvePoint]], task: str, variants: list[str]) -> tuple[list[str], int]:
    """(one item per pair of variants whose order flips, pairs with two or more LRs in common)."""
    items, compared = [], 0
    present = [v for v in variants if v in curves]
    for i, va in enumerate(present):
        for vb in present[i + 1:]:
            a_ahead, b_ahead, n = _pair_flip(curves[va], curves[vb])
            compared += n >= 2
            if a_ahead and b_ahead:
                items.append(f"{va} vs {vb} on {task}: {_lead(va, vb, max(a_ahead))}, "
                             f"{_lead(vb, va, min(b_ahead), -1)} ({n} LRs compared).")
    return items, compared


def flag_rank_flip(data: ReportData, tasks: list[str], variants: list[str]) -> Flag:
    items, compared, exact_all = [], 0, True
    for task in tasks:
        trials = [t for t in data.trials if t.task == task]
        exact_all &= lr_binner(trials)[1]
        task_items, task_compared = _task_flips(lr_curves(trials), task, variants)
        items += task_items
        compared += task_compared
    binning = "shared LRs" if exact_all else f"LRs binned on a {BIN_DECADES:g}-decade log grid"
    if items:
        return Flag("rank-flip", "Ranking flips across learning rates", "warn",
                    f"Best validation accuracy per LR ({binning}, mean over seeds) orders these pairs differently "
                    f"at different LRs (margins > {100 * FLIP_TOL:g} pt): a comparison at one fixed LR could "
                    "pick either winner.", items)
    if not compared:
        return Flag("rank-flip", "Ranking across learning rates not checkable", "info",
                    "No pair of variants has two or more LRs in common to compare.")
    return Flag("rank-flip", "Ranking stable across learning rates", "ok",
                f"No pair of variants changes order by more than {100 * FLIP_TOL:g} pt across the LRs both "
                f"searched ({binning}).")


# ---------------------------------------------------------------- completed, diverged and failed trials


def _counts_from_rows(data: ReportData, task: str, variant: str) -> dict[str, int]:
    rows = [r for r in data.rows if (r["task"], r["variant"]) == (task, variant)]
    stats = [tuple(int(r.get(k) or 0) for k in ("trials", "diverged", "failed")) for r in rows]
    # Seed re-runs repeat their one search's statistics on every row: count that search once.
    if len({*stats}) == 1 and len({r.get("lr") for r in rows}) == 1:
        stats = stats[:1]
    total, div, fail = (sum(col) for col in zip(*stats, strict=True)) if stats else (0, 0, 0)
    return {"total": total, "completed": total - div - fail, "diverged": div, "failed": fail}


def _counts(data: ReportData, task: str, variant: str, phases: tuple[str, ...] = (Phase.SEARCH,)) -> dict[str, int]:
    """Trials total / completed / diverged / failed, from MLflow, else from results.json's per-row counts."""
    mine = data.phase_trials(phases, task, variant)
    if not mine:
        return _counts_from_rows(data, task, variant)
    return {"total": len(mine), "completed": sum(t.completed for t in mine),
            "diverged": sum(t.status == "diverged" for t in mine),
            "failed": sum(t.status == "failed" for t in mine)}


def flag_completed(data: ReportData, tasks: list[str], variants: list[str]) -> Flag:
    items = []
    for task in tasks:
        counts = {v: _counts(data, task, v) for v in variants}
        counts = {v: c for v, c in counts.items() if c["total"]}
        if len(counts) < 2:
            continue
        most = max(c["completed"] for c in counts.values())
        leader = next(v for v, c in counts.items() if c["completed"] == most)
        items += [f"{v} on {task}: {c['completed']} completed trials of {c['total']} (vs {most} for {leader})."
                  for v, c in counts.items() if c["completed"] < most]
    if items:
        return Flag("fewer-trials", "Unequal numbers of completed trials", "warn",
                    "Variants that got fewer completed (not diverged, not failed) trials had less chance to find "
                    "a good configuration.", items)
    return Flag("fewer-trials", "Equal numbers of completed trials", "ok",
                "Every variant completed as many trials as the others on each task.")


def _diverged_item(data: ReportData, task: str, variant: str) -> str | None:
    c = _counts(data, task, variant, (Phase.SEARCH, Phase.RERUN))
    if not (c["diverged"] or c["failed"]):
        return None
    bad = [t for t in data.phase_trials((Phase.SEARCH, Phase.RERUN), task, variant)
           if t.status in ("diverged", "failed")]
    at = ", ".join(fmt_lr(t.lr) + (f" (seed re-run {t.seed})" if t.phase == Phase.RERUN else "")
                   for t in sorted(bad, key=lambda t: t.lr or 0))
    return (f"{variant} on {task}: {c['diverged']} diverged, {c['failed']} failed of {c['total']}"
            + (f" at LR {at}." if at else "."))


def flag_diverged(data: ReportData, tasks: list[str], variants: list[str]) -> Flag:
    items = [item for task in tasks for v in variants if (item := _diverged_item(data, task, v))]
    if items:
        return Flag("diverged", "Diverged or failed runs", "warn",
                    "These trials produced no usable model; check the LRs they sat at before reading the table.",
                    items)
    return Flag("diverged", "No diverged or failed runs", "ok", "Every finetuning trial and seed re-run finished.")


# ---------------------------------------------------------------- searches that learned nothing


def _flat_item(data: ReportData, task: str, variant: str) -> str | None:
    # Exactly one validation accuracy over every LR and seed: what a model predicting one class scores
    # (the split's majority rate), whatever it was trained with. Two real learners rarely tie three ways.
    trials = [t for t in data.phase_trials((Phase.SEARCH,), task, variant)
              if t.best_val_acc is not None and t.status not in ("diverged", "failed")]
    scores = {round(t.best_val_acc, 9) for t in trials}
    if len(trials) < 3 or len(scores) != 1:
        return None
    lrs = sorted({t.lr for t in trials if t.lr is not None})
    return (f"{variant} on {task}: all {len(trials)} search trials (LR {', '.join(fmt_lr(lr) for lr in lrs)}) "
            f"ended at the same best validation accuracy, {scores.pop():.4f}.")


def flag_learned_nothing(data: ReportData, tasks: list[str], variants: list[str]) -> Flag:
    items = [item for task in tasks for v in variants if (item := _flat_item(data, task, v))]
    if items:
        return Flag("learned-nothing", "Searches that may have learned nothing", "warn",
                    "Every LR of these searches scored one and the same validation accuracy: the signature of a "
                    "model that predicts a single class (it scores the split's majority-class rate). Its selected "
                    "LR is arbitrary and its Δ says nothing about the variant; more data, epochs or model size "
                    "come before any comparison.", items)
    return Flag("learned-nothing", "Every search told its LRs apart", "ok",
                "In each variant's search, different LRs reached different validation accuracies.")


# ---------------------------------------------------------------- failures Tune retried


def _failures(data: ReportData, task: str, variant: str) -> int:
    # Tune's count for the variant's search (results.json); every seed's row repeats it: count it once.
    counts = [int(r.get("failures") or 0) for r in data.rows if (r["task"], r["variant"]) == (task, variant)]
    return max(counts, default=0)


def flag_failures(data: ReportData, tasks: list[str], variants: list[str]) -> Flag:
    """Trial failures (a crashed process, a lost node) that Tune retried from the trial's last checkpoint."""
    counts = {(t, v): n for t in tasks for v in variants if (n := _failures(data, t, v))}
    if not counts:
        return Flag("failures", "No trial failures", "ok", "No trial of any search crashed or lost its node.")
    items = [f"{v} on {t}: {n} trial failure{'s' if n != 1 else ''}" for (t, v), n in counts.items()]
    return Flag("failures", "Trial failures", "info",
                "Trials whose process or node died; each was retried from its last checkpoint (up to max_failures "
                "times; one that ran out of retries is counted as failed above). Counted by Ray Tune.", items)


# ---------------------------------------------------------------- selected epochs at the end of the budget


def flag_unconverged(data: ReportData, tasks: list[str], variants: list[str]) -> Flag:
    """Rows whose selected epoch is in the last 10 % of its budget (results.json's may_be_unconverged)."""
    marked = [r for r in data.rows if r.get("may_be_unconverged") and r["task"] in tasks and r["variant"] in variants]
    if not any("may_be_unconverged" in r for r in data.rows):
        return Flag("unconverged", "Convergence not recorded", "info",
                    "results.json records no may_be_unconverged per row (an older study, or rows from MLflow).")
    if not marked:
        return Flag("unconverged", "Selected epochs before the end of their budgets", "ok",
                    "Every tested checkpoint's epoch lies before the last 10 % of its variant's budget.")
    by_variant: dict[tuple[str, str], list[str]] = {}
    for r in marked:
        where = f"seed {r.get('seed')}: epoch {r.get('best_epoch')}"
        by_variant.setdefault((r["task"], r["variant"]), []).append(where)
    items = [f"{v} on {t}: {', '.join(seeds)}." for (t, v), seeds in by_variant.items()]
    return Flag("unconverged", "Variants that may be unconverged", "warn",
                "These tested checkpoints were selected in the last 10 % of their budget: the variant may still have "
                "been improving, so its accuracy may be an underestimate. Give it more epochs (or steps), or "
                "finetune.until_converged.", items)


# ---------------------------------------------------------------- compute per variant


def _compute_imbalance(task: str, totals: dict[str, tuple[int, float]]) -> str | None:
    # Seconds when every variant logged them, else trial-epochs (a store without epoch_seconds).
    use_s = all(s > 0 for _, s in totals.values())
    amount = {v: (s if use_s else float(e)) for v, (e, s) in totals.items()}
    if len(amount) > 1 and min(amount.values()) > 0:
        hi, lo = max(amount, key=amount.get), min(amount, key=amount.get)
        ratio = amount[hi] / amount[lo]
        if ratio >= COMPUTE_RATIO:
            return (f"{hi} on {task} used {ratio:.1f}× the compute of {lo} "
                    f"({'seconds' if use_s else 'trial-epochs'}, SPT pretraining included).")
    return None


def _compute_summary(data: ReportData) -> str:
    # results.json names each timeline entry's Tuner (its experiment) under "stage".
    timeline = [f"{st.get('stage')}: {float(st['end']) - float(st['start']):.0f} s wall-clock"
                for st in data.timeline if as_float(st.get("start")) and as_float(st.get("end"))]
    summary = ("Trial-epochs and seconds (sum of per-epoch epoch_seconds) per variant, LR search (with its LR "
               "extension and candidates) and seed re-runs together; SPT pretraining is counted in full for every "
               "variant initialised from it.")
    return summary + (" Tuners: " + "; ".join(timeline) + "." if timeline else "")


def _model_items(data: ReportData) -> tuple[str, list[str]]:
    """The budget mode and one tested model's compute per variant. Under total_matched, models that still differ by
    COMPUTE_RATIO are an item (a variant's own epochs, until_converged); finetune_matched differs by design."""
    note, ratio, pair = budget_note(data.budget, data.spec)
    if ratio is None or ratio < COMPUTE_RATIO or data.budget.get("mode") != "total_matched":
        return note, []
    return note, [f"Under total_matched, one tested model of {pair} trained {ratio:.2f}× the other's compute."]


def flag_compute(data: ReportData, tasks: list[str], variants: list[str], kinds: dict[str, str]) -> Flag:
    note, items = _model_items(data)
    table = None
    objectives = variant_objectives(data.spec, kinds)
    for task in tasks:
        rows, totals = compute_table(data, task, variants, objectives)
        if len(tasks) > 1:
            rows = [rows[0]] + [[f"{task}: {r[0]}", *r[1:]] for r in rows[1:]]
        table = rows if table is None else table + rows[1:]
        if item := _compute_imbalance(task, totals):
            items.append(item)
    if items:
        return Flag("compute", "Unequal compute per variant", "warn", f"{note} {_compute_summary(data)}", items, table)
    return Flag("compute", "Compute per variant", "info", f"{note} {_compute_summary(data)}", [], table)


# ---------------------------------------------------------------- SPT against predictors that need no training


def flag_spt_trivial(data: ReportData) -> Flag:
    """Each pretraining's selected checkpoint against the trivial predictors on its validation masks."""
    checks = data.versus_trivial
    if not checks:
        return Flag("spt-trivial", "SPT not checked against trivial predictors", "info",
                    "results.json records no trivial-predictor scores (no pretraining, or an older study).")
    items = [describe(label, check) for label, check in checks.items()]
    if all(check["beats_trivial"] for check in checks.values()):
        return Flag("spt-trivial", "SPT beat the predictors that need no training", "ok",
                    "Every selected SPT checkpoint reconstructs the validation masks better than the best trivial "
                    "predictor (pixels: the visible mean or the neighbour average; tokens: the most frequent or "
                    "the nearest visible token) on the same masks.", items)
    return Flag("spt-trivial", "SPT learned less than a neighbour average", "warn",
                "A selected SPT checkpoint does not beat a predictor that needs no training on its own validation "
                "masks: the finetuning comparison tests an untrained prior, not what SPT can learn. Pretrain longer "
                "or at another LR before reading its Δ.", items)


def all_flags(data: ReportData, cells: dict[tuple[str, str], Cell], tasks: list[str], variants: list[str],
              kinds: dict[str, str]) -> list[Flag]:
    """Every flag, in the order the page shows them."""
    return [flag_lr_edge(data, cells), flag_rank_flip(data, tasks, variants),
            flag_completed(data, tasks, variants), flag_diverged(data, tasks, variants),
            flag_learned_nothing(data, tasks, variants), flag_unconverged(data, tasks, variants),
            flag_failures(data, tasks, variants), flag_spt_trivial(data),
            flag_compute(data, tasks, variants, kinds)]
