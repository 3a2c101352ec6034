"""The one chart engine of ``sweep.html``: every chart is an inline SVG drawn with this module.

One size scale (``WIDE`` or ``NARROW`` wide, ``HEIGHT`` high, drawn at that size and never
stretched, so text keeps one font size), one font scale (the page's CSS classes ``tick``,
``axis-title``: no inline font sizes), one palette and one way to say that a
chart has nothing to draw. The sections that show a chart (``html``, ``depth_chart``,
``load_html``) choose what to draw; the frame, the axes, the lines and the dots are drawn here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from html import escape

__all__ = [
    "HEIGHT",
    "NARROW",
    "PALETTE",
    "WIDE",
    "Svg",
    "XScale",
    "YScale",
    "empty_chart",
    "fmt_num",
    "nice_ticks",
]

#: the chart widths (a full-width chart, or one of two side by side) and the one height
WIDE, NARROW, HEIGHT = 980, 480, 330
#: the colours of prompts and budgets, in order
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#b07aa1",
    "#76b7b2",
    "#edc948",
    "#ff9da7",
    "#9c755f",
    "#e15759",
    "#bab0ac",
)


def f(x: float) -> str:
    """A coordinate as written in the SVG."""
    return f"{x:.1f}"


def fmt_num(x: float) -> str:
    """A tick value, short: ``12k``, ``350``, ``12.5``, ``0.25``."""
    if x == 0:
        return "0"
    ax = abs(x)
    if ax >= 10_000:
        return f"{x / 1000:,.0f}k"
    if ax >= 100:
        return f"{x:,.0f}"
    if ax >= 10:
        return f"{x:.1f}".rstrip("0").rstrip(".")
    return f"{x:.2f}".rstrip("0").rstrip(".")


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 x 10^k steps) covering ``[lo, hi]``."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi <= lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / count
    if not (math.isfinite(raw) and raw > 0.0):
        # a span that overflows or underflows a float: no round steps to find
        return [lo, hi]
    mag = 10 ** math.floor(math.log10(raw))
    step = mag
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        step = m * mag
        if step >= raw:
            break
    start = math.floor(lo / step) * step
    end = math.ceil(hi / step) * step
    n = round((end - start) / step)
    return [start + i * step for i in range(n + 1)]


class XScale:
    """Budgets on a log2 axis; the server-default budget (None) sits left of the rest."""

    def __init__(self, budgets: Sequence[int | None], left: float, right: float) -> None:
        ints = sorted({b for b in budgets if b is not None})
        self.units: dict[int | None, float] = {b: math.log2(b) for b in ints}
        if None in budgets or not ints:
            self.units[None] = (min(self.units.values()) - 1.0) if ints else 0.0
        values = sorted(self.units.values())
        gaps = [b - a for a, b in itertools.pairwise(values)]
        self.min_gap = min(gaps) if gaps else 1.0
        self.lo = values[0] - 0.6 * self.min_gap
        self.hi = values[-1] + 0.6 * self.min_gap
        self.left, self.right = left, right

    @property
    def budgets(self) -> list[int | None]:
        """Budgets in axis order."""
        return sorted(self.units, key=lambda b: self.units[b])

    def __call__(self, budget: int | None, offset: float = 0.0) -> float:
        u = self.units[budget] + offset * self.min_gap
        return self.left + (u - self.lo) / (self.hi - self.lo) * (self.right - self.left)

    def half_band(self) -> float:
        """Half the pixel width of one budget's column."""
        return 0.42 * self.min_gap / (self.hi - self.lo) * (self.right - self.left)


class YScale:
    """A linear value axis on round ticks (``ticks`` fixes them)."""

    def __init__(
        self,
        values: Sequence[float],
        top: float,
        bottom: float,
        *,
        zero: bool,
        ticks: Sequence[float] | None = None,
    ) -> None:
        if ticks is None:
            lo = min(values) if values else 0.0
            hi = max(values) if values else 1.0
            # Without a zero floor, leave air below the lowest point without
            # pretending the axis starts at zero.
            lo = min(0.0, lo) if zero else max(0.0, lo - (hi - lo) * 0.15)
            ticks = nice_ticks(lo, hi)
        self.ticks = list(ticks)
        self.lo, self.hi = self.ticks[0], self.ticks[-1]
        self.top, self.bottom = top, bottom

    def __call__(self, v: float) -> float:
        span = (self.hi - self.lo) or 1.0
        return self.bottom - (v - self.lo) / span * (self.bottom - self.top)


def empty_chart(title: str, why: str) -> str:
    """What stands in for a chart with nothing to draw: words, not an empty frame."""
    return (
        f'<div class="chart-empty" role="note"><strong>{escape(title)}</strong>: '
        f"nothing to draw - {escape(why)}.</div>"
    )


class Svg:
    """One chart: the frame at its own size, then what is added to it."""

    def __init__(self, label: str, width: int = NARROW, kind: str = "") -> None:
        self.width, self.height = width, HEIGHT
        cls = f"chart {kind}" if kind else "chart"
        self.parts: list[str] = [
            f'<svg class="{cls}" width="{width}" height="{HEIGHT}" '
            f'viewBox="0 0 {width} {HEIGHT}" role="img" '
            f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">',
            f"<title>{escape(label)}</title>",
        ]

    def add(self, part: str) -> None:
        self.parts.append(part)

    def y_grid(
        self, ys: YScale, left: float, right: float, labels: Sequence[str] | None = None
    ) -> None:
        """A grid line and a tick label (``fmt_num`` of the value by default) at each tick."""
        texts = [fmt_num(t) for t in ys.ticks] if labels is None else labels
        for t, text in zip(ys.ticks, texts, strict=True):
            y = ys(t)
            self.add(f'<line class="grid" x1="{f(left)}" x2="{f(right)}" y1="{f(y)}" y2="{f(y)}"/>')
            self.add(
                f'<text class="tick" x="{f(left - 8)}" y="{f(y + 4)}" text-anchor="end">'
                f"{escape(text)}</text>"
            )

    def axis(self, x1: float, y1: float, x2: float, y2: float) -> None:
        self.add(f'<line class="axis" x1="{f(x1)}" x2="{f(x2)}" y1="{f(y1)}" y2="{f(y2)}"/>')

    def x_tick(self, x: float, y: float, text: str) -> None:
        self.add(
            f'<text class="tick" x="{f(x)}" y="{f(y)}" text-anchor="middle">{escape(text)}</text>'
        )

    def x_title(self, x: float, y: float, text: str) -> None:
        self.add(
            f'<text class="axis-title" x="{f(x)}" y="{f(y)}" text-anchor="middle">'
            f"{escape(text)}</text>"
        )

    def y_title(self, x: float, y: float, text: str) -> None:
        self.add(
            f'<text class="axis-title" transform="translate({f(x)} {f(y)}) rotate(-90)" '
            f'text-anchor="middle">{escape(text)}</text>'
        )

    def title(self, x: float, y: float, text: str) -> None:
        self.add(f'<text class="axis-title" x="{f(x)}" y="{f(y)}">{escape(text)}</text>')

    def line(
        self,
        points: Sequence[tuple[float, float]],
        *,
        color: str | None = None,
        cls: str | None = None,
        dashed: bool = False,
        tip: str | None = None,
    ) -> None:
        """A polyline: a class's style, or ``color`` 2 px wide (``dashed``: a second figure)."""
        coords = " ".join(f"{f(x)},{f(y)}" for x, y in points)
        style = f'class="{cls}"' if cls else f'fill="none" stroke="{color}" stroke-width="2"'
        dash = ' stroke-dasharray="4 3"' if dashed else ""
        head = f'<polyline {style}{dash} points="{coords}"'
        self.add(f"{head}><title>{escape(tip)}</title></polyline>" if tip else f"{head}/>")

    def dot(
        self, x: float, y: float, r: float, color: str, tip: str, cls: str | None = None
    ) -> None:
        klass = f'class="{cls}" ' if cls else ""
        self.add(
            f'<circle {klass}cx="{f(x)}" cy="{f(y)}" r="{r}" fill="{color}">'
            f"<title>{escape(tip)}</title></circle>"
        )

    def key(self, x: float, y: float, color: str, text: str) -> None:
        """A legend entry inside the chart: a short line in ``color`` and its label."""
        self.add(
            f'<line x1="{f(x)}" x2="{f(x + 18)}" y1="{f(y)}" y2="{f(y)}" '
            f'stroke="{color}" stroke-width="2"/>'
            f'<text class="tick" x="{f(x + 22)}" y="{f(y + 4)}">{escape(text)}</text>'
        )

    def render(self) -> str:
        return "\n".join([*self.parts, "</svg>"])
