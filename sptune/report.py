"""Fairness report for a finished study: ``python -m sptune.report RUN_DIR_OR_MLFLOW_RUN``.

Reads results.json (the contract) and the study's MLflow child runs through ``MlflowClient`` in this
(driver) process, and writes a self-contained ``report.html`` (inline CSS and SVG, no scripts, no network)
plus ``results.md`` and ``results.csv`` next to it. The flags implement DESIGN.md §1 "Fair sweeps": a best
LR on the edge of its search, rankings that flip across LRs, unequal completed trials, divergence, and
compute spent per variant (SPT pretraining attributed to the variants initialised from it).
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import math
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sptune.errors import SptuneError

EDGE_FACTOR = 1.5  # a range search whose best LR is within this factor of a bound has not bracketed the optimum
FLIP_TOL = 0.01  # accuracy differences below one point are noise at these sizes, not a ranking
COMPUTE_RATIO = 1.5  # total-compute imbalance worth a warning
BIN_DECADES = 0.25  # LR bin width when variants did not try the same LRs (random/Optuna searches)
BOOTSTRAP_SAMPLES = 5000
# Used only when sptune.spec has no kind -> objective table: kinds initialised from an SPT checkpoint.
SPT_KIND_PREFIXES = ("spt", "qk")
# MLflow stages: the LR/batch search (ASHA), re-training of the selected config per seed, SPT pretraining.
SEARCH, RERUN, PRETRAIN = "finetune", "seed", "pretrain"
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#8C564B", "#000000")
PRETRAIN_COLORS = ("#7f7f7f", "#b5b5b5")
RUN_ID = re.compile(r"^[0-9a-f]{32}$")


class ReportError(SptuneError):
    """The report's input (run directory, run id, tracking store) is missing or unusable."""


# ---------------------------------------------------------------- data


@dataclass
class Trial:
    """One MLflow child run (one Ray Tune trial)."""

    run_id: str
    stage: str  # pretrain | finetune (the search) | seed (selected config re-trained per seed)
    variant: str
    kind: str
    task: str
    seed: str
    lr: float | None
    batch_size: str
    status: str  # finished | diverged | failed | incomplete
    selected: bool
    max_epochs: int | None
    best_val_acc: float | None
    test_acc: float | None
    selected_epoch: int | None
    curve: list[tuple[int, float]]  # val_acc (finetune) or val_loss (pretrain) per epoch
    seconds: float
    epochs: int  # epochs actually trained (ASHA may stop a trial early)
    objective: str | None = None  # pretraining runs: masked | causal

    @property
    def completed(self) -> bool:
        return self.status == "finished"


@dataclass
class ReportData:
    name: str
    run_dir: Path
    rows: list[dict[str, Any]]
    trials: list[Trial]
    spec: dict[str, Any]
    timeline: list[dict[str, Any]]
    source: str
    notes: list[str] = field(default_factory=list)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ReportError(str(path), f"cannot read results ({err})", "point at a study output directory") from err


def _read_spec(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "spec.yaml"
    if not path.is_file():
        return {}
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError:
        return {}  # the report still works without the search spaces; edge checks fall back to tried LRs


def _sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def resolve_tracking_uri(recorded: str | None, run_dir: Path) -> str | None:
    """The recorded URI, unless it is a SQLite file that moved with the run directory."""
    local = run_dir / "mlflow.db"
    path = _sqlite_path(recorded) if recorded else None
    if recorded and (path is None or path.is_file()):
        return recorded
    # Opening a missing SQLite path would silently create an empty store.
    return f"sqlite:///{local.resolve()}" if local.is_file() else None


def unreachable(uri: str, timeout: float = 5.0) -> str | None:
    """Why an HTTP tracking server cannot be used, checked quickly (MLflow's own retries take minutes)."""
    if not uri.startswith(("http://", "https://")):
        return None
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout):
            return None
    except (urllib.error.URLError, OSError) as err:
        return f"server not reachable ({getattr(err, 'reason', err)})"


def _search_children(client: Any, experiment_id: str, parent_id: str) -> list[Any]:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'",
                                  max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _history(client: Any, run_id: str, key: str) -> list[tuple[int, float]]:
    # Keyed by step: a resumed trial re-logs epochs, and the last value is the one that counted.
    by_step = {int(m.step): float(m.value) for m in client.get_metric_history(run_id, key)}
    return sorted(by_step.items())


def _status(tags: dict[str, str], run_status: str) -> str:
    if tags.get("sptune.status"):
        return tags["sptune.status"]
    return "failed" if run_status in ("FAILED", "KILLED") else "incomplete"


def _as_int(value: Any) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def _as_float(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _trial(client: Any, run: Any, default_task: str) -> Trial:
    tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
    stage = tags.get("sptune.stage", params.get("stage", ""))
    curve = _history(client, run.info.run_id, "val_loss" if stage == PRETRAIN else "val_acc")
    seconds = _history(client, run.info.run_id, "epoch_seconds")
    epochs = max([s for s, _ in curve] + [s for s, _ in seconds] + [0])
    best = metrics.get("best_val_acc")
    if best is None and stage != PRETRAIN and curve:
        best = max(v for _, v in curve)
    variant = tags.get("sptune.variant", params.get("variant", ""))
    return Trial(
        run_id=run.info.run_id, stage=stage, variant=variant, kind=params.get("kind", variant),
        task=params.get("task", default_task), seed=str(params.get("seed", "")), lr=_as_float(params.get("lr")),
        batch_size=str(_as_int(params.get("batch_size")) or ""), status=_status(tags, run.info.status),
        selected=tags.get("sptune.selected") == "true", max_epochs=_as_int(params.get("max_epochs")),
        best_val_acc=_as_float(best), test_acc=_as_float(metrics.get("test_acc")),
        selected_epoch=_as_int(metrics.get("selected_epoch", metrics.get("best_epoch"))),
        curve=curve, seconds=sum(v for _, v in seconds), epochs=epochs,
        objective=(params.get("objective") or "masked") if stage == PRETRAIN else None,
    )


def fetch_trials(client: Any, parent_id: str, default_task: str = "") -> list[Trial]:
    """Every sptune child run of a study's parent run."""
    experiment_id = client.get_run(parent_id).info.experiment_id
    runs = sorted(_search_children(client, experiment_id, parent_id), key=lambda r: r.info.start_time or 0)
    return [_trial(client, r, default_task) for r in runs if r.data.tags.get("sptune.stage")]


def rows_from_trials(trials: list[Trial]) -> list[dict[str, Any]]:
    """results.json-style rows rebuilt from the selected runs (when only MLflow is at hand): the per-seed
    re-runs where the study has them, else the search's selected trial."""
    reran = {(t.task, t.variant) for t in trials if t.stage == RERUN and t.selected}
    rows = []
    for t in trials:
        if not t.selected or t.stage != (RERUN if (t.task, t.variant) in reran else SEARCH):
            continue
        group = [g for g in trials if (g.stage, g.task, g.variant) == (SEARCH, t.task, t.variant)
                 and (t.stage == RERUN or g.seed == t.seed)]
        rows.append({
            "variant": t.variant, "kind": t.kind, "task": t.task, "seed": t.seed, "lr": t.lr,
            "batch_size": t.batch_size, "best_epoch": t.selected_epoch, "val_acc": t.best_val_acc,
            "test_acc": t.test_acc, "trials": len(group), "diverged": sum(g.status == "diverged" for g in group),
            "failed": sum(g.status == "failed" for g in group), "trial_epochs": sum(g.epochs for g in group),
            "trial_id": "", "mlflow_run_id": t.run_id,
        })
    order = {key: i for i, key in enumerate(dict.fromkeys((t.task, t.variant) for t in trials))}
    return sorted(rows, key=lambda r: (order[(r["task"], r["variant"])], _seed_key(str(r["seed"]))))


def _results_from_artifact(client: Any, parent_id: str) -> dict[str, Any]:
    # A remote study's directory may be elsewhere; its parent run carries results.json as an artifact.
    try:
        if "results.json" not in {a.path for a in client.list_artifacts(parent_id)}:
            return {}
        with tempfile.TemporaryDirectory() as tmp:
            return json.loads(Path(client.download_artifacts(parent_id, "results.json", tmp)).read_text())
    except Exception:
        return {}


def _normalise_rows(rows: list[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        r = dict(r)
        r["task"] = str(r.get("task") or task or "task")
        r["seed"] = str(r.get("seed", ""))
        r["kind"] = r.get("kind") or r["variant"]
        out.append(r)
    return out


def load_data(run_dir: Path, tracking_uri: str | None = None, parent_run_id: str | None = None) -> ReportData:
    results = _read_json(run_dir / "results.json") if (run_dir / "results.json").is_file() else {}
    ml = results.get("mlflow") or {}
    uri = tracking_uri or resolve_tracking_uri(ml.get("tracking_uri"), run_dir)
    parent = parent_run_id or ml.get("parent_run_id")
    trials, notes = [], []
    down = unreachable(uri) if uri and parent else None
    if down:
        notes.append(f"MLflow runs not readable from {uri} ({down}); figures and trial-level flags are missing.")
    elif uri and parent:
        try:
            from mlflow.tracking import MlflowClient

            client = MlflowClient(tracking_uri=uri)
            trials = fetch_trials(client, parent, str(results.get("task", "")))
            results = results or _results_from_artifact(client, parent)
        except Exception as err:  # unreachable server, deleted run: the table still comes from results.json
            notes.append(f"MLflow runs not readable from {uri} ({type(err).__name__}: {str(err)[:200]}); "
                         "figures and trial-level flags are missing.")
    else:
        notes.append("No MLflow store found; figures and trial-level flags are missing.")
    rows = _normalise_rows(results.get("rows") or rows_from_trials(trials), str(results.get("task", "")))
    if not rows and not trials:
        raise ReportError(str(run_dir), "no results.json rows and no MLflow trial runs to report on",
                          "pass a finished study's output directory, or a parent run id with --tracking-uri")
    source = f"MLflow {uri} · parent run {parent}" if uri and parent else str(run_dir / "results.json")
    return ReportData(name=str(results.get("study") or run_dir.name), run_dir=run_dir, rows=rows, trials=trials,
                      spec=_read_spec(run_dir), timeline=list(results.get("timeline") or []), source=source,
                      notes=notes)


# ---------------------------------------------------------------- statistics


@dataclass
class Summary:
    mean: float
    std: float | None  # sample std over seeds; None with one seed
    ci: tuple[float, float] | None  # bootstrap 95 % CI of the mean; None with one seed
    n: int
    paired: bool | None = None  # for deltas: paired by seed, or difference of independent means


def bootstrap_ci(values: list[float], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> tuple[float, float] | None:
    """Percentile CI of the mean over seeds (fixed RNG so the report is reproducible)."""
    if len(values) < 2:
        return None
    x = np.asarray(values, dtype=float)
    means = x[np.random.default_rng(seed).integers(0, len(x), size=(samples, len(x)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def summarize(values: list[float]) -> Summary | None:
    if not values:
        return None
    std = float(np.std(values, ddof=1)) if len(values) > 1 else None
    return Summary(float(np.mean(values)), std, bootstrap_ci(values), len(values))


def paired_delta(values: dict[str, float], base: dict[str, float]) -> Summary | None:
    """Δ vs the baseline: per-seed differences when seeds match, else difference of means."""
    common = sorted(set(values) & set(base))
    if common:
        out = summarize([values[s] - base[s] for s in common])
        out.paired = True
        return out
    if not values or not base:
        return None
    a, b = np.asarray(list(values.values())), np.asarray(list(base.values()))
    ci = None
    if len(a) > 1 and len(b) > 1:
        rng = np.random.default_rng(0)
        diffs = (a[rng.integers(0, len(a), (BOOTSTRAP_SAMPLES, len(a)))].mean(1)
                 - b[rng.integers(0, len(b), (BOOTSTRAP_SAMPLES, len(b)))].mean(1))
        ci = float(np.percentile(diffs, 2.5)), float(np.percentile(diffs, 97.5))
    return Summary(float(a.mean() - b.mean()), None, ci, min(len(a), len(b)), paired=False)


@dataclass
class Cell:
    """One variant on one task, over seeds."""

    task: str
    variant: str
    kind: str
    test: dict[str, float]
    val: dict[str, float]
    lrs: dict[str, float]
    test_summary: Summary | None = None
    val_summary: Summary | None = None
    delta: Summary | None = None
    baseline: str | None = None


def _by_seed(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    return {r["seed"]: float(r[key]) for r in rows if _as_float(r.get(key)) is not None}


def baseline_variant(variants: list[str], kinds: dict[str, str]) -> str | None:
    scratch = [v for v in variants if kinds.get(v) == "scratch"]
    return "scratch" if "scratch" in scratch else (scratch[0] if scratch else None)


def aggregate(rows: list[dict[str, Any]], tasks: list[str], variants: list[str],
              kinds: dict[str, str]) -> dict[tuple[str, str], Cell]:
    cells = {}
    base = baseline_variant(variants, kinds)
    for task in tasks:
        for v in variants:
            mine = [r for r in rows if r["task"] == task and r["variant"] == v]
            if not mine:
                continue
            cell = Cell(task, v, kinds[v], _by_seed(mine, "test_acc"), _by_seed(mine, "val_acc"), _by_seed(mine, "lr"))
            cell.test_summary = summarize(list(cell.test.values()))
            cell.val_summary = summarize(list(cell.val.values()))
            cells[(task, v)] = cell
        if base and (task, base) in cells:
            for v in variants:
                if (task, v) in cells and v != base:
                    cells[(task, v)].delta = paired_delta(cells[(task, v)].test, cells[(task, base)].test)
                    cells[(task, v)].baseline = base
    return cells


# ---------------------------------------------------------------- LR bins and curves


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits - 1}e}")


def _usable(t: Trial) -> bool:
    return t.stage == SEARCH and t.completed and t.lr is not None and t.lr > 0 and t.best_val_acc is not None


def lr_binner(trials: list[Trial]) -> tuple[Any, bool]:
    """Exact LRs when every variant tried the same, well-separated ones (grids), else log bins of BIN_DECADES."""
    sets: dict[str, set[float]] = {}
    for t in trials:
        if _usable(t):
            sets.setdefault(t.variant, set()).add(_sig(t.lr))
    distinct = {frozenset(s) for s in sets.values()}
    if len(distinct) == 1:
        vals = sorted(next(iter(distinct)))
        gaps = [math.log10(hi / lo) for lo, hi in zip(vals, vals[1:], strict=False)]
        # Shared but near-identical LRs (a seeded sampler) are one LR in effect: bin them instead.
        if len(vals) <= 24 and min(gaps, default=1.0) >= BIN_DECADES / 2:
            return _sig, True
    # The epsilon keeps exact powers of ten in the bin they start.
    return (lambda lr: math.floor(math.log10(lr) / BIN_DECADES + 1e-9)), False


@dataclass
class CurvePoint:
    lr: float  # geometric mean of the variant's LRs in the bin
    mean: float  # per-seed best val acc in the bin, averaged over seeds
    low: float
    high: float
    n: int


def lr_curves(trials: list[Trial]) -> dict[str, dict[Any, CurvePoint]]:
    """variant -> bin -> best validation accuracy at that LR (max over trials in a seed, then over seeds)."""
    key, _ = lr_binner(trials)
    best: dict[tuple[str, Any, str], float] = {}
    lrs: dict[tuple[str, Any], list[float]] = {}
    for t in filter(_usable, trials):
        k = (t.variant, key(t.lr), t.seed)
        best[k] = max(best.get(k, -math.inf), t.best_val_acc)
        lrs.setdefault(k[:2], []).append(t.lr)
    curves: dict[str, dict[Any, CurvePoint]] = {}
    for (variant, b), xs in lrs.items():
        vals = [v for (vv, bb, _), v in best.items() if (vv, bb) == (variant, b)]
        lr = float(np.exp(np.mean(np.log(xs))))
        curves.setdefault(variant, {})[b] = CurvePoint(lr, float(np.mean(vals)), min(vals), max(vals), len(vals))
    return curves


# ---------------------------------------------------------------- flags


@dataclass
class Flag:
    key: str
    title: str
    level: str  # warn | ok | info
    summary: str
    items: list[str] = field(default_factory=list)
    table: list[list[str]] | None = None  # first row is the header


def fmt_lr(x: float | None) -> str:
    if x is None:
        return "-"
    mant, exp = f"{x:.2e}".split("e")
    mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{int(exp)}"


def _lr_space(spec: dict[str, Any], variant: str) -> dict[str, Any] | None:
    space = ((((spec.get("variants") or {}).get(variant) or {}).get("search")) or {}).get("lr")
    return space if isinstance(space, dict) else None


def _describe_space(space: dict[str, Any]) -> str:
    if space.get("values"):
        return f"{space.get('type', 'grid')} [{', '.join(fmt_lr(float(v)) for v in space['values'])}]"
    return f"{space.get('type', 'range')} [{fmt_lr(space.get('low'))}, {fmt_lr(space.get('high'))}]"


def edge_side(best: float, space: dict[str, Any] | None, tried: list[float]) -> tuple[str, str] | None:
    """('low'|'high', why) when the best LR does not have searched LRs on both sides of it."""
    if space and space.get("values"):
        vals = sorted(float(v) for v in space["values"])
        if len(vals) == 1:
            return "high", f"the only LR searched ({_describe_space(space)})"
        if best <= vals[0] * (1 + 1e-6):
            return "low", f"the lowest value of its {_describe_space(space)}"
        if best >= vals[-1] * (1 - 1e-6):
            return "high", f"the highest value of its {_describe_space(space)}"
        return None
    if space and _as_float(space.get("low")) and _as_float(space.get("high")):
        low, high = float(space["low"]), float(space["high"])
        if best <= low * EDGE_FACTOR:
            return "low", f"within {EDGE_FACTOR:g}× of the lower bound of its {_describe_space(space)}"
        if best >= high / EDGE_FACTOR:
            return "high", f"within {EDGE_FACTOR:g}× of the upper bound of its {_describe_space(space)}"
        return None
    distinct = sorted({_sig(x) for x in tried})
    if len(distinct) >= 3 and _sig(best) in (distinct[0], distinct[-1]):
        side = "low" if _sig(best) == distinct[0] else "high"
        return side, f"the {'lowest' if side == 'low' else 'highest'} of the {len(distinct)} LRs tried (no spec.yaml)"
    return None


def flag_lr_edge(data: ReportData, cells: dict[tuple[str, str], Cell]) -> Flag:
    items = []
    for (task, variant), cell in cells.items():
        tried = [t.lr for t in data.trials if _usable(t) and (t.task, t.variant) == (task, variant)]
        hits = {seed: edge_side(lr, _lr_space(data.spec, variant), tried) for seed, lr in cell.lrs.items()}
        hits = {s: h for s, h in hits.items() if h}
        if not hits:
            continue
        side, why = next(iter(hits.values()))
        lrs = ", ".join(dict.fromkeys(fmt_lr(cell.lrs[s]) for s in hits))
        items.append(f"{variant} on {task}: best LR {lrs} ({len(hits)}/{len(cell.lrs)} seeds) is {why} — "
                     f"extend the search {'down' if side == 'low' else 'up'}ward; its optimum may lie outside.")
    if items:
        return Flag("lr-edge", "Best LR on the edge of the searched range", "warn",
                    "A variant whose best LR sits on a bound was not given an LR range that brackets its optimum, "
                    "so its reported accuracy may be an underestimate.", items)
    return Flag("lr-edge", "Best LR inside the searched range", "ok",
                f"Every variant's selected LR has searched LRs on both sides (not a grid end, not within "
                f"{EDGE_FACTOR:g}× of a range bound).")


def _pair_flip(a: dict[Any, CurvePoint], b: dict[Any, CurvePoint]) -> tuple[list, list, int]:
    common = sorted(set(a) & set(b), key=lambda k: a[k].lr)
    diffs = [(a[k].mean - b[k].mean, math.sqrt(a[k].lr * b[k].lr), a[k].mean, b[k].mean) for k in common]
    return [d for d in diffs if d[0] > FLIP_TOL], [d for d in diffs if d[0] < -FLIP_TOL], len(common)


def _lead(winner: str, loser: str, diff: tuple[float, float, float, float], sign: int = 1) -> str:
    d, lr, a, b = diff
    win, lose = (a, b) if sign > 0 else (b, a)
    return f"{winner} ahead at LR≈{fmt_lr(lr)} ({100 * win:.1f}% vs {100 * lose:.1f}%, {100 * sign * d:.1f} pts)"


def flag_rank_flip(data: ReportData, tasks: list[str], variants: list[str]) -> Flag:
    items, compared, exact_all = [], 0, True
    for task in tasks:
        trials = [t for t in data.trials if t.task == task]
        curves = lr_curves(trials)
        exact_all &= lr_binner(trials)[1]
        present = [v for v in variants if v in curves]
        for i, va in enumerate(present):
            for vb in present[i + 1:]:
                a_ahead, b_ahead, n = _pair_flip(curves[va], curves[vb])
                compared += n >= 2
                if a_ahead and b_ahead:
                    items.append(f"{va} vs {vb} on {task}: {_lead(va, vb, max(a_ahead))}, "
                                 f"{_lead(vb, va, min(b_ahead), -1)} ({n} LRs compared).")
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


def _stage_trials(data: ReportData, stages: tuple[str, ...], task: str, variant: str) -> list[Trial]:
    return [t for t in data.trials if t.stage in stages and (t.task, t.variant) == (task, variant)]


def _counts(data: ReportData, task: str, variant: str, stages: tuple[str, ...] = (SEARCH,)) -> dict[str, int]:
    mine = _stage_trials(data, stages, task, variant)
    if mine:
        return {"total": len(mine), "completed": sum(t.completed for t in mine),
                "diverged": sum(t.status == "diverged" for t in mine),
                "failed": sum(t.status == "failed" for t in mine)}
    rows = [r for r in data.rows if (r["task"], r["variant"]) == (task, variant)]  # results.json only
    stats = [tuple(int(r.get(k) or 0) for k in ("trials", "diverged", "failed")) for r in rows]
    # Seed re-runs repeat their one search's statistics on every row: count that search once.
    if len({*stats}) == 1 and len({r.get("lr") for r in rows}) == 1:
        stats = stats[:1]
    total, div, fail = (sum(col) for col in zip(*stats, strict=True)) if stats else (0, 0, 0)
    return {"total": total, "completed": total - div - fail, "diverged": div, "failed": fail}


def flag_completed(data: ReportData, tasks: list[str], variants: list[str]) -> Flag:
    items = []
    for task in tasks:
        counts = {v: _counts(data, task, v) for v in variants}
        counts = {v: c for v, c in counts.items() if c["total"]}
        if len(counts) < 2:
            continue
        most = max(c["completed"] for c in counts.values())
        leader = next(v for v, c in counts.items() if c["completed"] == most)
        for v, c in counts.items():
            if c["completed"] < most:
                items.append(f"{v} on {task}: {c['completed']} completed trials of {c['total']} "
                             f"(vs {most} for {leader}).")
    if items:
        return Flag("fewer-trials", "Unequal numbers of completed trials", "warn",
                    "Variants that got fewer completed (not diverged, not failed) trials had less chance to find "
                    "a good configuration.", items)
    return Flag("fewer-trials", "Equal numbers of completed trials", "ok",
                "Every variant completed as many trials as the others on each task.")


def flag_diverged(data: ReportData, tasks: list[str], variants: list[str]) -> Flag:
    items = []
    for task in tasks:
        for v in variants:
            c = _counts(data, task, v, (SEARCH, RERUN))
            if not (c["diverged"] or c["failed"]):
                continue
            bad = [t for t in _stage_trials(data, (SEARCH, RERUN), task, v) if t.status in ("diverged", "failed")]
            at = ", ".join(fmt_lr(t.lr) + (f" (seed re-run {t.seed})" if t.stage == RERUN else "")
                           for t in sorted(bad, key=lambda t: t.lr or 0))
            items.append(f"{v} on {task}: {c['diverged']} diverged, {c['failed']} failed of {c['total']}"
                         + (f" at LR {at}." if at else "."))
    if items:
        return Flag("diverged", "Diverged or failed runs", "warn",
                    "These trials produced no usable model; check the LRs they sat at before reading the table.",
                    items)
    return Flag("diverged", "No diverged or failed runs", "ok", "Every finetuning trial and seed re-run finished.")


def variant_objectives(spec: dict[str, Any], kinds: dict[str, str]) -> dict[str, str | None]:
    """The pretraining objective each variant is initialised from (None: none), by the spec's own rule."""
    from sptune import spec as spec_module

    table = getattr(spec_module, "PRETRAINING_OF", None)
    spt_objective = (spec.get("pretrain") or {}).get("objective") or "masked"
    out: dict[str, str | None] = {}
    for v, kind in kinds.items():
        if kind == "spt":  # `spt` follows pretrain.objective
            out[v] = spt_objective
        elif table is not None and kind in table:
            out[v] = table[kind]
        else:
            out[v] = "masked" if kind.startswith(SPT_KIND_PREFIXES) else None
    return out


def _cost(trials: list[Trial]) -> tuple[int, float]:
    return sum(t.epochs for t in trials), sum(t.seconds for t in trials)


def _pretraining(data: ReportData, task: str) -> dict[str, list[Trial]]:
    """objective -> its pretraining trials (one shared Tuner per objective)."""
    out: dict[str, list[Trial]] = {}
    for t in data.trials:
        if (t.stage, t.task) == (PRETRAIN, task):
            out.setdefault(t.objective or "masked", []).append(t)
    return out


def compute_table(data: ReportData, task: str, variants: list[str],
                  objectives: dict[str, str | None]) -> tuple[list[list[str]], dict[str, tuple[int, float]]]:
    """Rows per variant: own search and seed re-runs, the SPT pretraining it builds on, and the total."""
    pre = {obj: _cost(ts) for obj, ts in _pretraining(data, task).items()}
    header = ["variant", "search trials", "seed re-runs", "trial-epochs", "seconds", "+ SPT pretraining (shared)",
              "total epochs", "total seconds"]
    table, totals = [header], {}
    for v in variants:
        search, reruns = _stage_trials(data, (SEARCH,), task, v), _stage_trials(data, (RERUN,), task, v)
        if not search and not reruns:
            continue
        ep, s = _cost(search + reruns)
        add_ep, add_s = pre.get(objectives.get(v), (0, 0.0))
        totals[v] = (ep + add_ep, s + add_s)
        table.append([v, str(len(search)), str(len(reruns)), str(ep), f"{s:.0f}",
                      f"{add_ep} ep · {add_s:.0f} s" if add_ep else "—", str(ep + add_ep), f"{s + add_s:.0f}"])
    for obj, trials in _pretraining(data, task).items():
        users = ", ".join(v for v in variants if objectives.get(v) == obj) or "none"
        ep, s = pre[obj]
        table.append([f"SPT pretraining, {obj} (used by {users})", str(len(trials)), "", str(ep), f"{s:.0f}",
                      "", "", ""])
    return table, totals


def flag_compute(data: ReportData, tasks: list[str], variants: list[str], kinds: dict[str, str]) -> Flag:
    items, table = [], None
    objectives = variant_objectives(data.spec, kinds)
    for task in tasks:
        rows, totals = compute_table(data, task, variants, objectives)
        if len(tasks) > 1:
            rows = [rows[0]] + [[f"{task}: {r[0]}", *r[1:]] for r in rows[1:]]
        table = rows if table is None else table + rows[1:]
        use_s = all(s > 0 for _, s in totals.values())
        amount = {v: (s if use_s else float(e)) for v, (e, s) in totals.items()}
        if len(amount) > 1 and min(amount.values()) > 0:
            hi, lo = max(amount, key=amount.get), min(amount, key=amount.get)
            ratio = amount[hi] / amount[lo]
            if ratio >= COMPUTE_RATIO:
                items.append(f"{hi} on {task} used {ratio:.1f}× the compute of {lo} "
                             f"({'seconds' if use_s else 'trial-epochs'}, SPT pretraining included).")
    timeline = [f"{st.get('stage')}: {float(st['end']) - float(st['start']):.0f} s wall-clock"
                for st in data.timeline if _as_float(st.get("start")) and _as_float(st.get("end"))]
    summary = ("Trial-epochs and seconds (sum of per-epoch epoch_seconds) per variant, LR search and seed "
               "re-runs together; SPT pretraining is counted in full for every variant initialised from it.")
    if timeline:
        summary += " Stages: " + "; ".join(timeline) + "."
    if items:
        return Flag("compute", "Unequal compute per variant", "warn", summary, items, table)
    return Flag("compute", "Compute per variant", "info", summary, [], table)


def all_flags(data: ReportData, cells: dict[tuple[str, str], Cell], tasks: list[str], variants: list[str],
              kinds: dict[str, str]) -> list[Flag]:
    return [flag_lr_edge(data, cells), flag_rank_flip(data, tasks, variants),
            flag_completed(data, tasks, variants), flag_diverged(data, tasks, variants),
            flag_compute(data, tasks, variants, kinds)]


# ---------------------------------------------------------------- SVG


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


@dataclass
class LegendItem:
    label: str
    color: str
    mark: str  # line | band | dot | hollow | diamond | cross | bar | dash


def _marker(mark: str, x: float, y: float, color: str, tip: str = "", size: float = 4.0) -> str:
    tip_el = f"<title>{_e(tip)}</title>" if tip else ""
    if mark == "diamond":
        r = size + 1
        pts = f"{x:.1f},{y - r:.1f} {x + r:.1f},{y:.1f} {x:.1f},{y + r:.1f} {x - r:.1f},{y:.1f}"
        return f'<polygon points="{pts}" fill="{color}" stroke="#fff" stroke-width="1">{tip_el}</polygon>'
    if mark == "cross":
        a, b, c, e = x - size, x + size, y - size, y + size
        d = f"M{a:.1f},{c:.1f}L{b:.1f},{e:.1f}M{a:.1f},{e:.1f}L{b:.1f},{c:.1f}"
        return f'<path d="{d}" stroke="{color}" stroke-width="2" fill="none">{tip_el}</path>'
    fill = "#fff" if mark == "hollow" else color
    return (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{size:.1f}" fill="{fill}" stroke="{color}" '
            f'stroke-width="1.5" fill-opacity="{0.9 if mark == "dot" else 0.6}">{tip_el}</circle>')


def _legend_swatch(item: LegendItem, x: float, y: float) -> str:
    if item.mark in ("line", "dash"):
        dash = ' stroke-dasharray="5,3"' if item.mark == "dash" else ""
        return (f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x + 20:.1f}" y2="{y:.1f}" stroke="{item.color}" '
                f'stroke-width="2.5"{dash}/>')
    if item.mark in ("band", "bar"):
        opacity = 0.25 if item.mark == "band" else 0.85
        return (f'<rect x="{x:.1f}" y="{y - 5:.1f}" width="20" height="10" fill="{item.color}" '
                f'fill-opacity="{opacity}"/>')
    return _marker(item.mark, x + 10, y, item.color)


@dataclass
class Plot:
    """A minimal SVG chart: data -> pixel transforms, axes, legend above the plot area."""

    xlim: tuple[float, float]
    ylim: tuple[float, float]
    logx: bool = False
    legend: list[LegendItem] = field(default_factory=list)
    rug_rows: int = 0  # rows of search-range bars drawn under the x axis
    width: int = 640
    height: int = 400
    left: int = 62
    right: int = 20
    parts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._legend_pos = self._layout_legend()
        lines = 1 + max([y for _, y, _ in self._legend_pos] + [0]) // 18
        self.top = 18 * lines + 16 if self.legend else 16
        self.bottom = self.height - 48 - 7 * self.rug_rows

    def _layout_legend(self) -> list[tuple[float, int, LegendItem]]:
        x, y, out = float(self.left), 0, []
        for item in self.legend:
            w = 28 + 6.6 * len(item.label) + 16
            if x + w > self.width - self.right and x > self.left:
                x, y = float(self.left), y + 18
            out.append((x, y, item))
            x += w
        return out

    def x(self, v: float) -> float:
        lo, hi = self.xlim
        if self.logx:
            v, lo, hi = math.log10(v), math.log10(lo), math.log10(hi)
        return self.left + (v - lo) / ((hi - lo) or 1) * (self.width - self.left - self.right)

    def y(self, v: float) -> float:
        lo, hi = self.ylim
        return self.bottom - (v - lo) / ((hi - lo) or 1) * (self.bottom - self.top)

    def frame(self, xticks: list[float], yticks: list[float], xlabel: str, ylabel: str, xfmt: Any, yfmt: Any) -> None:
        left, right, top, bottom = self.left, self.width - self.right, self.top, self.bottom
        p = [f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="#fbfbfb" '
             'stroke="#bbb"/>']
        for t in yticks:
            y = self.y(t)
            p.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#e6e6e6"/>')
            p.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{_e(yfmt(t))}</text>')
        label_y = bottom + 16 + 7 * self.rug_rows
        for t in xticks:
            x = self.x(t)
            p.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#eeeeee"/>')
            p.append(f'<text x="{x:.1f}" y="{label_y}" text-anchor="middle" class="tick">{_e(xfmt(t))}</text>')
        p.append(f'<text x="{(left + right) / 2:.1f}" y="{self.height - 8}" text-anchor="middle" class="axis">'
                 f'{_e(xlabel)}</text>')
        p.append(f'<text transform="translate(14,{(top + bottom) / 2:.1f}) rotate(-90)" text-anchor="middle" '
                 f'class="axis">{_e(ylabel)}</text>')
        self.parts[:0] = p

    def line(self, pts: list[tuple[float, float]], color: str, dash: bool = False, width: float = 2.2,
             opacity: float = 1.0) -> None:
        if len(pts) < 2:
            return
        d = " ".join(f"{self.x(a):.1f},{self.y(b):.1f}" for a, b in pts)
        style = ' stroke-dasharray="6,4"' if dash else ""
        self.parts.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="{width}" '
                          f'stroke-opacity="{opacity}"{style}/>')

    def band(self, xs: list[float], lo: list[float], hi: list[float], color: str) -> None:
        if len(xs) < 2 or all(a == b for a, b in zip(lo, hi, strict=True)):
            return
        pts = list(zip(xs, hi, strict=True)) + list(zip(reversed(xs), reversed(lo), strict=True))
        d = " ".join(f"{self.x(a):.1f},{self.y(b):.1f}" for a, b in pts)
        self.parts.append(f'<polygon points="{d}" fill="{color}" fill-opacity="0.18" stroke="none"/>')

    def mark(self, mark: str, x: float, y: float, color: str, tip: str = "", size: float = 4.0) -> None:
        self.parts.append(_marker(mark, self.x(x), self.y(y), color, tip, size))

    def rug(self, row: int, lo: float, hi: float, points: list[float], color: str, tip: str) -> None:
        """Search range of one variant as a bar under the x axis (grid values as ticks)."""
        y = self.bottom + 5 + 7 * row
        self.parts.append(f'<line x1="{self.x(lo):.1f}" y1="{y}" x2="{self.x(hi):.1f}" y2="{y}" stroke="{color}" '
                          f'stroke-width="3" stroke-opacity="0.55"><title>{_e(tip)}</title></line>')
        for p in points:
            self.parts.append(f'<line x1="{self.x(p):.1f}" y1="{y - 3}" x2="{self.x(p):.1f}" y2="{y + 3}" '
                              f'stroke="{color}" stroke-width="1.5"/>')

    def svg(self, label: str) -> str:
        legend = [_legend_swatch(it, x, 12 + y) + f'<text x="{x + 26:.1f}" y="{16 + y}" class="legend">'
                  f"{_e(it.label)}</text>" for x, y, it in self._legend_pos]
        body = "".join(legend + self.parts)
        return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.width} {self.height}" role="img" '
                f'aria-label="{_e(label)}"><title>{_e(label)}</title>{body}</svg>')


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    raw = (hi - lo) / max(n, 1) or 1.0
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    span = math.log10(hi / lo)
    mults = (1,) if span > 2.6 else (1, 3) if span > 1.2 else (1, 2, 5)
    return [m * 10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            for m in mults if lo <= m * 10.0**k <= hi]


def _acc_limits(values: list[float]) -> tuple[float, float]:
    values = [v for v in values if v is not None] or [0.0, 1.0]
    lo, hi = math.floor(min(values) * 10 - 1e-9) / 10, math.ceil(max(values) * 10 + 1e-9) / 10
    return max(0.0, lo), min(1.0, max(hi, lo + 0.1))


def _pct_tick(v: float) -> str:
    return f"{100 * v:.0f}%"


# ---------------------------------------------------------------- figures


def _space_bounds(space: dict[str, Any] | None) -> tuple[float, float, list[float]] | None:
    if not space:
        return None
    if space.get("values"):
        vals = sorted(float(v) for v in space["values"])
        return vals[0], vals[-1], vals
    low, high = _as_float(space.get("low")), _as_float(space.get("high"))
    return (low, high, []) if low and high else None


def figure_lr(data: ReportData, task: str, variants: list[str], colors: dict[str, str],
              cells: dict[tuple[str, str], Cell]) -> str | None:
    trials = [t for t in data.trials if t.task == task and t.stage in (SEARCH, RERUN) and t.lr]
    if not trials:
        return None
    curves = lr_curves(trials)
    shown = [v for v in variants if any(t.variant == v for t in trials)]
    spaces = {v: _space_bounds(_lr_space(data.spec, v)) for v in shown}
    xs = [t.lr for t in trials] + [b for s in spaces.values() if s for b in s[:2]]
    ys = [t.best_val_acc for t in trials if t.best_val_acc is not None and t.completed]
    ys += [c.test_summary.mean for v in shown if (c := cells.get((task, v))) and c.test_summary]
    legend = [LegendItem(v, colors[v], "line") for v in shown] + [
        LegendItem("trial (best val)", "#555", "hollow"), LegendItem("test, selected", "#555", "diamond")]
    if any(p.high > p.low for c in curves.values() for p in c.values()):
        legend.append(LegendItem("seed min–max", "#555", "band"))
    if any(t.stage == RERUN for t in trials):
        legend.append(LegendItem("seed re-run (best val)", "#555", "dot"))
    if any(t.status in ("diverged", "failed") for t in trials):
        legend.append(LegendItem("diverged/failed", "#555", "cross"))
    plot = Plot((min(xs) / 1.4, max(xs) * 1.4), _acc_limits(ys), logx=True, legend=legend, rug_rows=len(shown))
    for i, v in enumerate(shown):
        _draw_variant_lr(plot, [t for t in trials if t.variant == v], curves.get(v, {}), colors[v])
        _draw_tests(plot, cells.get((task, v)), colors[v])
        if spaces[v]:
            lo, hi, pts = spaces[v]
            plot.rug(i, lo, hi, pts, colors[v], f"{v}: searched LR {_describe_space(_lr_space(data.spec, v))}")
    plot.frame(log_ticks(*plot.xlim), nice_ticks(*plot.ylim), "learning rate (log scale; bars below: searched range)",
               "accuracy", fmt_lr, _pct_tick)
    return plot.svg(f"Accuracy vs learning rate on {task}")


def _draw_variant_lr(plot: Plot, trials: list[Trial], curve: dict[Any, CurvePoint], color: str) -> None:
    pts = sorted(curve.values(), key=lambda p: p.lr)
    plot.band([p.lr for p in pts], [p.low for p in pts], [p.high for p in pts], color)
    plot.line([(p.lr, p.mean) for p in pts], color)
    for t in trials:
        what = "seed re-run" if t.stage == RERUN else "trial"
        tip = f"{t.variant} {what} seed {t.seed} lr {fmt_lr(t.lr)} batch {t.batch_size}: {t.status}, {t.epochs} epochs"
        if t.completed and t.best_val_acc is not None:
            mark, size = ("dot", 2.8) if t.stage == RERUN else ("hollow", 3.5)
            plot.mark(mark, t.lr, t.best_val_acc, color, f"{tip}, best val {100 * t.best_val_acc:.1f}%", size)
        elif t.status in ("diverged", "failed"):
            plot.mark("cross", t.lr, plot.ylim[0], color, tip)


def _draw_tests(plot: Plot, cell: Cell | None, color: str) -> None:
    if cell is None:
        return
    for seed, acc in cell.test.items():
        if seed in cell.lrs:
            plot.mark("diamond", cell.lrs[seed], acc, color,
                      f"{cell.variant} seed {seed}: test {100 * acc:.2f}% at lr {fmt_lr(cell.lrs[seed])}", 4.5)


def figure_curves(data: ReportData, task: str, variants: list[str], colors: dict[str, str]) -> str | None:
    # The runs whose test accuracy the table reports (seed re-runs when the study has them).
    reported = {r.get("mlflow_run_id") for r in data.rows if r["task"] == task}
    sel = [t for t in data.trials if t.task == task and t.run_id in reported and t.curve]
    sel = sel or [t for t in data.trials if (t.stage, t.task) == (SEARCH, task) and t.selected and t.curve]
    if not sel:
        return None
    shown = [v for v in variants if any(t.variant == v for t in sel)]
    legend = [LegendItem(v, colors[v], "line") for v in shown] + [LegendItem("selected epoch", "#555", "dot")]
    max_ep = max(s for t in sel for s, _ in t.curve)
    plot = Plot((0, max_ep), _acc_limits([v for t in sel for _, v in t.curve]), legend=legend)
    for t in sel:
        dash = sorted({s.seed for s in sel if s.variant == t.variant}).index(t.seed) % 2 == 1
        plot.line([(float(s), v) for s, v in t.curve], colors[t.variant], dash=dash, width=2)
        chosen = dict(t.curve).get(t.selected_epoch or -1)
        if chosen is not None:
            plot.mark("dot", t.selected_epoch, chosen, colors[t.variant],
                      f"{t.variant} seed {t.seed}: val {100 * chosen:.1f}% at epoch {t.selected_epoch}")
    plot.frame(nice_ticks(0, max_ep, 6), nice_ticks(*plot.ylim), "epoch", "validation accuracy", _int_tick, _pct_tick)
    return plot.svg(f"Validation accuracy per epoch of the selected trials on {task}")


def _int_tick(v: float) -> str:
    return f"{v:g}"


def asha_rungs(spec: dict[str, Any], max_epochs: int, reached: list[int]) -> list[int]:
    """ASHA milestones (grace × rf^k below max_t, as Ray places them) plus max_t; else distinct epochs reached."""
    sched = spec.get("scheduler") or {}
    grace, rf = _as_float(sched.get("grace_period")), _as_float(sched.get("reduction_factor"))
    if sched.get("type", "asha") != "asha" or not grace or not rf or rf <= 1 or not max_epochs:
        return sorted(set(reached))
    rungs, r = [], grace
    while r < max_epochs:
        rungs.append(int(round(r)))
        r *= rf
    return rungs + [max_epochs]


def survival(data: ReportData, task: str, variants: list[str]) -> dict[str, list[tuple[int, int, int]]]:
    """group -> [(rung, trials reaching it, trials in the stage)]: each variant's LR search, then each SPT
    pretraining objective (seed re-runs are not early-stopped, so they are left out)."""
    groups = {v: _stage_trials(data, (SEARCH,), task, v) for v in variants}
    groups.update({f"SPT pretraining ({obj})": ts for obj, ts in _pretraining(data, task).items()})
    out = {}
    for name, trials in groups.items():
        if not trials:
            continue
        max_ep = max([t.max_epochs or 0 for t in trials]) or max(t.epochs for t in trials)
        rungs = asha_rungs(data.spec, max_ep, [t.epochs for t in trials])
        out[name] = [(r, sum(t.epochs >= r for t in trials), len(trials)) for r in rungs]
    return out


def figure_survival(data: ReportData, task: str, variants: list[str], colors: dict[str, str]) -> str | None:
    surv = survival(data, task, variants)
    if not surv:
        return None
    rungs = sorted({r for pts in surv.values() for r, _, _ in pts})
    greys = iter(PRETRAIN_COLORS * len(surv))
    color = {g: colors[g] if g in colors else next(greys) for g in surv}
    top = max(n for pts in surv.values() for _, _, n in pts)
    plot = Plot((0, len(rungs)), (0, top * 1.15), legend=[LegendItem(g, color[g], "bar") for g in surv])
    slot = (plot.x(1) - plot.x(0)) * 0.8 / len(surv)
    for gi, (group, pts) in enumerate(surv.items()):
        for r, n, total in pts:
            x = plot.x(rungs.index(r)) + (plot.x(1) - plot.x(0)) * 0.1 + gi * slot
            y0, y1 = plot.y(0), plot.y(n)
            plot.parts.append(f'<rect x="{x:.1f}" y="{y1:.1f}" width="{slot - 2:.1f}" height="{y0 - y1:.1f}" '
                              f'fill="{color[group]}" fill-opacity="0.85"><title>{_e(group)}: {n}/{total} trials '
                              f'reached epoch {r}</title></rect>')
            plot.parts.append(f'<text x="{x + slot / 2 - 1:.1f}" y="{y1 - 4:.1f}" text-anchor="middle" '
                              f'class="bar">{n}</text>')
    plot.frame([i + 0.5 for i in range(len(rungs))], nice_ticks(0, top, min(top, 5)), "ASHA rung (epoch reached ≥)",
               "trials", lambda v: f"≥ {rungs[int(v)]}", _int_tick)
    return plot.svg(f"ASHA survival per rung on {task}")


# ---------------------------------------------------------------- HTML

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d1d1f;margin:0;background:#f4f5f7}
main{max-width:1340px;margin:0 auto;padding:20px 28px 40px}
h1{font-size:24px;margin:4px 0}h2{font-size:18px;margin:28px 0 10px;border-bottom:1px solid #d8dbe0;padding-bottom:4px}
.meta{color:#555;font-size:13px;word-break:break-all}
.note{background:#fff4e5;border-left:4px solid #e69f00;padding:6px 10px}
table{border-collapse:collapse;background:#fff;font-variant-numeric:tabular-nums}
th,td{border:1px solid #d8dbe0;padding:5px 10px;text-align:right;vertical-align:top}
th{background:#eef0f3;text-align:left}td.l,th.l{text-align:left}
table.results td{min-width:170px}.acc{font-size:16px;font-weight:600}.sub{color:#666;font-size:12px}
.delta{font-size:13px}.pos{color:#006d4e}.neg{color:#b8430b}
.summary{display:flex;gap:10px;flex-wrap:wrap;margin:10px 0}
.chip{padding:4px 10px;border-radius:14px;font-size:13px;text-decoration:none;color:inherit}
.chip.warn{background:#fde2cf;border:1px solid #d55e00}.chip.ok{background:#d9f2e6;border:1px solid #009e73}
.chip.info{background:#e3eef8;border:1px solid #0072b2}
.flags{display:grid;grid-template-columns:repeat(auto-fill,minmax(620px,1fr));gap:12px}
.flag{background:#fff;border:1px solid #ccc;border-left-width:6px;border-radius:4px;padding:8px 14px}
.flag h3{margin:2px 0 4px;font-size:15px}.flag p{margin:4px 0}.flag ul{margin:4px 0;padding-left:20px}
.flag.warn{border-color:#d55e00;background:#fff8f3}.flag.ok{border-color:#009e73}.flag.info{border-color:#0072b2}
.flag .lvl{font-size:11px;font-weight:700;letter-spacing:.05em;padding:1px 6px;border-radius:3px;margin-right:6px;
color:#fff}
.flag.warn .lvl{background:#d55e00}.flag.ok .lvl{background:#009e73}.flag.info .lvl{background:#0072b2}
.flag table{margin-top:6px;font-size:12.5px}.flag.wide{grid-column:1/-1}
main>h3{font-size:16px;margin:14px 0 8px}
.figs{display:grid;grid-template-columns:repeat(auto-fill,minmax(620px,1fr));gap:12px}
figure{margin:0;background:#fff;border:1px solid #d8dbe0;border-radius:4px;padding:8px 10px}
figcaption{font-weight:600;margin-bottom:2px}figure .cap{color:#555;font-size:12.5px;margin-top:4px}
svg{width:100%;height:auto;display:block;font-family:system-ui,sans-serif}
svg .tick{font-size:11px;fill:#444}svg .axis{font-size:12px;fill:#222}svg .legend{font-size:12px;fill:#222}
svg .bar{font-size:11px;fill:#222}
footer{color:#666;font-size:12px;margin-top:28px}
"""


def _pct(x: float) -> str:
    return f"{100 * x:.2f}"


def _ci(ci: tuple[float, float] | None, signed: bool = False) -> str:
    if ci is None:
        return ""
    f = (lambda v: f"{100 * v:+.2f}") if signed else _pct
    return f"95% CI [{f(ci[0])}, {f(ci[1])}]"


def _mean_std(s: Summary, signed: bool = False) -> str:
    mean = f"{100 * s.mean:+.2f}" if signed else _pct(s.mean)
    return mean + (f" ± {100 * s.std:.2f}" if s.std is not None else "")


def _cell_html(cell: Cell | None) -> str:
    if cell is None or cell.test_summary is None:
        return '<td class="sub">—</td>'
    s = cell.test_summary
    sub = [f"n={s.n} seed{'s' if s.n > 1 else ''}"]
    if cell.val_summary:
        sub.append(f"val {_mean_std(cell.val_summary)}")
    if s.ci:
        sub.append(_ci(s.ci))
    out = f'<div class="acc">{_e(_mean_std(s))}</div><div class="sub">{_e(" · ".join(sub))}</div>'
    if cell.delta is not None:
        d = cell.delta
        how = "paired by seed" if d.paired else "unpaired"
        tone = "pos" if d.mean > 0 else "neg" if d.mean < 0 else ""
        extra = " · ".join(x for x in (_ci(d.ci, signed=True), how) if x)
        out += (f'<div class="delta {tone}">Δ vs {_e(cell.baseline)} {_e(_mean_std(d, signed=True))} pts</div>'
                f'<div class="sub">{_e(extra)}</div>')
    elif cell.kind == "scratch":
        out += '<div class="sub">baseline</div>'
    return f"<td>{out}</td>"


def results_table_html(cells: dict[tuple[str, str], Cell], tasks: list[str], variants: list[str],
                       kinds: dict[str, str]) -> str:
    head = '<tr><th class="l">variant</th>' + "".join(f"<th>{_e(t)}</th>" for t in tasks) + "</tr>"
    body = [f'<tr><th class="l">{_e(v)}<div class="sub">kind {_e(kinds[v])}</div></th>'
            + "".join(_cell_html(cells.get((t, v))) for t in tasks) + "</tr>" for v in variants]
    return f'<table class="results"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'


def _numeric(text: str) -> bool:
    return bool(re.fullmatch(r"[-+]?[\d.]+(e-?\d+)?|-|—", text.strip()))


def _table_html(rows: list[list[str]], cls: str = "") -> str:
    # Numbers right-aligned (comparable digits), names left-aligned.
    text_cols = [i for i in range(len(rows[0])) if not all(_numeric(r[i]) for r in rows[1:] if i < len(r))]
    align = ['class="l"' if i in text_cols else "" for i in range(len(rows[0]))]
    head = "".join(f"<th {align[i]}>{_e(c)}</th>" for i, c in enumerate(rows[0]))
    body = "".join("<tr>" + "".join(f"<td {align[i]}>{_e(c)}</td>" for i, c in enumerate(r)) + "</tr>"
                   for r in rows[1:])
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def flag_html(flag: Flag) -> str:
    label = {"warn": "FLAG", "ok": "OK", "info": "INFO"}[flag.level]
    items = "".join(f"<li>{_e(i)}</li>" for i in flag.items)
    wide = " wide" if flag.table else ""  # a box with a table gets the full row
    return (f'<section class="flag {flag.level}{wide}" data-flag="{_e(flag.key)}" id="flag-{_e(flag.key)}">'
            f'<h3><span class="lvl">{label}</span>{_e(flag.title)}</h3><p>{_e(flag.summary)}</p>'
            + (f"<ul>{items}</ul>" if items else "") + (_table_html(flag.table) if flag.table else "") + "</section>")


def detail_rows(rows: list[dict[str, Any]], cells: dict[tuple[str, str], Cell]) -> list[list[str]]:
    out = [["task", "variant", "seed", "lr", "batch", "best epoch", "val acc %", "test acc %", "Δ test (pts)",
            "trials", "diverged", "failed", "trial-epochs"]]
    for r in rows:
        cell = cells.get((r["task"], r["variant"]))
        base = cells.get((r["task"], cell.baseline)) if cell and cell.baseline else None
        delta = "-"
        if base and r["seed"] in base.test and _as_float(r.get("test_acc")) is not None:
            delta = f"{100 * (float(r['test_acc']) - base.test[r['seed']]):+.2f}"
        out.append([r["task"], r["variant"], r["seed"], fmt_lr(_as_float(r.get("lr"))), str(r.get("batch_size", "")),
                    str(r.get("best_epoch", "")), _fmt_pct(r.get("val_acc")), _fmt_pct(r.get("test_acc")), delta,
                    str(r.get("trials", "")), str(r.get("diverged", "")), str(r.get("failed", "")),
                    str(r.get("trial_epochs", ""))])
    return out


def _fmt_pct(v: Any) -> str:
    x = _as_float(v)
    return "-" if x is None else _pct(x)


def _figure(svg: str | None, caption: str, note: str) -> str:
    if svg is None:
        return ""
    return f"<figure>{svg}<figcaption>{_e(caption)}</figcaption><div class='cap'>{_e(note)}</div></figure>"


def figures_html(data: ReportData, tasks: list[str], variants: list[str], colors: dict[str, str],
                 cells: dict[tuple[str, str], Cell]) -> str:
    groups = []
    for task in tasks:
        figs = []
        figs.append(_figure(figure_lr(data, task, variants, colors, cells), f"{task}: accuracy vs learning rate",
                            "Circles: best validation accuracy of each trial at its LR (ASHA-stopped trials at the "
                            "epoch they reached). Line: best per LR, mean over the seeds that searched; band: "
                            "min–max over those seeds. Filled dots: the selected config re-trained per seed. "
                            "Diamonds: test accuracy of the reported checkpoints. Bars under the axis: each "
                            "variant's searched LR range (ticks: grid values)."))
        figs.append(_figure(figure_curves(data, task, variants, colors),
                            f"{task}: learning curves of the selected trials",
                            "Validation accuracy per epoch of the runs whose test accuracy is reported; dashed "
                            "lines are further seeds; dots mark the epoch chosen on validation."))
        figs.append(_figure(figure_survival(data, task, variants, colors), f"{task}: ASHA survival per rung",
                            "Trials that trained at least that many epochs; a rung a variant barely reaches means "
                            "few of its configurations were trained to the end."))
        if any(figs):
            # One block per task so a task's three figures stay together.
            groups.append(f'<h3>{_e(task)}</h3><div class="figs">{"".join(figs)}</div>')
    return "".join(groups) or '<p class="note">No MLflow trial runs: no figures.</p>'


def render_html(data: ReportData, cells: dict[tuple[str, str], Cell], flags: list[Flag], tasks: list[str],
                variants: list[str], kinds: dict[str, str]) -> str:
    colors = {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(variants)}
    seeds = sorted({r["seed"] for r in data.rows}, key=_seed_key)
    chips = "".join(f'<a class="chip {f.level}" href="#flag-{_e(f.key)}">{_e(f.title)}</a>' for f in flags)
    n_warn = sum(f.level == "warn" for f in flags)
    notes = "".join(f'<p class="note">{_e(n)}</p>' for n in data.notes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(data.name)} — sptune fairness report</title>
<style>{CSS}</style></head><body><main>
<h1>{_e(data.name)} — fairness report</h1>
<div class="meta">tasks: {_e(", ".join(tasks))} · variants: {_e(", ".join(variants))} · seeds: {_e(", ".join(seeds))}
<br>source: {_e(data.source)} · run directory: {_e(data.run_dir)}</div>{notes}
<div class="summary"><strong>{n_warn} fairness flag{"s" if n_warn != 1 else ""} raised:</strong>{chips}</div>
<h2>Results</h2>
<p class="sub">Test accuracy (%) of each variant's validation-selected trial and epoch; mean ± std over seeds
(95% bootstrap CI over seeds when more than one); Δ vs scratch in points, paired by seed when the seeds match.</p>
{results_table_html(cells, tasks, variants, kinds)}
<h2>Fairness flags</h2>
<div class="flags">{"".join(flag_html(f) for f in flags)}</div>
<h2>Figures</h2>
{figures_html(data, tasks, variants, colors, cells)}
<h2>Selected configuration per seed</h2>
{_table_html(detail_rows(data.rows, cells), "detail")}
<footer>Generated by sptune.report on {_e(time.strftime("%Y-%m-%d %H:%M:%S"))}. Flags: best LR within
{EDGE_FACTOR:g}× of a range bound or at a grid end; ranking flips larger than {100 * FLIP_TOL:g} pt; completed =
finished, neither diverged nor failed; compute = trial-epochs and summed epoch_seconds.</footer>
</main></body></html>
"""


# ---------------------------------------------------------------- results.md / results.csv


def _seed_key(seed: str) -> tuple[int, Any]:
    return (0, int(seed)) if seed.lstrip("-").isdigit() else (1, seed)


def _md_cell(cell: Cell | None) -> str:
    if cell is None or cell.test_summary is None:
        return "—"
    out = _mean_std(cell.test_summary) + (f" (n={cell.test_summary.n})" if cell.test_summary.n > 1 else "")
    if cell.delta is not None:
        out += f"<br>Δ {_mean_std(cell.delta, signed=True)}"
        if cell.delta.ci:
            out += f" [{100 * cell.delta.ci[0]:+.2f}, {100 * cell.delta.ci[1]:+.2f}]"
    return out


def markdown(data: ReportData, cells: dict[tuple[str, str], Cell], flags: list[Flag], tasks: list[str],
             variants: list[str]) -> str:
    lines = [f"# {data.name} — results", "",
             "Test accuracy (%) at each variant's validation-selected trial and epoch, mean ± std over seeds; "
             "Δ vs scratch in points [95% bootstrap CI], paired by seed.", "",
             "| variant | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    lines += [f"| {v} | " + " | ".join(_md_cell(cells.get((t, v))) for t in tasks) + " |" for v in variants]
    detail = detail_rows(data.rows, cells)
    lines += ["", "## Per seed", "", "| " + " | ".join(detail[0]) + " |", "|" + "---|" * len(detail[0])]
    lines += ["| " + " | ".join(r) + " |" for r in detail[1:]]
    lines += ["", "## Fairness flags", ""]
    for f in flags:
        lines.append(f"- **{f.level.upper()}: {f.title}** — {f.summary}")
        lines += [f"  - {i}" for i in f.items]
    lines += ["", "Full report with figures: report.html"]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = ("task", "variant", "kind", "n_seeds", "seeds", "test_acc_mean", "test_acc_std", "test_acc_ci_low",
               "test_acc_ci_high", "val_acc_mean", "val_acc_std", "delta_vs", "delta_test_mean", "delta_test_std",
               "delta_test_ci_low", "delta_test_ci_high", "delta_paired", "best_lrs")


def csv_rows(cells: dict[tuple[str, str], Cell]) -> list[dict[str, Any]]:
    out = []
    for (task, variant), c in cells.items():
        t, v, d = c.test_summary, c.val_summary, c.delta
        out.append({
            "task": task, "variant": variant, "kind": c.kind, "n_seeds": len(c.test),
            "seeds": ";".join(sorted(c.test, key=_seed_key)),
            "test_acc_mean": t.mean if t else "", "test_acc_std": t.std if t and t.std is not None else "",
            "test_acc_ci_low": t.ci[0] if t and t.ci else "", "test_acc_ci_high": t.ci[1] if t and t.ci else "",
            "val_acc_mean": v.mean if v else "", "val_acc_std": v.std if v and v.std is not None else "",
            "delta_vs": c.baseline or "", "delta_test_mean": d.mean if d else "",
            "delta_test_std": d.std if d and d.std is not None else "",
            "delta_test_ci_low": d.ci[0] if d and d.ci else "", "delta_test_ci_high": d.ci[1] if d and d.ci else "",
            "delta_paired": "" if d is None else str(bool(d.paired)).lower(),
            "best_lrs": ";".join(f"{c.lrs[s]:.6g}" for s in sorted(c.lrs, key=_seed_key)),
        })
    return out


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


# ---------------------------------------------------------------- entry points


def _order(data: ReportData) -> tuple[list[str], list[str], dict[str, str]]:
    """Tasks and variants in first-seen order, baseline (scratch kind) first; variant -> kind."""
    kinds: dict[str, str] = {}
    for r in data.rows:
        kinds.setdefault(r["variant"], str(r["kind"]))
    for t in data.trials:
        if t.stage in (SEARCH, RERUN):
            kinds.setdefault(t.variant, t.kind)
    variants = sorted(kinds, key=lambda v: kinds[v] != "scratch")  # stable: keeps first-seen order otherwise
    tasks = list(dict.fromkeys([r["task"] for r in data.rows] + [t.task for t in data.trials if t.task]))
    return tasks, variants, kinds


def build_report(run_dir: Path, tracking_uri: str | None = None, out: Path | None = None,
                 parent_run_id: str | None = None) -> Path:
    """Write report.html (default RUN_DIR/report.html) and results.md/results.csv next to it; return its path."""
    run_dir = Path(run_dir)
    data = load_data(run_dir, tracking_uri, parent_run_id)
    tasks, variants, kinds = _order(data)
    cells = aggregate(data.rows, tasks, variants, kinds)
    flags = all_flags(data, cells, tasks, variants, kinds)
    out = Path(out) if out else run_dir / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(data, cells, flags, tasks, variants, kinds), encoding="utf-8")
    (out.parent / "results.md").write_text(markdown(data, cells, flags, tasks, variants), encoding="utf-8")
    write_csv(out.parent / "results.csv", csv_rows(cells))
    return out


def _dir_for_run(uri: str, run_id: str, out: Path | None) -> tuple[Path, str]:
    """The study directory recorded on the parent run (a child run id is mapped to its parent)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    try:
        run = client.get_run(run_id)
    except Exception as err:
        raise ReportError(f"run {run_id}", f"not found in {uri} ({type(err).__name__})",
                          "check the run id and --tracking-uri") from err
    parent_id = run.data.tags.get("mlflow.parentRunId")
    if parent_id and run.data.tags.get("sptune.stage"):
        run, run_id = client.get_run(parent_id), parent_id
    recorded = Path(run.data.params.get("output_dir", ""))
    if run.data.params.get("output_dir") and recorded.is_dir():
        return recorded, run_id
    return (out.parent if out else Path.cwd() / f"sptune-report-{run_id[:8]}"), run_id


def build_from_target(target: str, tracking_uri: str | None = None, out: Path | None = None) -> Path:
    """A run directory (or its results.json), or an MLflow run id with a tracking URI."""
    path = Path(target)
    if path.is_file() and path.name == "results.json":
        path = path.parent
    if path.is_dir():
        return build_report(path, tracking_uri, out)
    if RUN_ID.match(target):
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            raise ReportError(target, "an MLflow run id needs a tracking store",
                              "add --tracking-uri (e.g. http://127.0.0.1:5000 or sqlite:///DIR/mlflow.db)")
        if _sqlite_path(uri) and not _sqlite_path(uri).is_file():
            raise ReportError(f"--tracking-uri {uri}", "SQLite file does not exist", "check the path")
        if unreachable(uri):
            raise ReportError(f"--tracking-uri {uri}", unreachable(uri), "start the server or fix the URI")
        run_dir, parent_id = _dir_for_run(uri, target, out)
        return build_report(run_dir, uri, out, parent_id)
    raise ReportError(target, "neither a study output directory nor an MLflow run id (32 hex characters)",
                      "pass e.g. runs/digits_quick-20250101-120000 or a parent run id with --tracking-uri")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sptune.report", description=__doc__.splitlines()[0])
    p.add_argument("target", help="study output directory (with results.json), or an MLflow parent run id")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: the one recorded in results.json)")
    p.add_argument("--out", type=Path, help="report path (default RUN_DIR/report.html)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        path = build_from_target(args.target, args.tracking_uri, args.out)
    except SptuneError as err:
        print(f"sptune.report: error: {err}", file=sys.stderr)
        return err.exit_code
    print(f"Report: {path}\nTables: {path.parent / 'results.md'} and {path.parent / 'results.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
