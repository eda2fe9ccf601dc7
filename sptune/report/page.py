"""Assembling report.html: header and flag summary, the results table, flag boxes, figures and per-seed rows."""

from __future__ import annotations

import re
import time

from sptune.pairing import PAIRING_RULE
from sptune.report.cells import Cell
from sptune.report.figures import figures_html, variant_colors
from sptune.report.flags import EDGE_FACTOR, FLIP_TOL, Flag
from sptune.report.records import ReportData, seed_key
from sptune.report.style import CSS
from sptune.report.tables import detail_rows
from sptune.report.text import esc, interval_pct, mean_std, spread_sentence
from sptune.stats import INTERVAL_RULE, delta_rule

FLAG_LABELS = {"warn": "FLAG", "ok": "OK", "info": "INFO"}


def _delta_html(cell: Cell) -> str:
    d = cell.delta
    tone = "pos" if d.mean > 0 else "neg" if d.mean < 0 else ""
    # Whether the Δ is like-for-like is part of the number: said next to it, not only in the rule below.
    pairing = f'<div class="sub">{esc(cell.pairing.note)}</div>' if cell.pairing and cell.pairing.note else ""
    return (f'<div class="delta {tone}">Δ vs {esc(cell.baseline)} {esc(mean_std(d, signed=True))} pts</div>'
            f'<div class="sub">{esc(interval_pct(d, signed=True))}</div>{pairing}')


def _cell_html(cell: Cell | None, baseline: str) -> str:
    if cell is None or cell.test_summary is None:
        return '<td class="sub">—</td>'
    s = cell.test_summary
    sub = [f"n={s.n} seed{'s' if s.n > 1 else ''}"]
    if cell.val_summary:
        sub.append(f"val {mean_std(cell.val_summary)}")
    sub.append(interval_pct(s))
    out = f'<div class="acc">{esc(mean_std(s))}</div><div class="sub">{esc(" · ".join(sub))}</div>'
    if cell.delta is not None:
        out += _delta_html(cell)
    elif cell.variant == baseline:
        out += '<div class="sub">baseline</div>'
    return f"<td>{out}</td>"


def results_table_html(cells: dict[tuple[str, str], Cell], tasks: list[str], variants: list[str],
                       kinds: dict[str, str], baseline: str) -> str:
    """Variants as rows, tasks as columns (as in the papers): test accuracy, its spread and Δ vs the baseline."""
    head = '<tr><th class="l">variant</th>' + "".join(f"<th>{esc(t)}</th>" for t in tasks) + "</tr>"
    body = [f'<tr><th class="l">{esc(v)}<div class="sub">kind {esc(kinds[v])}</div></th>'
            + "".join(_cell_html(cells.get((t, v)), baseline) for t in tasks) + "</tr>" for v in variants]
    return f'<table class="results"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'


def _numeric(text: str) -> bool:
    return bool(re.fullmatch(r"[-+]?[\d.]+(e-?\d+)?|-|—", text.strip()))


def table_html(rows: list[list[str]], cls: str = "") -> str:
    """A header row plus data rows as an HTML table."""
    # Numbers right-aligned (comparable digits), names left-aligned.
    text_cols = [i for i in range(len(rows[0])) if not all(_numeric(r[i]) for r in rows[1:] if i < len(r))]
    align = ['class="l"' if i in text_cols else "" for i in range(len(rows[0]))]
    head = "".join(f"<th {align[i]}>{esc(c)}</th>" for i, c in enumerate(rows[0]))
    body = "".join("<tr>" + "".join(f"<td {align[i]}>{esc(c)}</td>" for i, c in enumerate(r)) + "</tr>"
                   for r in rows[1:])
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def flag_html(flag: Flag) -> str:
    """One flag as a box: level, title, summary, items and its table if any."""
    items = "".join(f"<li>{esc(i)}</li>" for i in flag.items)
    wide = " wide" if flag.table else ""  # a box with a table gets the full row
    return (f'<section class="flag {flag.level}{wide}" data-flag="{esc(flag.key)}" id="flag-{esc(flag.key)}">'
            f'<h3><span class="lvl">{FLAG_LABELS[flag.level]}</span>{esc(flag.title)}</h3><p>{esc(flag.summary)}</p>'
            + (f"<ul>{items}</ul>" if items else "") + (table_html(flag.table) if flag.table else "") + "</section>")


def render_html(data: ReportData, cells: dict[tuple[str, str], Cell], flags: list[Flag], tasks: list[str],
                variants: list[str], kinds: dict[str, str]) -> str:
    """The whole self-contained page (inline CSS and SVG, no scripts)."""
    seeds = sorted({r["seed"] for r in data.rows}, key=seed_key)
    chips = "".join(f'<a class="chip {f.level}" href="#flag-{esc(f.key)}">{esc(f.title)}</a>' for f in flags)
    n_warn = sum(f.level == "warn" for f in flags)
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in data.notes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(data.name)} — sptune fairness report</title>
<style>{CSS}</style></head><body><main>
<h1>{esc(data.name)} — fairness report</h1>
<div class="meta">tasks: {esc(", ".join(tasks))} · variants: {esc(", ".join(variants))} · seeds: {esc(", ".join(seeds))}
<br>source: {esc(data.source)} · run directory: {esc(data.run_dir)}</div>{notes}
<div class="summary"><strong>{n_warn} fairness flag{"s" if n_warn != 1 else ""} raised:</strong>{chips}</div>
<h2>Results</h2>
<p class="sub">Test accuracy (%) of each variant's validation-selected trial and epoch; mean ± std over seeds;
Δ in points. <span class="spread">{esc(spread_sentence(data.spread))}</span> {esc(INTERVAL_RULE)}
{esc(delta_rule(variants, data.baseline))} {esc(PAIRING_RULE)}</p>
{results_table_html(cells, tasks, variants, kinds, data.baseline)}
<h2>Fairness flags</h2>
<div class="flags">{"".join(flag_html(f) for f in flags)}</div>
<h2>Figures</h2>
{figures_html(data, tasks, variants, variant_colors(variants), cells)}
<h2>Selected configuration per seed</h2>
{table_html(detail_rows(data.rows, cells), "detail")}
<footer>Generated by sptune.report on {esc(time.strftime("%Y-%m-%d %H:%M:%S"))}. Flags: best LR within
{EDGE_FACTOR:g}× of a range bound or at a grid end; ranking flips larger than {100 * FLIP_TOL:g} pt; completed =
finished, neither diverged nor failed; compute = trial-epochs and summed epoch_seconds.</footer>
</main></body></html>
"""
