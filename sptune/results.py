"""results.json (the contract other tools read) and results.md."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

COLUMNS = (
    "variant",
    "seed",
    "lr",
    "batch_size",
    "best_epoch",
    "val_acc",
    "test_acc",
    "delta_test_vs_scratch",
    "trials",
)
BOOTSTRAP_SAMPLES = 10_000


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
    delta_test_vs_scratch: float | None = None


def add_deltas(rows: list[ResultRow]) -> None:
    """Δ test accuracy vs the scratch run of the same seed (paired), when there is one."""
    scratch = {r.seed: r.test_acc for r in rows if r.kind == "scratch"}
    for r in rows:
        base = scratch.get(r.seed)
        r.delta_test_vs_scratch = None if base is None else r.test_acc - base


def bootstrap_ci(values: list[float], seed: int = 0) -> tuple[float, float]:
    """95 % percentile bootstrap interval of the mean (a single value gives a zero-width interval)."""
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(BOOTSTRAP_SAMPLES, len(data)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def summarize(rows: list[ResultRow]) -> dict[str, dict[str, Any]]:
    """Per variant: mean, std and 95 % bootstrap CI of test accuracy and of Δ vs scratch over seeds."""
    summary: dict[str, dict[str, Any]] = {}
    for variant in dict.fromkeys(r.variant for r in rows):
        mine = [r for r in rows if r.variant == variant]
        acc = [r.test_acc for r in mine]
        stats = {
            "seeds": len(mine),
            "test_acc_mean": float(np.mean(acc)),
            "test_acc_std": float(np.std(acc, ddof=1)) if len(acc) > 1 else 0.0,
            "test_acc_ci95": bootstrap_ci(acc),
            "val_acc_mean": float(np.mean([r.val_acc for r in mine])),
        }
        deltas = [r.delta_test_vs_scratch for r in mine if r.delta_test_vs_scratch is not None]
        if deltas:
            stats.update({"delta_mean": float(np.mean(deltas)), "delta_ci95": bootstrap_ci(deltas)})
        summary[variant] = stats
    return summary


def summary_table(summary: dict[str, dict[str, Any]]) -> str:
    lines = ["| variant | seeds | test acc mean ± std | 95 % CI | Δ vs scratch (95 % CI) |", "|---|---|---|---|---|"]
    for variant, s in summary.items():
        low, high = s["test_acc_ci95"]
        delta = (
            f"{s['delta_mean']:+.4f} ({s['delta_ci95'][0]:+.4f}, {s['delta_ci95'][1]:+.4f})"
            if "delta_mean" in s
            else "-"
        )
        lines.append(
            f"| {variant} | {s['seeds']} | {s['test_acc_mean']:.4f} ± {s['test_acc_std']:.4f} | "
            f"[{low:.4f}, {high:.4f}] | {delta} |"
        )
    return "\n".join(lines)


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key == "lr":
        return f"{value:.3g}"
    if key == "delta_test_vs_scratch":
        return f"{value:+.4f}"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def markdown_table(rows: list[ResultRow]) -> str:
    head = "| " + " | ".join(COLUMNS) + " |"
    sep = "|" + "|".join("---" for _ in COLUMNS) + "|"
    body = ["| " + " | ".join(_cell(c, getattr(r, c)) for c in COLUMNS) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def write_results(output_dir: Path, study: dict[str, Any], rows: list[ResultRow]) -> tuple[Path, Path]:
    json_path = output_dir / "results.json"
    json_path.write_text(json.dumps({**study, "rows": [asdict(r) for r in rows]}, indent=2, default=str))
    md_path = output_dir / "results.md"
    md = [
        f"# {study['study']} — task {study['task']}",
        "",
        markdown_table(rows),
        "",
        summary_table(study["summary"]),
        "",
        "Selected on validation accuracy (best trial and epoch per variant); test read once per selected checkpoint.",
    ]
    md_path.write_text("\n".join(md) + "\n")
    return json_path, md_path
