"""results.json (the contract other tools read) and results.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

COLUMNS = ("variant", "lr", "batch_size", "best_epoch", "val_acc", "test_acc", "delta_test_vs_scratch", "trials")


def add_deltas(rows: list[dict[str, Any]]) -> None:
    scratch = next((r["test_acc"] for r in rows if r["kind"] == "scratch"), None)
    for r in rows:
        r["delta_test_vs_scratch"] = None if scratch is None else r["test_acc"] - scratch


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


def markdown_table(rows: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(COLUMNS) + " |"
    sep = "|" + "|".join("---" for _ in COLUMNS) + "|"
    body = ["| " + " | ".join(_cell(c, r.get(c)) for c in COLUMNS) + " |" for r in rows]
    return "\n".join([head, sep, *body])


def write_results(output_dir: Path, study: dict[str, Any], rows: list[dict[str, Any]]) -> tuple[Path, Path]:
    json_path = output_dir / "results.json"
    json_path.write_text(json.dumps({**study, "rows": rows}, indent=2, default=str))
    md_path = output_dir / "results.md"
    md = [f"# {study['study']} — task {study['task']}", "", markdown_table(rows), "",
          "Selected on validation accuracy (best trial and epoch per variant); test read once per selected checkpoint."]
    md_path.write_text("\n".join(md) + "\n")
    return json_path, md_path
