"""results.json (the contract other tools read) and results.md (its only writer); the statistics are
``sptune.judging.stats``, shared with the report."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sptune.judging import stats
from sptune.judging.budget_report import budget_table
from sptune.judging.convergence import UNCONVERGED_TEXT
from sptune.judging.pairing import PAIRING_RULE, Pairing, pairing_label, pairings
from sptune.judging.stats import DEFAULT_BASELINE, Summary
from sptune.plan.seeds import SPREAD_TEXT

DELTA_COLUMN = "delta_test_vs_baseline"
COLUMNS = (
    "variant",
    "seed",
    "lr",
    "batch_size",
    "best_epoch",
    "val_acc",
    "test_acc",
    DELTA_COLUMN,
    "delta_baseline",
    "trials",
)


@dataclass
class ResultRow:
    """One selected checkpoint tested once: a row of results.json (its keys are these field names)."""

    variant: str
    kind: str
    task: str
    seed: int
    lr: float
    batch_size: int
    best_epoch: int
    val_acc: float
    test_acc: float
    test_loss: float
    # The variant's LR/batch search, shared by all its seeds' rows.
    trials: int
    diverged: int
    failed: int
    trial_epochs: int
    trial_id: str
    mlflow_run_id: str | None
    checkpoint: str
    delta_test_vs_baseline: float | None = None
    # The variant that Δ is against (sptune.judging.pairing: the baseline, or the like-for-like one).
    delta_baseline: str | None = None
    # Failures Tune counted in the variant's search (crashed trial processes, lost nodes), each retried from
    # the trial's last checkpoint; a trial that ran out of retries is also in `failed`.
    failures: int = 0
    # The selected epoch is in the last 10 % of its budget (sptune.judging.convergence.may_be_unconverged).
    may_be_unconverged: bool = False


def _pairings(rows: list[ResultRow], baseline: str, pretrain_objective: str | None) -> dict[str, Pairing]:
    return pairings({r.variant: r.kind for r in rows}, baseline, pretrain_objective)


def add_deltas(rows: list[ResultRow], baseline: str = DEFAULT_BASELINE, pretrain_objective: str | None = None) -> None:
    """Per row: Δ test accuracy vs its paired variant's run with the same seed (``sptune.judging.pairing``), and that
    variant's name; None for the baseline's own rows, and when the paired variant has no run with that seed
    (or no variant is named ``baseline``). ``pretrain_objective``: the spec's, which `spt` follows."""
    paired = _pairings(rows, baseline, pretrain_objective)
    acc = {(r.variant, r.seed): r.test_acc for r in rows}
    for r in rows:
        pair = paired.get(r.variant)
        base_acc = acc.get((pair.baseline, r.seed)) if pair else None
        r.delta_test_vs_baseline = None if base_acc is None else r.test_acc - base_acc
        r.delta_baseline = None if base_acc is None else pair.baseline


def _by_variant(rows: list[ResultRow]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r.variant, []).append(asdict(r))
    return out


def summarize(rows: list[ResultRow], baseline: str = DEFAULT_BASELINE,
              pretrain_objective: str | None = None) -> dict[str, dict[str, Any]]:
    """Per variant: test accuracy over seeds (``test_acc_mean``, ``_std``, ``_ci95``, ``_ci_method``, ``_n``),
    the mean validation accuracy, and, except for the baseline itself, Δ test (``delta_*``) vs its paired variant
    (``delta_vs``; ``delta_like_for_like`` and ``delta_pairing`` say whether both train the same model)."""
    groups = _by_variant(rows)
    paired = _pairings(rows, baseline, pretrain_objective)
    summary: dict[str, dict[str, Any]] = {}
    for variant, mine in groups.items():
        test = stats.values_by_seed(mine, "test_acc")
        val = stats.summarize(list(stats.values_by_seed(mine, "val_acc").values()))
        entry = {"seeds": len(mine), **_fields("test_acc", stats.summarize(list(test.values()))),
                 "val_acc_mean": val.mean if val else None}
        if variant in paired:
            pair = paired[variant]
            entry.update(delta_vs=pair.baseline, delta_like_for_like=pair.like_for_like, delta_pairing=pair.note)
            entry.update(_fields("delta", stats.paired_delta(test, stats.values_by_seed(groups[pair.baseline],
                                                                                        "test_acc"))))
        summary[variant] = entry
    return summary


def _fields(prefix: str, s: Summary | None) -> dict[str, Any]:
    return s.to_fields(prefix) if s else {f"{prefix}_mean": None}


def _fraction(x: float) -> str:
    return f"{x:.4f}"


def _signed(x: float) -> str:
    return f"{x:+.4f}"


def _delta_cell(entry: dict[str, Any], baseline: str, variant: str) -> str:
    delta = Summary.from_fields(entry, "delta")
    if delta is None:
        return "baseline" if variant == baseline else "-"
    return f"{_signed(delta.mean)} {stats.interval_text(delta, _signed)}"


def _against_cell(entry: dict[str, Any]) -> str:
    # e.g. "scratch_causal (like-for-like: both causal)": which variant the Δ is against, and whether it is fair.
    return pairing_label(entry["delta_vs"], entry.get("delta_pairing") or "") if "delta_vs" in entry else "-"


def summary_table(summary: dict[str, dict[str, Any]], baseline: str = DEFAULT_BASELINE) -> str:
    """Per variant: mean ± std, the 95 % interval (saying which, with n), Δ test and the variant it is against;
    then the rules."""
    lines = ["| variant | seeds | test acc mean ± std | 95 % interval of the mean | Δ test | Δ vs |",
             "|---|---|---|---|---|---|"]
    for variant, entry in summary.items():
        test = Summary.from_fields(entry, "test_acc")
        spread = "-" if test is None else _fraction(test.mean) + (f" ± {test.std:.4f}" if test.std is not None else "")
        interval = "-" if test is None else stats.interval_text(test, _fraction)
        lines.append(f"| {variant} | {entry['seeds']} | {spread} | {interval} | "
                     f"{_delta_cell(entry, baseline, variant)} | {_against_cell(entry)} |")
    return "\n".join(lines + ["", stats.INTERVAL_RULE, stats.delta_rule(summary, baseline), PAIRING_RULE])


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key == "lr":
        return f"{value:.3g}"
    if key == DELTA_COLUMN:
        return _signed(value)
    if isinstance(value, float):
        return _fraction(value)
    return str(value)


def _row_cell(row: ResultRow, key: str) -> str:
    text = _cell(key, getattr(row, key))
    return text + " ⚠" if key == "best_epoch" and row.may_be_unconverged else text


def unconverged_note(rows: list[ResultRow]) -> list[str]:
    """results.md's line under the rows when a selected epoch is in the last 10 % of its budget."""
    marked = [f"{r.variant} seed {r.seed} (epoch {r.best_epoch})" for r in rows if r.may_be_unconverged]
    return ["", f"⚠ {UNCONVERGED_TEXT}: {', '.join(marked)}."] if marked else []


def markdown_table(rows: list[ResultRow]) -> str:
    head = "| " + " | ".join(COLUMNS) + " |"
    sep = "|" + "|".join("---" for _ in COLUMNS) + "|"
    body = ["| " + " | ".join(_row_cell(r, c) for c in COLUMNS) + " |" for r in rows]
    return "\n".join([head, sep, *body, *unconverged_note(rows)])


def write_results(output_dir: Path, study: dict[str, Any], rows: list[ResultRow],
                  baseline: str = DEFAULT_BASELINE) -> tuple[Path, Path]:
    """results.json ({**study, baseline, rows}) and results.md; ``study["summary"]`` from ``summarize`` with the
    same ``baseline``. The report reads the baseline back from results.json."""
    json_path = output_dir / "results.json"
    document = {**study, "baseline": baseline, "rows": [asdict(r) for r in rows]}
    json_path.write_text(json.dumps(document, indent=2, default=str))
    md_path = output_dir / "results.md"
    md = [
        f"# {study['study']} — task {study['task']}",
        "",
        markdown_table(rows),
        "",
        summary_table(study["summary"], baseline),
        "",
        *([budget_table(study["budget"]), ""] if "budget" in study else []),
        *([SPREAD_TEXT[study["spread"]], ""] if study.get("spread") in SPREAD_TEXT else []),
        "Selected on validation accuracy (best trial and epoch per variant); test read once per selected checkpoint.",
    ]
    md_path.write_text("\n".join(md) + "\n")
    return json_path, md_path
