"""The plain-text tables written next to report.html: report.md (for reading and pasting; results.md is the
study's own and is never rewritten here) and results.csv (one row per variant and task, for further analysis);
also the per-seed rows both the page and report.md show."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from sptune.judging.pairing import PAIRING_RULE
from sptune.judging.sequential import SEQUENTIAL_RULE
from sptune.judging.stats import INTERVAL_RULE, Summary, delta_rule
from sptune.report.cells import Cell
from sptune.report.flags import Flag
from sptune.report.formatting import (
    fmt_lr,
    fmt_pct,
    interval_pct,
    mean_std,
    sequential_text,
    signed_pts,
    spread_sentence,
)
from sptune.report.records import ReportData, as_float, seed_key

DETAIL_HEADER = ("task", "variant", "seed", "lr", "batch", "best epoch", "val acc %", "test acc %",
                 "train acc % (selected checkpoint, eval mode)", "Δ test (pts)",
                 "trials", "diverged", "failed", "failures", "trial-epochs")
# ci_low/ci_high: the 95 % interval of the mean, empty with one seed; ci_method says which (t, welch).
CSV_COLUMNS = ("task", "variant", "kind", "n_seeds", "seeds", "test_acc_mean", "test_acc_std", "test_acc_ci_low",
               "test_acc_ci_high", "test_acc_ci_method", "val_acc_mean", "val_acc_std", "delta_vs", "delta_pairing",
               "delta_test_mean", "delta_test_std", "delta_test_ci_low", "delta_test_ci_high", "delta_test_ci_method",
               "delta_paired", "best_lrs", "delta_verdict", "delta_seeds_used", "delta_seq_ci_low", "delta_seq_ci_high",
               "delta_seq_boundary", "delta_fixed_n")
# delta_verdict ... delta_fixed_n: sequential re-runs' comparison (results.json `sequential`); empty with fixed re-runs.


def _seed_delta(row: dict[str, Any], cells: dict[tuple[str, str], Cell]) -> str:
    # Δ test against the baseline's run with the same seed, in points; "-" when there is none.
    cell = cells.get((row["task"], row["variant"]))
    base = cells.get((row["task"], cell.baseline)) if cell and cell.baseline else None
    if base and row["seed"] in base.test and as_float(row.get("test_acc")) is not None:
        return signed_pts(float(row["test_acc"]) - base.test[row["seed"]])
    return "-"


def detail_rows(rows: list[dict[str, Any]], cells: dict[tuple[str, str], Cell]) -> list[list[str]]:
    """Header plus one row per result row (variant, task, seed): its selected config and accuracies."""
    out = [list(DETAIL_HEADER)]
    for r in rows:
        out.append([r["task"], r["variant"], r["seed"], fmt_lr(as_float(r.get("lr"))), str(r.get("batch_size", "")),
                    str(r.get("best_epoch", "")), fmt_pct(r.get("val_acc")), fmt_pct(r.get("test_acc")),
                    fmt_pct(r.get("train_acc")), _seed_delta(r, cells), str(r.get("trials", "")),
                    str(r.get("diverged", "")), str(r.get("failed", "")), str(r.get("failures", "")),
                    str(r.get("trial_epochs", ""))])
    return out


def _md_cell(cell: Cell | None, sequential: dict[str, Any] | None = None) -> str:
    if cell is None or cell.test_summary is None:
        return "—"
    out = f"{mean_std(cell.test_summary)} {interval_pct(cell.test_summary)}"
    if cell.delta is not None:
        against = cell.pairing.label if cell.pairing else cell.baseline
        out += f"<br>Δ {mean_std(cell.delta, signed=True)} {interval_pct(cell.delta, signed=True)} vs {against}"
        out += f"<br>{sequential_text(sequential)}" if sequential else ""
    return out


def markdown(data: ReportData, cells: dict[tuple[str, str], Cell], flags: list[Flag], tasks: list[str],
             variants: list[str]) -> str:
    """report.md: the results table (tasks as columns), the per-seed rows and the flags."""
    lines = [f"# {data.name} — results", "",
             "Test accuracy (%) at each variant's validation-selected trial and epoch, mean ± std over seeds "
             "[95 % interval]; Δ in points.", "", *([spread_sentence(data.spread)] if data.spread else []),
             INTERVAL_RULE, delta_rule(variants, data.baseline), PAIRING_RULE,
             *([SEQUENTIAL_RULE] if data.sequential else []), "",
             "| variant | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    compared = data.sequential.get("comparisons") or {}
    lines += [f"| {v} | " + " | ".join(_md_cell(cells.get((t, v)), compared.get(v)) for t in tasks) + " |"
              for v in variants]
    detail = detail_rows(data.rows, cells)
    lines += ["", "## Per seed", "", "| " + " | ".join(detail[0]) + " |", "|" + "---|" * len(detail[0])]
    lines += ["| " + " | ".join(r) + " |" for r in detail[1:]]
    lines += ["", "## Fairness flags", ""]
    for f in flags:
        lines.append(f"- **{f.level.upper()}: {f.title}** — {f.summary}")
        lines += [f"  - {i}" for i in f.items]
    lines += ["", "Full report with figures: report.html"]
    return "\n".join(lines) + "\n"


def _summary_columns(prefix: str, s: Summary | None, with_ci: bool = True) -> dict[str, Any]:
    # Empty strings, not "None", where a value does not exist (one seed has no std or interval).
    out = {f"{prefix}_mean": s.mean if s else "", f"{prefix}_std": s.std if s and s.std is not None else ""}
    if with_ci:
        out[f"{prefix}_ci_low"] = s.interval[0] if s and s.interval else ""
        out[f"{prefix}_ci_high"] = s.interval[1] if s and s.interval else ""
        out[f"{prefix}_ci_method"] = s.method if s and s.method else ""
    return out


def _sequential_columns(c: dict[str, Any] | None) -> dict[str, Any]:
    if not c:
        return {}
    interval = c["test"]["interval"] or ["", ""]
    return {"delta_verdict": c["verdict"], "delta_seeds_used": c["seeds_used"], "delta_seq_ci_low": interval[0],
            "delta_seq_ci_high": interval[1], "delta_seq_boundary": c["test"]["boundary"] or "",
            "delta_fixed_n": c["fixed_n"] if c["fixed_n"] is not None else ""}


def csv_rows(cells: dict[tuple[str, str], Cell], sequential: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One results.csv row per (task, variant) cell (`sequential`: results.json's, whose comparisons fill the
    delta_verdict ... delta_fixed_n columns)."""
    compared = (sequential or {}).get("comparisons") or {}
    out = []
    for (task, variant), c in cells.items():
        out.append({
            "task": task, "variant": variant, "kind": c.variant_kind, "n_seeds": len(c.test),
            "seeds": ";".join(sorted(c.test, key=seed_key)),
            **_summary_columns("test_acc", c.test_summary), **_summary_columns("val_acc", c.val_summary, False),
            "delta_vs": c.baseline or "", "delta_pairing": c.pairing.note if c.pairing else "",
            **_summary_columns("delta_test", c.delta),
            "delta_paired": "" if c.delta is None else str(bool(c.delta.paired)).lower(),
            "best_lrs": ";".join(f"{c.lrs[s]:.6g}" for s in sorted(c.lrs, key=seed_key)),
            **_sequential_columns(compared.get(variant)),
        })
    return out


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
