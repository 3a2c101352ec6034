"""The sweep's three figures in ``sweep.html``, inline SVG by tree budget: decode
throughput, mean acceptance length and time to first token (how to read them: the module
:mod:`.html`, which lays out the page)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from pytest_ddtree.measure.arm import ArmStats
from pytest_ddtree.measure.sweep import (
    Sample,
    SweepRun,
    SweepSummary,
    budget_label,
)
from pytest_ddtree.measure.sweep.bootstrap import ci_name
from pytest_ddtree.report.arm_text import verdict_text
from pytest_ddtree.report.charts import (
    HEIGHT,
    NARROW,
    WIDE,
    Svg,
    XScale,
    YScale,
    empty_chart,
    f,
)


@dataclass(frozen=True)
class _Point:
    budget: int | None
    value: float
    color: str
    tip: str
    offset: float


@dataclass(frozen=True)
class _Mark:
    budget: int | None
    center: float
    ci: tuple[float, float] | None
    box: tuple[float, float] | None
    extra: float | None
    tip: str


@dataclass(frozen=True)
class _Invalid:
    budget: int | None
    label: str
    tip: str
    count: int


def _chart(
    *,
    title: str,
    y_label: str,
    budgets: Sequence[int | None],
    points: Sequence[_Point],
    marks: Sequence[_Mark],
    invalid: Sequence[_Invalid],
    highlight: int | None,
    tied: Sequence[int | None],
    zero: bool,
    width: int,
    empty: str = "no valid request reported this figure",
) -> str:
    """One figure by budget: each request's dot, each budget's mark, the invalid requests
    in a strip under the plot, the recommended and the tied budgets banded."""
    if not points and not marks and not invalid:
        return empty_chart(title, empty)
    left, right, top = 66.0, width - 18.0, 30.0
    strip = 46.0 if invalid else 0.0
    plot_bottom = HEIGHT - 58.0 - strip
    xs = XScale(budgets, left, right)
    values = [p.value for p in points]
    for m in marks:
        values.extend([m.center, *(m.ci or ()), *(m.box or ())])
        if m.extra is not None:
            values.append(m.extra)
    ys = YScale(values, top + 6, plot_bottom, zero=zero)
    svg = Svg(title, width)
    _bands(svg, xs, highlight, tied, top, plot_bottom)
    svg.y_grid(ys, left, right)
    svg.axis(left, plot_bottom, right, plot_bottom)
    svg.y_title(16, (top + plot_bottom) / 2, y_label)
    spaced = sum(1 for b in xs.budgets if b is not None) > 1
    for b in xs.budgets:
        svg.x_tick(xs(b), plot_bottom + strip + 20, budget_label(b))
    svg.x_title(
        (left + right) / 2, HEIGHT - 10, "tree_budget (log2 scale)" if spaced else "tree_budget"
    )
    # Median trend first so dots and marks sit on top of it.
    ordered = sorted(marks, key=lambda m: xs.units[m.budget])
    if len(ordered) > 1:
        svg.line([(xs(m.budget), ys(m.center)) for m in ordered], cls="trend")
    for p in points:
        svg.dot(xs(p.budget, p.offset), ys(p.value), 3.4, p.color, p.tip, cls="pt")
    for m in ordered:
        svg.add(_mark(m, xs(m.budget), ys))
    if invalid:
        _invalid_strip(svg, xs, invalid, left, right, plot_bottom + 10, strip)
    return svg.render()


def _bands(
    svg: Svg,
    xs: XScale,
    highlight: int | None,
    tied: Sequence[int | None],
    top: float,
    bottom: float,
) -> None:
    """The tied budgets' bands, then the recommended one's, behind everything else."""
    hb = xs.half_band()
    for tb in tied:
        if tb in xs.units:
            svg.add(
                f'<rect class="tie-band" x="{f(xs(tb) - hb)}" y="{f(top)}" width="{f(2 * hb)}" '
                f'height="{f(bottom - top)}" rx="6"/>'
                f'<text class="tie-label" x="{f(xs(tb))}" y="{f(top - 8)}" '
                f'text-anchor="middle">tied</text>'
            )
    if highlight in xs.units:
        hx = xs(highlight)
        svg.add(
            f'<rect class="best-band" x="{f(hx - hb)}" y="{f(top)}" width="{f(2 * hb)}" '
            f'height="{f(bottom - top)}" rx="6"/>'
        )
        svg.add(
            f'<text class="best-label" x="{f(hx)}" y="{f(top - 8)}" '
            f'text-anchor="middle">recommended</text>'
        )


def _mark(m: _Mark, x: float, ys: YScale) -> str:
    """A budget's mark: the interquartile box, the confidence interval, the extra
    figure (TTFT p90) and the centre."""
    group = [f'<g class="mark"><title>{escape(m.tip)}</title>']
    if m.box is not None:
        y1, y2 = ys(m.box[1]), ys(m.box[0])
        group.append(
            f'<rect class="iqr" x="{f(x - 9)}" y="{f(y1)}" width="18" '
            f'height="{f(max(y2 - y1, 1.0))}" rx="2"/>'
        )
    if m.ci is not None:
        y1, y2 = ys(m.ci[1]), ys(m.ci[0])
        group.append(
            f'<line class="ci" x1="{f(x)}" x2="{f(x)}" y1="{f(y1)}" y2="{f(y2)}"/>'
            f'<line class="ci" x1="{f(x - 6)}" x2="{f(x + 6)}" y1="{f(y1)}" y2="{f(y1)}"/>'
            f'<line class="ci" x1="{f(x - 6)}" x2="{f(x + 6)}" y1="{f(y2)}" y2="{f(y2)}"/>'
        )
    if m.extra is not None:
        ye = ys(m.extra)
        group.append(
            f'<path class="extra" d="M{f(x - 5)},{f(ye - 5)} L{f(x + 5)},{f(ye - 5)} '
            f'L{f(x)},{f(ye + 3)} Z"/>'
        )
    group.append(f'<circle class="center" cx="{f(x)}" cy="{f(ys(m.center))}" r="5.5"/>')
    group.append("</g>")
    return "".join(group)


def _invalid_strip(
    svg: Svg,
    xs: XScale,
    invalid: Sequence[_Invalid],
    left: float,
    right: float,
    sy: float,
    strip: float,
) -> None:
    """The invalid requests, crossed out with their codes, in a strip under the plot."""
    svg.add(
        f'<rect class="invalid-strip" x="{f(left)}" y="{f(sy - 4)}" '
        f'width="{f(right - left)}" height="{f(strip - 12)}" rx="4"/>'
    )
    svg.add(
        f'<text class="invalid-title" x="{f(left - 8)}" y="{f(sy + 12)}" '
        f'text-anchor="end">invalid</text>'
    )
    cy = sy + 7
    for inv in invalid:
        x = xs(inv.budget)
        count = f" ×{inv.count}" if inv.count > 1 else ""
        svg.add(
            f'<g class="invalid"><title>{escape(inv.tip)}</title>'
            f'<path class="cross" d="M{f(x - 5)},{f(cy - 5)} L{f(x + 5)},{f(cy + 5)} '
            f'M{f(x - 5)},{f(cy + 5)} L{f(x + 5)},{f(cy - 5)}"/>'
            f'<text class="invalid-code" x="{f(x)}" y="{f(cy + 18)}" text-anchor="middle">'
            f"{escape(inv.label + count)}</text></g>"
        )


def _offsets(samples: Sequence[Sample], key: Callable[[Sample], object]) -> list[float]:
    """Deterministic horizontal spread of a budget's dots, in fractions of a column.

    Dots go either side of the centre, never on it, so the median mark and its
    interval stay readable however many dots a budget has.
    """
    n = len(samples)
    order = sorted(range(n), key=lambda i: (str(key(samples[i])), samples[i].round))
    left = (n + 1) // 2
    offsets = [0.0] * n
    for rank, i in enumerate(order):
        side, pos, count = (-1.0, rank, left) if rank < left else (1.0, rank - left, n - left)
        frac = 0.5 if count <= 1 else pos / (count - 1)
        # Left side runs outward-in (-0.36 .. -0.12), right side inward-out.
        offsets[i] = -0.36 + 0.24 * frac if side < 0 else 0.12 + 0.24 * frac
    return offsets


def _by_budget(samples: Sequence[Sample]) -> dict[int | None, list[Sample]]:
    groups: dict[int | None, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.tree_budget, []).append(s)
    return groups


def _tip(s: Sample) -> str:
    parts = [f"tree_budget={budget_label(s.tree_budget)}", f"prompt={s.prompt_id}"]
    parts.append(f"round {s.round}")
    if s.decode_tokens_per_second is not None:
        parts.append(f"decode {s.decode_tokens_per_second:,.0f} tok/s")
    if s.ttft is not None:
        parts.append(f"TTFT {s.ttft * 1000:,.0f} ms")
    if s.mean_acceptance_length is not None:
        parts.append(f"acceptance length {s.mean_acceptance_length:.2f}")
    if s.completion_tokens is not None:
        parts.append(f"{s.completion_tokens} tokens")
    if s.worker:
        parts.append(f"worker {s.worker}")
    return " · ".join(parts)


def _invalid_marks(samples: Sequence[Sample]) -> list[_Invalid]:
    marks: list[_Invalid] = []
    # the budget's own invalid requests (a failure blamed elsewhere leaves its budget alone)
    for budget, group in _by_budget([s for s in samples if s.against_budget]).items():
        codes: list[str] = []
        lines: list[str] = []
        for s in group:
            for c in s.codes:
                if c not in codes:
                    codes.append(c)
            msg = "; ".join(s.messages) or ", ".join(s.codes) or "invalid"
            lines.append(f"prompt={s.prompt_id} round {s.round}: {msg}")
        label = ", ".join(codes[:2]) + ("…" if len(codes) > 2 else "")
        tip = f"tree_budget={budget_label(budget)}: {len(group)} invalid request(s)\n" + "\n".join(
            lines[:12]
        )
        marks.append(_Invalid(budget, label or "invalid", tip, len(group)))
    return marks


def _decode_mark(st: ArmStats) -> _Mark | None:
    """A budget's decode rate: median, IQR and CI."""
    if st.decode_median is None:
        return None
    box = None if st.decode_q1 is None or st.decode_q3 is None else (st.decode_q1, st.decode_q3)
    ci = st.decode_ci
    tip = f"tree_budget={budget_label(st.tree_budget)}: median {st.decode_median:,.0f} tok/s"
    if ci:
        tip += f", {ci_name()} [{ci[0]:,.0f}, {ci[1]:,.0f}]"
    if box:
        tip += f", IQR {box[0]:,.0f}-{box[1]:,.0f}"
    return _Mark(st.tree_budget, st.decode_median, ci, box, None, tip + f" ({verdict_text(st)})")


def _accept_mark(st: ArmStats) -> _Mark | None:
    """A budget's mean acceptance length and its CI."""
    if st.mean_acceptance_length is None:
        return None
    tip = (
        f"tree_budget={budget_label(st.tree_budget)}: mean acceptance length "
        f"{st.mean_acceptance_length:.2f}"
    )
    if st.acceptance_ci:
        tip += f", {ci_name()} [{st.acceptance_ci[0]:.2f}, {st.acceptance_ci[1]:.2f}]"
    if st.mean_decode_rounds is not None:
        tip += f"; {st.mean_decode_rounds:.1f} verify steps per request"
    return _Mark(st.tree_budget, st.mean_acceptance_length, st.acceptance_ci, None, None, tip)


def _ttft_mark(st: ArmStats) -> _Mark | None:
    """A budget's TTFT p50 with its CI and the p90 (ms)."""
    if st.ttft is None:
        return None
    ci = None if st.ttft_ci is None else (st.ttft_ci[0] * 1000, st.ttft_ci[1] * 1000)
    p90 = st.ttft.p90 * 1000
    tip = f"tree_budget={budget_label(st.tree_budget)}: TTFT p50 {st.ttft.p50 * 1000:,.0f} ms"
    tip += f", p90 {p90:,.0f} ms"
    return _Mark(st.tree_budget, st.ttft.p50 * 1000, ci, None, p90, tip)


def _points(
    groups: dict[int | None, list[Sample]],
    value: Callable[[Sample], float | None],
    colors: dict[str, str],
    scale: float = 1.0,
) -> list[_Point]:
    """Each request's dot of one figure (``value`` of the request, times ``scale``)."""
    pts: list[_Point] = []
    for group in groups.values():
        with_value = [s for s in group if value(s) is not None]
        spread = _offsets(with_value, lambda s: s.prompt_id)
        for s, off in zip(with_value, spread, strict=True):
            v = value(s)
            assert v is not None
            pts.append(_Point(s.tree_budget, v * scale, colors[s.prompt_id], _tip(s), off))
    return pts


def budget_charts(run: SweepRun, summary: SweepSummary, colors: dict[str, str]) -> list[str]:
    """The decode throughput, acceptance length and TTFT figures of one sweep."""
    samples = run.samples
    budgets = [b.tree_budget for b in summary.budgets]
    if not budgets:
        return []
    # the drift blocks are not the budget's statistics: the Drift card shows them
    groups = _by_budget([s for s in samples if s.valid and s.drift_mark is None])
    rec = summary.recommendation
    chart = functools.partial(
        _chart,
        budgets=budgets,
        invalid=_invalid_marks(samples),
        highlight=rec.tree_budget,
        tied=rec.tied,
    )

    def marks(fn: Callable[[ArmStats], _Mark | None]) -> list[_Mark]:
        return [m for m in (fn(st) for st in summary.budgets) if m is not None]

    decode_svg = chart(
        title="Decode throughput by tree budget",
        y_label="decode tokens/s (client)",
        points=_points(groups, lambda s: s.decode_tokens_per_second, colors),
        marks=marks(_decode_mark),
        zero=False,
        width=WIDE,
    )
    accept_svg = chart(
        title="Mean acceptance length by tree budget",
        y_label="tokens per decode round",
        points=_points(groups, lambda s: s.mean_acceptance_length, colors),
        marks=marks(_accept_mark),
        zero=True,
        width=NARROW,
        empty="the server reported no acceptance length (no speculation statistics)",
    )
    ttft_svg = chart(
        title="Time to first token by tree budget",
        y_label="TTFT ms",
        points=_points(groups, lambda s: s.ttft, colors, 1000.0),
        marks=marks(_ttft_mark),
        zero=True,
        width=NARROW,
    )
    return [decode_svg, accept_svg, ttft_svg]
