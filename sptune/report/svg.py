"""SVG chart primitives: a ``Plot`` that maps data to pixels and draws axes, legend, lines, bands and markers."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sptune.report.text import esc


@dataclass
class LegendItem:
    label: str
    color: str
    mark: str  # line | band | dot | hollow | diamond | cross | bar | dash


def marker(mark: str, x: float, y: float, color: str, tip: str = "", size: float = 4.0) -> str:
    """One point marker at pixel (x, y), with a hover tooltip when tip is given."""
    tip_el = f"<title>{esc(tip)}</title>" if tip else ""
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
    return marker(item.mark, x + 10, y, item.color)


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
        # Left to right, wrapping to a new 18 px line when the next label would not fit.
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
        """Background, grid, tick labels and axis titles, drawn under everything added so far."""
        left, right, top, bottom = self.left, self.width - self.right, self.top, self.bottom
        p = [f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="#fbfbfb" '
             'stroke="#bbb"/>']
        for t in yticks:
            y = self.y(t)
            p.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#e6e6e6"/>')
            p.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{esc(yfmt(t))}</text>')
        label_y = bottom + 16 + 7 * self.rug_rows
        for t in xticks:
            x = self.x(t)
            p.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#eeeeee"/>')
            p.append(f'<text x="{x:.1f}" y="{label_y}" text-anchor="middle" class="tick">{esc(xfmt(t))}</text>')
        p.append(f'<text x="{(left + right) / 2:.1f}" y="{self.height - 8}" text-anchor="middle" class="axis">'
                 f'{esc(xlabel)}</text>')
        p.append(f'<text transform="translate(14,{(top + bottom) / 2:.1f}) rotate(-90)" text-anchor="middle" '
                 f'class="axis">{esc(ylabel)}</text>')
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
        """A shaded lo..hi band along xs (skipped when it has no width)."""
        if len(xs) < 2 or all(a == b for a, b in zip(lo, hi, strict=True)):
            return
        pts = list(zip(xs, hi, strict=True)) + list(zip(reversed(xs), reversed(lo), strict=True))
        d = " ".join(f"{self.x(a):.1f},{self.y(b):.1f}" for a, b in pts)
        self.parts.append(f'<polygon points="{d}" fill="{color}" fill-opacity="0.18" stroke="none"/>')

    def mark(self, mark: str, x: float, y: float, color: str, tip: str = "", size: float = 4.0) -> None:
        self.parts.append(marker(mark, self.x(x), self.y(y), color, tip, size))

    def rug(self, row: int, lo: float, hi: float, points: list[float], color: str, tip: str) -> None:
        """Search range of one variant as a bar under the x axis (grid values as ticks)."""
        y = self.bottom + 5 + 7 * row
        self.parts.append(f'<line x1="{self.x(lo):.1f}" y1="{y}" x2="{self.x(hi):.1f}" y2="{y}" stroke="{color}" '
                          f'stroke-width="3" stroke-opacity="0.55"><title>{esc(tip)}</title></line>')
        for p in points:
            self.parts.append(f'<line x1="{self.x(p):.1f}" y1="{y - 3}" x2="{self.x(p):.1f}" y2="{y + 3}" '
                              f'stroke="{color}" stroke-width="1.5"/>')

    def svg(self, label: str) -> str:
        """The finished chart as an inline <svg> element with an accessible label."""
        legend = [_legend_swatch(it, x, 12 + y) + f'<text x="{x + 26:.1f}" y="{16 + y}" class="legend">'
                  f"{esc(it.label)}</text>" for x, y, it in self._legend_pos]
        body = "".join(legend + self.parts)
        return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.width} {self.height}" role="img" '
                f'aria-label="{esc(label)}"><title>{esc(label)}</title>{body}</svg>')


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About n ticks from lo to hi at steps of 1, 2, 2.5 or 5 times a power of ten."""
    raw = (hi - lo) / max(n, 1) or 1.0
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """Log-axis ticks: decades only over wide spans, 1-3 or 1-2-5 per decade over narrower ones."""
    span = math.log10(hi / lo)
    mults = (1,) if span > 2.6 else (1, 3) if span > 1.2 else (1, 2, 5)
    return [m * 10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            for m in mults if lo <= m * 10.0**k <= hi]
