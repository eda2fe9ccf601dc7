"""What every report figure shares: the palette, a fresh Agg-backed ``Figure``, saving it as SVG, PDF and PNG,
and the SVG text that report.html embeds inline."""

from __future__ import annotations

import functools
import io
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ParamSpec, TypeVar

import matplotlib as mpl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

# Okabe & Ito's colour-blind-safe palette; variant i gets colour i in every figure of a report.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#8C564B", "#000000")
PRETRAIN_COLORS = ("#7f7f7f", "#b5b5b5")
MARK_COLOR = "#555555"  # legend entries that explain a marker, not a variant
PNG_DPI = 110
FORMATS = ("svg", "pdf", "png")
# Text stays text in the SVG (searchable, small, drawn in the page's font); one style for all figures.
STYLE = {"svg.fonttype": "none", "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8,
         "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.color": "#e6e6e6",
         "grid.linewidth": 0.8, "axes.axisbelow": True}
# No dates or versions in the files: the same study draws byte-identical figures.
SVG_META = {"Date": None, "Creator": None, "Format": None, "Type": None}
PDF_META = {"CreationDate": None, "Creator": None, "Producer": None}
PNG_META = {"Software": None}


def variant_colors(variants: list[str]) -> dict[str, str]:
    """One colour-blind-safe colour per variant, the same in every figure."""
    return {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(variants)}


P = ParamSpec("P")
R = TypeVar("R")


def styled(draw: Callable[P, R]) -> Callable[P, R]:
    """Run a figure function under the report's style: axes, texts and legends take rcParams when they are
    created, so the whole drawing (not only the Figure's creation) happens inside the context, which is then
    restored: nothing leaks into the next figure or the caller's matplotlib."""

    @functools.wraps(draw)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with mpl.rc_context(STYLE):
            return draw(*args, **kwargs)

    return wrapper


def new_figure(width: float = 6.4, height: float = 4.2) -> Figure:
    """A figure on its own Agg canvas (no pyplot), laid out by matplotlib's constrained layout."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


@dataclass
class SavedFigure:
    """One figure written to disk: its file stem, the paths per format and the SVG to embed in the page."""

    stem: str
    paths: dict[str, Path]
    svg: str


def slug(text: str) -> str:
    """A file-name-safe form of a task or variant name ("digits · study-a" -> "digits_study-a")."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "figure"


def save(fig: Figure, out_dir: Path, stem: str) -> SavedFigure:
    """Write fig as out_dir/stem.{svg,pdf,png}; the SVG is also returned ready to be inlined."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {fmt: out_dir / f"{stem}.{fmt}" for fmt in FORMATS}
    # A salt per figure keeps SVG ids stable across builds and distinct between the figures of one page.
    with mpl.rc_context({**STYLE, "svg.hashsalt": stem}):
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata=SVG_META)
        paths["svg"].write_text(buf.getvalue(), encoding="utf-8")
        # Constrained layout has placed the axes for the SVG; the PDF and PNG are the same figure, so they keep
        # that placement rather than solving it twice more.
        fig.set_layout_engine("none")
        fig.savefig(paths["pdf"], format="pdf", metadata=PDF_META)
        fig.savefig(paths["png"], format="png", dpi=PNG_DPI, metadata=PNG_META)
    return SavedFigure(stem, paths, inline_svg(buf.getvalue(), stem))


def inline_svg(svg: str, prefix: str) -> str:
    """The <svg> element for an HTML page: no XML prolog or DOCTYPE (a URL), no namespace declarations (the HTML
    parser supplies them), and every id prefixed so that several figures' ids cannot collide in one page."""
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", svg, count=2)
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', svg)
    svg = re.sub(r'(xlink:href|href)="#([^"]+)"', rf'\1="#{prefix}-\2"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", svg)
    # An inline <style> applies to the whole page: keep matplotlib's rule inside its figures.
    svg = svg.replace("<style type=\"text/css\">*{", "<style type=\"text/css\">svg.plot *{", 1)
    # Scale with the page instead of the fixed point size matplotlib writes.
    return re.sub(r'<svg width="[^"]*" height="[^"]*"', '<svg role="img" class="plot"', svg, count=1)


def log_ticks(lo: float, hi: float) -> list[float]:
    """Log-axis ticks: decades only over wide spans, 1-3 or 1-2-5 per decade over narrower ones."""
    span = math.log10(hi / lo)
    mults = (1,) if span > 2.6 else (1, 3) if span > 1.2 else (1, 2, 5)
    return [m * 10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            for m in mults if lo <= m * 10.0**k <= hi]


def acc_limits(values: list[float]) -> tuple[float, float]:
    """Whole tens of percent around the data, at least 10 points tall."""
    values = [v for v in values if v is not None] or [0.0, 1.0]
    lo, hi = math.floor(min(values) * 10 - 1e-9) / 10, math.ceil(max(values) * 10 + 1e-9) / 10
    return max(0.0, lo), min(1.0, max(hi, lo + 0.1))


# ":g" keeps 62.5 % a half step, not a second "62%".
PERCENT = FuncFormatter(lambda v, _: f"{round(100 * v, 6):g}%")


def finish_accuracy_axes(fig: Figure, handles: list, x_range: tuple[float, float], accuracies: list[float],
                         xlabel: str, ylabel: str) -> Figure:
    """Integer x ticks, accuracy in percent on y, the legend above: the frame every per-step accuracy figure shares."""
    ax = fig.axes[0]
    ax.set_xlim(*x_range)
    ax.set_ylim(*acc_limits(accuracies))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(PERCENT)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    fig.legend(handles=handles, loc="outside upper center", ncols=4, frameon=False)
    return fig
