"""results.md's (and a study's last printout's) account of each variant's LR extension: results.json's
`lr_extension` (`sptune.rules.lr_extension.extension_record`), what the search added beyond its LR range and
whether the final pick still sits at the edge of what was searched."""

from __future__ import annotations

from typing import Any


def _lr(x: float) -> str:
    return f"{x:.3g}"


def _original(entry: dict[str, Any]) -> str:
    original = entry["original"]
    if original.get("values") is not None:
        return "[" + ", ".join(_lr(v) for v in original["values"]) + "]"
    return f"[{_lr(original['low'])}, {_lr(original['high'])}]"


def extension_line(variant: str, entry: dict[str, Any]) -> str:
    """One variant's LR extension in a sentence."""
    if not entry["rounds"]:
        return f"- {variant}: selected LR {_lr(entry['final_lr'])} inside its range {_original(entry)}: not extended."
    added = "; ".join(f"round {r}: {', '.join(_lr(x) for x in lrs)}" for r, lrs in enumerate(entry["added_lrs"], 1))
    low, high = entry["searched_range"]
    where = (f"still at the {entry['side']} edge of the searched [{_lr(low)}, {_lr(high)}] after the limit of "
             f"{entry['max_rounds']} round(s): its optimum may lie further out" if entry["final_at_edge"]
             else f"inside the searched [{_lr(low)}, {_lr(high)}]")
    start = entry.get("extended_from")  # None in results written before it was recorded
    which = "the search's LR" if start is None else (
        f"the search's pick, LR {_lr(start['lr'])}," if start["rank"] == 0 else
        f"the LR of the search's candidate {start['rank'] + 1} ({_lr(start['lr'])}; its pick was inside),")
    return (f"- {variant}: {which} sat at the {entry['side']} bound of {_original(entry)}; added {added}; "
            f"best LR after it {_lr(entry['final_lr'])}, {where}.")


def extension_lines(extensions: dict[str, dict[str, Any]] | None) -> list[str]:
    """results.md's section on the LR extensions (nothing when no variant extends)."""
    if not extensions:
        return []
    return ["", "LR extension (search.lr.extend: a selected LR, or a candidate's with selection.top_k, at a bound of "
            "its range adds LRs beyond it, half a decade per round, and the pick is selected again):", "",
            *(extension_line(v, e) for v, e in extensions.items())]
