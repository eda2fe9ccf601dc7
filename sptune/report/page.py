"""report.html: the values it shows (the header, the flag summary, the results table, the flag boxes, the figures,
the per-seed rows, the hyperparameter importances and the footer), rendered by its Jinja2 template. No HTML is
written in Python; the template writes it all.

The template is package data, ``sptune/report/template/`` (``report.html.j2`` and its stylesheet, inlined at render
time so that the page stays one self-contained file), so an installed wheel renders the same page as a checkout.
``SPTUNE_REPORT_TEMPLATE_DIR`` points at another folder holding both files (a copy, to restyle the page)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from sptune.judging.pairing import PAIRING_RULE
from sptune.judging.sequential import SEQUENTIAL_RULE
from sptune.judging.stats import INTERVAL_RULE, delta_rule
from sptune.report.cells import Cell
from sptune.report.flags import EDGE_FACTOR, FLIP_TOL, Flag
from sptune.report.formatting import interval_pct, mean_std, sequential_text, spread_sentence
from sptune.report.records import ReportData, ReportError, seed_key
from sptune.report.tables import detail_rows

if TYPE_CHECKING:  # the figures' module imports matplotlib, which rendering a page does not need
    from sptune.report.figures import PageFigure, TaskFigures

TEMPLATE_ENV = "SPTUNE_REPORT_TEMPLATE_DIR"
PACKAGED_TEMPLATE = Path(__file__).with_name("template")
TEMPLATE = "report.html.j2"
STYLESHEET = "report.css"

FLAG_LABELS = {"warn": "FLAG", "ok": "OK", "info": "INFO"}


def _delta(cell: Cell, sequential: dict[str, Any] | None) -> dict[str, str]:
    d = cell.delta
    # Whether the Δ is like-for-like is part of the number: said next to it, not only in the rule below.
    return {"tone": "pos" if d.mean > 0 else "neg" if d.mean < 0 else "", "against": cell.baseline or "",
            "value": mean_std(d, signed=True), "interval": interval_pct(d, signed=True),
            "pairing": cell.pairing.note if cell.pairing else "", "sequential": sequential_text(sequential)}


def result_cell(cell: Cell | None, baseline: str, sequential: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """One results-table cell: accuracy, its sub-line, and its Δ (or that it is the baseline); None: no result."""
    if cell is None or cell.test_summary is None:
        return None
    s = cell.test_summary
    sub = [f"n={s.n} seed{'s' if s.n > 1 else ''}"]
    if cell.val_summary:
        sub.append(f"val {mean_std(cell.val_summary)}")
    sub.append(interval_pct(s))
    delta = _delta(cell, sequential) if cell.delta is not None else None
    return {"acc": mean_std(s), "sub": " · ".join(sub), "delta": delta,
            "is_baseline": cell.delta is None and cell.variant == baseline}


def _numeric(text: str) -> bool:
    return bool(re.fullmatch(r"[-+]?[\d.]+(e-?\d+)?|-|—", text.strip()))


def table(rows: list[list[str]]) -> dict[str, Any]:
    """A header row plus data rows, with each column marked as text (left) or numbers (right-aligned)."""
    # Numbers right-aligned (comparable digits), names left-aligned.
    left = [not all(_numeric(r[i]) for r in rows[1:] if i < len(r)) for i in range(len(rows[0]))]
    return {"header": rows[0], "rows": rows[1:], "left": left}


def _flag(flag: Flag) -> dict[str, Any]:
    return {"key": flag.key, "level": flag.level, "label": FLAG_LABELS[flag.level], "title": flag.title,
            "summary": flag.summary, "items": flag.items, "table": table(flag.table) if flag.table else None}


def _figure(fig: PageFigure) -> dict[str, Any]:
    # The SVG is matplotlib's own output (its text already XML-escaped), embedded as markup, not as text.
    return {"title": fig.title, "caption": fig.caption, "svg": Markup(fig.saved.svg), "stem": fig.saved.stem,
            "details": fig.details, "links": {fmt: fig.link(fmt) for fmt in ("svg", "pdf", "png")}}


def _importances(importances: dict[str, dict[str, float]], figures: dict[str, PageFigure]) -> list[dict[str, Any]]:
    return [{"variant": v, "rows": [(p, f"{x:.3f}") for p, x in sorted(params.items(), key=lambda kv: -kv[1])],
             "figure": _figure(figures[v]) if v in figures else None}
            for v, params in importances.items() if params]


def page_context(data: ReportData, cells: dict[tuple[str, str], Cell], flags: list[Flag], tasks: list[str],
                 variants: list[str], kinds: dict[str, str], figures: list[TaskFigures],
                 importances: tuple[dict[str, dict[str, float]], dict[str, PageFigure]]) -> dict[str, Any]:
    """Everything the template shows, as plain values (strings, lists, dicts) and the figures' SVG."""
    compared = data.sequential.get("comparisons") or {}
    return {
        "name": data.name, "tasks": tasks, "variants": variants, "source": str(data.read_from),
        "seeds": sorted({r["seed"] for r in data.rows}, key=seed_key), "run_dir": str(data.run_dir),
        "notes": data.notes, "flags": [_flag(f) for f in flags], "n_warn": sum(f.level == "warn" for f in flags),
        "rules": {"spread": spread_sentence(data.spread), "interval": INTERVAL_RULE,
                  "delta": delta_rule(variants, data.baseline), "pairing": PAIRING_RULE,
                  "sequential": SEQUENTIAL_RULE if data.sequential else ""},
        "results": [{"variant": v, "kind": kinds[v],
                     "cells": [result_cell(cells.get((t, v)), data.baseline, compared.get(v)) for t in tasks]}
                    for v in variants],
        "figures": [{"task": tf.task, "figures": [_figure(f) for f in tf.figures]} for tf in figures],
        "detail": table(detail_rows(data.rows, cells)),
        "importances": _importances(*importances),
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"), "edge_factor": f"{EDGE_FACTOR:g}",
        "flip_tol_pts": f"{100 * FLIP_TOL:g}",
    }


def report_template_dir() -> Path:
    """$SPTUNE_REPORT_TEMPLATE_DIR, else the packaged template, checked: a missing file is named with the fix."""
    override = os.environ.get(TEMPLATE_ENV)
    folder = Path(override) if override else PACKAGED_TEMPLATE
    for name in (TEMPLATE, STYLESHEET):
        if not (folder / name).is_file():
            fix = (f"point {TEMPLATE_ENV} at a folder holding {TEMPLATE} and {STYLESHEET} (copy {PACKAGED_TEMPLATE})"
                   if override else "reinstall sptune: its package data is incomplete")
            raise ReportError(str(folder / name), "the report template is missing", fix)
    return folder


def render(context: dict[str, Any]) -> str:
    """The page: the template with context, its stylesheet inlined."""
    folder = report_template_dir()
    # Autoescape everything: study, task and variant names come from user files. StrictUndefined: a name the
    # template expects but the context lacks is a bug to see, not an empty cell.
    env = Environment(loader=FileSystemLoader(folder), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    css = Markup((folder / STYLESHEET).read_text(encoding="utf-8"))  # our own file: trusted, not escaped
    return env.get_template(TEMPLATE).render(**context, css=css)
