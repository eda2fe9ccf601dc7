"""results.json's shape, checked before the report reads it: a file of another shape (an empty list, rows that are
not records) is refused naming the file and the key, instead of failing somewhere inside the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sptune.report.records import ReportError

# Top-level keys the report reads, with the JSON type each must have where present.
_TYPES = {"rows": list, "mlflow": dict, "timeline": list, "budget": dict, "lr_extension": dict,
          "studies": (dict, list)}
_NAMES = {list: "a list", dict: "an object", (dict, list): "an object or a list"}
FIX = "point at the output directory of a study python -m sptune.sweep wrote (its results.json unedited)"


def check_results(path: Path, data: Any) -> dict[str, Any]:
    """``data`` (results.json as parsed), if it has the shape a study writes."""
    if not isinstance(data, dict):
        raise ReportError(str(path), f"holds {type(data).__name__} {_short(data)}, not the object a study writes",
                          FIX)
    for key, kind in _TYPES.items():
        if key in data and data[key] is not None and not isinstance(data[key], kind):
            raise ReportError(f"{path}: {key}", f"is {_short(data[key])}, not {_NAMES[kind]}", FIX)
    for i, row in enumerate(data.get("rows") or []):
        if not isinstance(row, dict) or not isinstance(row.get("variant") or row.get("kind"), str):
            raise ReportError(f"{path}: rows[{i}]", f"is {_short(row)}, not a record naming its variant", FIX)
    for i, entry in enumerate(data.get("timeline") or []):
        if not isinstance(entry, dict):
            raise ReportError(f"{path}: timeline[{i}]", f"is {_short(entry)}, not a record", FIX)
    return data


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
