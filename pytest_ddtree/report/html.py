"""``sweep.html``: one self-contained page with the sweep's charts and tables.

The page has no external resource and no script: charts are inline SVG
built here, styles are inline CSS (light and dark), tooltips are SVG
``<title>`` elements. It opens offline, from a CI artifact, or attached to
an e-mail, and looks the same everywhere.

Budgets sit on a log2 axis (the sweep doubles the budget each step). Each
request is a dot coloured by prompt; the median (or mean) of a budget is the
dark mark with its 95% bootstrap interval; invalid requests are drawn apart,
in a red strip under the plot, with their violation codes, because they
measured nothing and must not blend in with the timings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_ddtree.core import __version__
from pytest_ddtree.core.budget import budget_order
from pytest_ddtree.measure.sweep import (
    BudgetStats,
    DiagnosisRecord,
    Sample,
    SweepRun,
    SweepSummary,
    budget_label,
)
from pytest_ddtree.measure.sweep.statistics import speculation_warnings
from pytest_ddtree.measure.sweep.temperature import (
    Summaries,
    heading,
    only_summary,
    sampling_problems,
    summaries_of,
    zero_only,
)
from pytest_ddtree.report._atomic import write_text_atomic
from pytest_ddtree.report.charts import (
    HEIGHT,
    NARROW,
    PALETTE,
    WIDE,
    Svg,
    XScale,
    YScale,
    empty_chart,
    f,
)
from pytest_ddtree.report.counters_html import server_counters_section
from pytest_ddtree.report.depth_chart import depth_section
from pytest_ddtree.report.terminal import acceptance_cell, race_cell, race_lines

if TYPE_CHECKING:
    from pytest_ddtree.measure.load import LoadTestResult


# --------------------------------------------------------------------------- charts


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


def _decode_mark(st: BudgetStats) -> _Mark | None:
    """A budget's decode rate: median, IQR and CI."""
    if st.decode_median is None:
        return None
    box = None if st.decode_q1 is None or st.decode_q3 is None else (st.decode_q1, st.decode_q3)
    ci = st.decode_ci
    tip = f"tree_budget={budget_label(st.tree_budget)}: median {st.decode_median:,.0f} tok/s"
    if ci:
        tip += f", 95% CI [{ci[0]:,.0f}, {ci[1]:,.0f}]"
    if box:
        tip += f", IQR {box[0]:,.0f}-{box[1]:,.0f}"
    return _Mark(st.tree_budget, st.decode_median, ci, box, None, tip + f" ({st.verdict})")


def _accept_mark(st: BudgetStats) -> _Mark | None:
    """A budget's mean acceptance length and its CI."""
    if st.mean_acceptance_length is None:
        return None
    tip = (
        f"tree_budget={budget_label(st.tree_budget)}: mean acceptance length "
        f"{st.mean_acceptance_length:.2f}"
    )
    if st.acceptance_ci:
        tip += f", 95% CI [{st.acceptance_ci[0]:.2f}, {st.acceptance_ci[1]:.2f}]"
    if st.mean_decode_rounds is not None:
        tip += f"; {st.mean_decode_rounds:.1f} verify steps per request"
    return _Mark(st.tree_budget, st.mean_acceptance_length, st.acceptance_ci, None, None, tip)


def _ttft_mark(st: BudgetStats) -> _Mark | None:
    """A budget's TTFT p50 with its CI and the p90 (ms)."""
    if st.ttft_p50 is None:
        return None
    ci = None if st.ttft_ci is None else (st.ttft_ci[0] * 1000, st.ttft_ci[1] * 1000)
    p90 = None if st.ttft_p90 is None else st.ttft_p90 * 1000
    tip = f"tree_budget={budget_label(st.tree_budget)}: TTFT p50 {st.ttft_p50 * 1000:,.0f} ms"
    if p90 is not None:
        tip += f", p90 {p90:,.0f} ms"
    return _Mark(st.tree_budget, st.ttft_p50 * 1000, ci, None, p90, tip)


def _charts(run: SweepRun, summary: SweepSummary, colors: dict[str, str]) -> list[str]:
    samples = run.samples
    budgets = [b.tree_budget for b in summary.budgets]
    if not budgets:
        return []
    best = summary.recommendation.tree_budget
    tied = summary.recommendation.tied
    invalid = _invalid_marks(samples)
    # the drift blocks are not the budget's statistics: the Drift card shows them
    valid = [s for s in samples if s.valid and s.drift_mark is None]
    groups = _by_budget(valid)

    def points(value: Callable[[Sample], float | None], scale: float = 1.0) -> list[_Point]:
        pts: list[_Point] = []
        for group in groups.values():
            with_value = [s for s in group if value(s) is not None]
            spread = _offsets(with_value, lambda s: s.prompt_id)
            for s, off in zip(with_value, spread, strict=True):
                v = value(s)
                assert v is not None
                pts.append(_Point(s.tree_budget, v * scale, colors[s.prompt_id], _tip(s), off))
        return pts

    def marks(fn: Callable[[BudgetStats], _Mark | None]) -> list[_Mark]:
        return [m for m in (fn(st) for st in summary.budgets) if m is not None]

    decode_svg = _chart(
        title="Decode throughput by tree budget",
        y_label="decode tokens/s (client)",
        budgets=budgets,
        points=points(lambda s: s.decode_tokens_per_second),
        marks=marks(_decode_mark),
        invalid=invalid,
        highlight=best,
        tied=tied,
        zero=False,
        width=WIDE,
    )
    accept_svg = _chart(
        title="Mean acceptance length by tree budget",
        y_label="tokens per decode round",
        budgets=budgets,
        points=points(lambda s: s.mean_acceptance_length),
        marks=marks(_accept_mark),
        invalid=invalid,
        highlight=best,
        tied=tied,
        zero=True,
        width=NARROW,
        empty="the server reported no acceptance length (no speculation statistics)",
    )
    ttft_svg = _chart(
        title="Time to first token by tree budget",
        y_label="TTFT ms",
        budgets=budgets,
        points=points(lambda s: s.ttft, 1000.0),
        marks=marks(_ttft_mark),
        invalid=invalid,
        highlight=best,
        tied=tied,
        zero=True,
        width=NARROW,
    )
    return [decode_svg, accept_svg, ttft_svg]


# --------------------------------------------------------------------------- page


def _legend(colors: dict[str, str]) -> str:
    items = [
        f'<span class="lg"><svg width="12" height="12"><circle cx="6" cy="6" r="4" '
        f'fill="{c}"/></svg>{escape(p)}</span>'
        for p, c in colors.items()
    ]
    glyphs = (
        '<span class="lg"><svg width="14" height="14"><circle class="center" cx="7" cy="7" '
        'r="5"/></svg>median (acceptance: mean)</span>'
        '<span class="lg"><svg width="14" height="14"><line class="ci" x1="7" x2="7" y1="1" '
        'y2="13"/></svg>95% bootstrap CI</span>'
        '<span class="lg"><svg width="14" height="14"><rect class="iqr" x="2" y="3" width="10" '
        'height="8"/></svg>interquartile range</span>'
        '<span class="lg"><svg width="14" height="14"><path class="extra" d="M2,3 L12,3 L7,11 Z"/>'
        "</svg>TTFT p90</span>"
        '<span class="lg"><svg width="14" height="14"><path class="cross" d="M2,2 L12,12 M2,12 '
        'L12,2"/></svg>invalid request (not timed)</span>'
    )
    return (
        f'<div class="legend"><span class="lg-title">prompts</span>{"".join(items)}</div>'
        f'<div class="legend">{glyphs}</div>'
    )


def _stats_table(summary: SweepSummary) -> str:
    rows: list[str] = []
    for st in summary.budgets:
        decode = "-" if st.decode_median is None else f"{st.decode_median:,.0f}"
        ci = "" if st.decode_ci is None else f"[{st.decode_ci[0]:,.0f}, {st.decode_ci[1]:,.0f}]"
        ci += f" <small>n={len(st.decode)}</small>"
        iqr = "" if st.decode_iqr is None else f"{st.decode_iqr:,.0f}"
        ttft = "-" if st.ttft_p50 is None else f"{st.ttft_p50 * 1000:,.0f}"
        ttft90 = "-" if st.ttft_p90 is None else f"{st.ttft_p90 * 1000:,.0f}"
        acc = acceptance_cell(st)
        rounds = "-" if st.mean_decode_rounds is None else f"{st.mean_decode_rounds:.1f}"
        ratio = "-" if st.server_client_ratio is None else f"{st.server_client_ratio:.2f}"
        kind = st.verdict.split(" ")[0].lower().strip("()")
        cls = {
            "best": "best",
            "tied": "tied",
            "as": "tied",
            "leads": "tied",
            "invalid": "bad",
            "slower": "slow",
        }.get(kind, "none")
        row_cls = ' class="row-bad"' if not st.all_valid else ""
        rows.append(
            f"<tr{row_cls}><td>{escape(budget_label(st.tree_budget))}</td>"
            f"<td>{st.valid}/{st.total}</td><td><b>{decode}</b></td>"
            f'<td class="nowrap">{ci}</td><td>{iqr}</td>'
            f'<td class="nowrap">{ttft} / {ttft90}</td><td>{acc}</td><td>{rounds}</td>'
            f"<td>{ratio}</td>"
            f'<td class="nowrap">{escape(race_cell(st, summary.race))}</td>'
            f'<td class="nowrap"><span class="pill {cls}">{escape(st.verdict)}</span></td></tr>'
        )
    # an interval, a slowdown or a verdict is read as one: never broken over two lines (the
    # table scrolls sideways in a narrow window instead)
    return (
        '<div class="table-scroll"><table class="stats"><thead><tr><th>tree_budget</th>'
        "<th>valid</th><th>decode tok/s<br><small>median</small></th><th>95% CI</th>"
        "<th>IQR</th><th>TTFT ms<br><small>p50 / p90</small></th>"
        "<th>acceptance<br><small>length (or rate)</small></th>"
        "<th>verify<br><small>steps</small></th><th>server/client<br><small>tok/s</small></th>"
        "<th>slower than leader<br><small>[interval] n</small></th>"
        f"<th>verdict</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def _race_section(summary: SweepSummary) -> str:
    """The rule, and for an adaptive sweep who left the race when and why."""
    race = summary.race
    if race is None:
        return ""
    rule = race.judgement.rule
    items = "".join(f"<li>{escape(line.removeprefix('race: '))}</li>" for line in race_lines(race))
    how = (
        f"An adaptive sweep: every budget got {rule.min_n} requests at least, then a round "
        "at a time only the budgets still in contention got more."
        if race.mode == "adaptive"
        else "An exhaustive sweep: every budget got every round, judged once."
    )
    return (
        '<section class="card"><h2>Race</h2>'
        f"<p>{escape(how)} Margin {rule.equivalence:.0%}: a budget whose whole interval of "
        "the slowdown against the leader lies within it is as fast, and the smallest of "
        "those is recommended; a budget clearly slower by more than the margin leaves; "
        f"no claim below n={rule.min_n}. {rule.confidence:.0%} confidence over all "
        f"looks.</p><ul>{items}</ul></section>"
    )


def _drift_section(summary: SweepSummary) -> str:
    """The drift check: the first budget measured again at the end ("" without one)."""
    if not summary.drift:
        return ""
    danger = " danger" if any(c.drifting for c in summary.drift) else ""
    items = "".join(f"<li>{escape(c.line())}</li>" for c in summary.drift)
    return (
        f'<section class="card{danger}"><h2>Drift</h2><ul>{items}</ul>'
        '<p class="muted">The first budget of the sweep is measured in a block right after '
        "the warm-up and in the same block again after the last round; each request of the "
        "end block is paired with the same prompt's request in the start block. The sweep is "
        "drifting when the 99% bootstrap interval of the median end/start ratio of decode "
        "tokens/s excludes 1 and that ratio is more than 5% away from 1; the blocks are "
        "not counted in the budget's statistics.</p></section>"
    )


def _machine_section(run: SweepRun) -> str:
    """The ``--ddtree-probe`` output before and after, and the server's own description."""
    meta = run.metadata
    parts: list[str] = []
    for probe in meta.probes:
        when = escape(str(probe.get("when", "")))
        problem = probe.get("problem")
        note = f' <span class="pill bad">{escape(str(problem))}</span>' if problem else ""
        parts.append(
            f"<h3>{when} the session: <code>{escape(str(probe.get('command', '')))}</code>"
            f"{note}</h3><pre>{escape(str(probe.get('output', '')))}</pre>"
        )
    for path, answer in (meta.server_info or {}).items():
        text = json.dumps(answer, indent=2, sort_keys=True)
        parts.append(f"<h3>server <code>{escape(path)}</code></h3><pre>{escape(text)}</pre>")
    if not parts:
        return ""
    return (
        '<section class="card"><h2>Machine state</h2><p class="muted">What --ddtree-probe '
        "printed before and after the session, and what the server says about itself "
        f"(keys masked).</p>{''.join(parts)}</section>"
    )


def _invalid_table(samples: Sequence[Sample]) -> str:
    bad = [s for s in samples if not s.valid]
    if not bad:
        return ""
    rows = []
    for s in bad[:200]:
        codes = "".join(f'<span class="code">{escape(c)}</span>' for c in s.codes)
        msgs = "<br>".join(escape(m) for m in s.messages) or "&nbsp;"
        rows.append(
            f"<tr><td>{escape(budget_label(s.tree_budget))}</td><td>{escape(s.prompt_id)}</td>"
            f"<td>{s.round + 1 if s.round >= 0 else 'before timing'}</td><td>{codes}</td>"
            f"<td class='msg'>{msgs}</td></tr>"
        )
    more = f"<p class='muted'>… and {len(bad) - 200} more.</p>" if len(bad) > 200 else ""
    return (
        '<section class="card danger"><h2>Invalid requests</h2>'
        "<p>These responses broke output-quality invariants. Nothing they measured was "
        "timed or used in the statistics above.</p>"
        '<table class="stats invalid-table"><thead><tr><th>tree_budget</th><th>prompt</th>'
        f"<th>round</th><th>codes</th><th>message</th></tr></thead><tbody>{''.join(rows)}"
        f"</tbody></table>{more}</section>"
    )


def _diagnoses(diagnoses: Sequence[DiagnosisRecord]) -> str:
    if not diagnoses:
        return ""
    rows = []
    for d in diagnoses[:200]:
        verdict = d.verdict or "undetermined"
        cls = {"template": "tmpl", "speculation": "spec"}.get(verdict, "none")
        codes = "".join(f'<span class="code">{escape(c)}</span>' for c in d.codes)
        title = escape(d.title or verdict)
        detail = " ".join(escape(text) for text in (d.reason, d.advice) if text)
        budget = "-" if d.tree_budget is None else budget_label(d.tree_budget)
        rows.append(
            f"<tr><td>{escape(d.nodeid)}</td><td>{escape(budget)}</td>"
            f"<td>{codes}</td><td><span class='pill {cls}'>{title}</span></td>"
            f"<td class='msg'>{detail}</td></tr>"
        )
    return (
        '<section class="card"><h2>Diagnosis</h2><p class="muted">Each failing request was '
        "replayed on the target-only baseline: a baseline that fails the same way points at the "
        "prompt, chat template or model; at temperature 0, a baseline that passes points at "
        "speculative decoding, unless the answer left the baseline's at a numerical near-tie "
        "(the margin is in the reason). A sampled answer's replay is not evidence.</p>"
        '<table class="stats invalid-table"><thead><tr><th>test</th><th>tree_budget</th>'
        "<th>codes</th><th>layer at fault</th><th>why, and what to do</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


def _meta_value(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items())
    return str(v)


def _counts_table(counts: Mapping[str, Any]) -> str:
    """``{client: {counter: n}}`` (the transport counts) as a table, one row per client."""
    columns = list(dict.fromkeys(k for row in counts.values() for k in row))
    head = "".join(f"<th>{escape(c.replace('_', ' '))}</th>" for c in columns)
    rows = "".join(
        f"<tr><td>{escape(str(name))}</td>"
        + "".join(f"<td>{escape(str(row.get(c, '-')))}</td>" for c in columns)
        + "</tr>"
        for name, row in counts.items()
    )
    return (
        f'<table class="stats"><thead><tr><th>client</th>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )


def _metadata(run: SweepRun) -> str:
    meta = run.metadata.to_json()
    meta.setdefault("seed", run.seed)
    meta["requests"] = f"{len(run.samples)} ({sum(s.valid for s in run.samples)} valid)"
    rows = []
    for k, v in meta.items():
        if v in (None, "", [], {}) or k in ("notes", "probes", "server_info", "server_counters"):
            continue
        if isinstance(v, Mapping) and v and all(isinstance(x, Mapping) for x in v.values()):
            value = _counts_table(v)  # a table per client, not a Python dict
        else:
            value = escape(_meta_value(v))
        rows.append(f"<dt>{escape(str(k))}</dt><dd>{value}</dd>")
    return f'<dl class="meta">{"".join(rows)}</dl>'


def card_state(summary: SweepSummary) -> tuple[str, str]:
    """The recommendation card's class and badge: decided, equivalent within the margin,
    one budget, undecided, partial run, server drifted, or no recommendation."""
    rec = summary.recommendation
    if rec.budget_ignored:
        return "none", "budget ignored"
    if rec.decode_median is None:
        return "none", "no recommendation"
    if rec.drifting:
        return "drifting", "server drifted"
    if not rec.decided:
        return ("tied", "either one") if rec.either else ("tied", "undecided")
    if rec.partial:
        return "tied", "partial run"
    if rec.tied:
        return "decisive", f"equivalent within {rec.equivalence:.0%}"
    if sum(1 for st in summary.budgets if st.decode_median is not None) == 1:
        return "decisive", "one budget"
    return "decisive", "decided"


def _cards(run: SweepRun, summary: SweepSummary) -> str:
    rec = summary.recommendation
    rec_cls, badge = card_state(summary)
    if rec.budget_ignored:
        big, sub = "—", "the server does not use the tree budget (budget-ignored)"
    elif rec.decode_median is None:
        big, sub = "—", "no valid timings" if run.samples else "nothing was timed"
    elif rec.either:
        # no single winner, but the answer is known: the budgets that cannot be told apart
        big = escape(" or ".join(budget_label(b) for b in sorted(rec.either, key=budget_order)))
        sub = f"either one; tree_budget {budget_label(rec.leader)} led (n={rec.n})"
    elif not rec.decided:
        # no forced winner: the leader is named as such, with its n
        big = "—"
        sub = f"undecided; tree_budget {budget_label(rec.leader)} leads (n={rec.n})"
    else:
        big = escape(budget_label(rec.tree_budget))
        sub = f"{rec.decode_median:,.0f} tok/s median decode"
        if rec.decode_ci:
            sub += f" (95% CI [{rec.decode_ci[0]:,.0f}, {rec.decode_ci[1]:,.0f}], n={rec.n})"
    total = len(run.samples)
    n_valid = sum(s.valid for s in run.samples)
    bad_budgets = [st for st in summary.budgets if not st.all_valid]
    valid_sub = (
        "nothing was timed"
        if not total
        else "every timed request passed the invariants"
        if not bad_budgets
        else "invalid at tree_budget " + ", ".join(budget_label(b.tree_budget) for b in bad_budgets)
    )
    acc = [st for st in summary.budgets if st.mean_acceptance_length is not None]
    if acc:
        top = max(acc, key=lambda st: st.mean_acceptance_length or 0.0)
        acc_big = f"{top.mean_acceptance_length:.2f}"
        # budgets equal at the shown precision are named together: a tie is a tie
        tied = [st for st in acc if f"{st.mean_acceptance_length:.2f}" == acc_big]
        where = " and ".join(budget_label(st.tree_budget) for st in tied)
        acc_sub = (
            f"at tree_budget {where}{' (tied)' if len(tied) > 1 else ''} (tokens per decode round)"
        )
    else:
        acc_big = "—"
        acc_sub = (
            "the server reports no speculation statistics"
            if any(st.valid for st in summary.budgets)
            else "no valid request to take it from"
        )
    tests = run.metadata.tests or {}
    failed = int(tests.get("failed", 0))
    if failed:
        # the card counts what the terminal counts: a failing test is never hidden by the
        # timed requests that passed
        ran = failed + int(tests.get("passed", 0))
        valid_sub += f"; {failed} of {ran} tests failed (see Diagnosis and the run's output)"
    valid_cls = "good" if not bad_budgets and total and not failed else "bad"
    return (
        '<section class="cards">'
        f'<div class="card rec {rec_cls}"><div class="label">Recommended tree_budget '
        f'<span class="badge">{badge}</span></div><div class="big">{big}</div>'
        f'<div class="sub">{escape(sub)}</div><p class="rec-msg">{escape(rec.message)}</p></div>'
        f'<div class="card {valid_cls}"><div class="label">Valid requests</div>'
        f'<div class="big">{n_valid}<span class="of">/{total}</span></div>'
        f'<div class="sub">{escape(valid_sub)}</div></div>'
        f'<div class="card"><div class="label">Highest mean acceptance length</div>'
        f'<div class="big">{acc_big}</div><div class="sub">{escape(acc_sub)}</div></div>'
        "</section>"
    )


_CSS = """
:root{--bg:#f6f7fb;--card:#fff;--ink:#1d2433;--muted:#667085;--line:#e4e7ee;--grid:#edf0f5;
--accent:#3b5bdb;--good:#2b8a3e;--bad:#d6336c;--bad-bg:#fff0f4;--best:#e6f7ee;--tie:#fff6dd;
--shadow:0 1px 2px rgba(16,24,40,.06),0 4px 16px rgba(16,24,40,.06)}
@media (prefers-color-scheme:dark){:root{--bg:#10131a;--card:#171b24;--ink:#e6e9f0;
--muted:#98a2b3;--line:#2a3040;--grid:#222836;--accent:#7c9cff;--good:#51cf66;--bad:#ff6b9a;
--bad-bg:#2a1620;--best:#15301f;--tie:#2e2a17;--shadow:none}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);
font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1180px;margin:0 auto;padding:28px 20px 48px}
header .eyebrow{color:var(--accent);font-weight:600;letter-spacing:.06em;text-transform:uppercase;
font-size:12px}
h1{margin:4px 0 2px;font-size:28px}
h2{margin:0 0 10px;font-size:17px}
.muted,.sub,.meta-line{color:var(--muted)}
.meta-line{font-size:13px;margin-bottom:18px;word-break:break-all}
.cards{display:grid;grid-template-columns:2fr 1fr 1fr;gap:16px;margin-bottom:16px}
@media (max-width:820px){.cards,.pair{grid-template-columns:1fr!important}}
.card{background:var(--card);border:1px solid var(--line);border-radius:14px;padding:16px 18px;
box-shadow:var(--shadow);margin-bottom:16px}
.cards .card{margin-bottom:0}
.card .label{font-size:12px;color:var(--muted);text-transform:uppercase;letter-spacing:.05em;
font-weight:600}
.card .big{font-size:40px;font-weight:700;line-height:1.15;margin:4px 0}
.card .big .of{font-size:22px;color:var(--muted);font-weight:500}
.card.rec.decisive{background:linear-gradient(135deg,var(--best),var(--card) 70%)}
.card.rec.tied{background:linear-gradient(135deg,var(--tie),var(--card) 70%)}
.card.rec.drifting{background:linear-gradient(135deg,var(--bad-bg),var(--card) 70%)}
.card.good .big{color:var(--good)}
.card.bad .big{color:var(--bad)}
.card.danger{border-color:var(--bad);background:var(--bad-bg)}
.rec-msg{font-size:13px;margin:8px 0 0}
.badge{display:inline-block;margin-left:6px;padding:1px 8px;border-radius:999px;font-size:11px;
background:var(--line);color:var(--ink);text-transform:none;letter-spacing:0}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:16px}
.pair .card{margin-bottom:16px}
svg.chart{max-width:100%;height:auto;display:block;margin:0 auto;font-family:inherit}
.chart-empty{border:1px dashed var(--line);border-radius:10px;padding:28px 18px;
color:var(--muted);text-align:center;font-size:13px}
svg .grid{stroke:var(--grid);stroke-width:1}
svg .axis{stroke:var(--muted);stroke-width:1}
svg .tick{fill:var(--muted);font-size:11px}
svg .axis-title{fill:var(--muted);font-size:12px}
svg .trend{fill:none;stroke:var(--ink);stroke-opacity:.35;stroke-width:2;stroke-dasharray:4 4}
svg .pt{fill-opacity:.72;stroke:var(--card);stroke-width:.8}
svg .iqr,.legend .iqr{fill:var(--accent);fill-opacity:.14;stroke:var(--accent);stroke-opacity:.5}
svg .ci,.legend .ci{stroke:var(--ink);stroke-width:2.2;stroke-linecap:round}
svg .center,.legend .center{fill:var(--ink);stroke:var(--card);stroke-width:1.5}
svg .extra,.legend .extra{fill:var(--muted)}
svg .best-band{fill:var(--good);fill-opacity:.10}
svg .best-label{fill:var(--good);font-size:11px;font-weight:600}
svg .tie-band{fill:#e8a33d;fill-opacity:.09}
svg .tie-label{fill:#c27c0e;font-size:11px}
svg .invalid-strip{fill:var(--bad);fill-opacity:.07}
svg .invalid-title{fill:var(--bad);font-size:11px;font-weight:600}
svg .cross,.legend .cross{stroke:var(--bad);stroke-width:2.4;stroke-linecap:round;fill:none}
svg .invalid-code{fill:var(--bad);font-size:10px}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;font-size:12px;color:var(--muted);
margin-top:6px;align-items:center}
.legend .lg{display:inline-flex;gap:5px;align-items:center}
.lg-title{font-weight:600}
table.stats{width:100%;border-collapse:collapse;font-size:13px;font-variant-numeric:tabular-nums}
table.stats th{text-align:right;color:var(--muted);font-weight:600;padding:6px 6px;
border-bottom:2px solid var(--line);vertical-align:bottom}
table.stats td{text-align:right;padding:6px 6px;border-bottom:1px solid var(--line)}
table.stats th:first-child,table.stats td:first-child{text-align:left}
table.stats th:last-child,table.stats td:last-child{text-align:left}
.table-scroll{overflow-x:auto}
table.stats td.nowrap{white-space:nowrap}
table.load-points th,table.load-points td{padding:5px 5px;white-space:nowrap}
table.load-points td:nth-child(2),table.load-points td:nth-child(3){white-space:normal}
ul.notes{font-size:12px;color:var(--muted);margin:8px 0 0;padding-left:0;list-style:none}
table.invalid-table td,table.invalid-table th{text-align:left}
td.msg{font-size:12px}
tr.row-bad td{background:var(--bad-bg)}
.pill{display:inline-block;padding:1px 9px;border-radius:999px;font-size:12px;
background:var(--line)}
.pill.best{background:var(--good);color:#fff}
.pill.tied{background:var(--tie);color:var(--ink);border:1px solid var(--line)}
.pill.bad{background:var(--bad);color:#fff}
.pill.tmpl{background:#e8a33d;color:#1d2433}
.pill.spec{background:#7048e8;color:#fff}
.code{display:inline-block;margin:0 4px 2px 0;padding:0 7px;border-radius:6px;font-size:12px;
font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:var(--bad);color:#fff}
.notice{border-left:4px solid var(--accent);padding:8px 12px;background:var(--card);
border-radius:6px;margin-bottom:16px;font-size:13px}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:4px 18px;margin:0;font-size:13px}
dl.meta dt{color:var(--muted)}
dl.meta dd{margin:0;word-break:break-all}
footer{color:var(--muted);font-size:12px;margin-top:24px}
h2.temperature{margin:28px 0 12px;font-size:20px;border-bottom:1px solid var(--line)}
pre{font-size:12px;overflow-x:auto;background:var(--bg);padding:8px;border-radius:6px}
"""


def render_html(
    run: SweepRun,
    summaries: Summaries | None = None,
    *,
    load: Sequence[LoadTestResult] = (),
) -> str:
    """The complete ``sweep.html`` document as a string (one card per load test in ``load``;
    one set of cards, charts and tables per temperature in ``summaries`` above 0, computed
    if not given; a single summary for a run at temperature 0)."""
    summaries = summaries_of(run.samples, summaries, seed=run.seed)
    load_cards = ""
    if load:
        from pytest_ddtree.report.load_html import render_load_section

        load_cards = render_load_section(load)
    meta = run.metadata
    prompts = sorted({s.prompt_id for s in run.samples})
    colors = {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(prompts)}
    model = meta.model or "unknown model"
    endpoint = meta.endpoint or ""
    dialect = meta.dialect or ""
    created = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    line = " · ".join(
        x
        for x in (
            endpoint,
            f"dialect {dialect}" if dialect else "",
            f"{len(run.samples)} requests",
            created,
        )
        if x
    )
    notices: list[str] = []
    if any(s.concurrent for s in run.samples):
        notices.append(
            "Timings were taken concurrently (several pytest-xdist workers sending requests "
            "at once). Compare budgets within this run only; for absolute figures run serially."
        )
    notices.extend(meta.notes)
    # each temperature's budgets warn once, in the order of the temperatures
    notices.extend(
        dict.fromkeys(w for s in summaries.values() for w in speculation_warnings(s.budgets))
    )
    if load_cards and not run.samples:  # load tests only: no empty sweep sections
        return _page(
            model,
            [
                '<header><div class="eyebrow">pytest-ddtree · load</div>',
                f"<h1>{escape(model)}</h1>",
                f'<div class="meta-line">{escape(endpoint)}</div></header>',
                *(f'<div class="notice">{escape(n)}</div>' for n in notices),
                load_cards,
                server_counters_section(meta.extra.get("server_counters")),
                f'<section class="card"><h2>Run</h2>{_metadata(run)}</section>',
            ],
        )
    body: list[str] = [
        '<header><div class="eyebrow">pytest-ddtree · tree-budget sweep</div>',
        f"<h1>{escape(model)}</h1>",
        f'<div class="meta-line">{escape(line)}</div></header>',
    ]
    if zero_only(summaries):
        summary = only_summary(summaries, seed=run.seed)
        body.append(_cards(run, summary))
        body.extend(f'<div class="notice">{escape(n)}</div>' for n in notices)
        body.extend(_sweep_sections(run, summary, _charts(run, summary, colors), colors))
    else:
        body.extend(f'<div class="notice">{escape(n)}</div>' for n in notices)
        for t, part in summaries.items():
            sub = replace(run, samples=[x for x in run.samples if x.temperature == t])
            body.append(f'<h2 class="temperature">Sampling {escape(heading(t))}</h2>')
            body.append(_cards(sub, part))
            body.extend(
                f'<div class="notice">{escape(p)}</div>' for p in sampling_problems(sub.samples)
            )
            body.extend(_sweep_sections(sub, part, _charts(sub, part, colors), colors))
    body.append(_invalid_table(run.samples))
    body.append(server_counters_section(meta.extra.get("server_counters")))
    body.append(_diagnoses(run.diagnoses))
    body.append(load_cards)
    body.append(_machine_section(run))
    body.append(f'<section class="card"><h2>Run</h2>{_metadata(run)}</section>')
    return _page(model, body)


def _sweep_sections(
    run: SweepRun, summary: SweepSummary, charts: list[str], colors: dict[str, str]
) -> list[str]:
    """The charts, the per-budget table and the drift check of one temperature's sweep."""
    body: list[str] = []
    if charts:
        body.append(
            '<section class="card"><h2>Decode throughput</h2>'
            '<p class="muted">Client-measured decode tokens/s of every valid request '
            "(tokens after the first over the time after the first), by tree budget.</p>"
            f"{charts[0]}{_legend(colors)}</section>"
        )
        body.append(
            '<div class="pair"><section class="card"><h2>Acceptance length</h2>'
            '<p class="muted">Tokens committed per decode round (bonus token included). '
            "It keeps rising with the budget while throughput peaks: bigger trees cost "
            f"more to verify.</p>{charts[1]}</section>"
            '<section class="card"><h2>Time to first token</h2>'
            '<p class="muted">Median with 95% CI; the triangle is p90.</p>'
            f"{charts[2]}</section></div>"
        )
    body.append(depth_section(summary))
    body.append(f'<section class="card"><h2>Per-budget statistics</h2>{_stats_table(summary)}')
    body.append(
        '<p class="muted">Statistics use valid requests only. A budget with any invalid '
        "request is never recommended. Budgets are compared by measured throughput, by the "
        "rule of the Race card; acceptance rate is not used because it falls arithmetically "
        "as the budget grows.</p></section>"
    )
    body.append(_race_section(summary))
    body.append(_drift_section(summary))
    return body


def _page(model: str, body: list[str]) -> str:
    footer = (
        f"<footer>Generated by pytest-ddtree {escape(__version__)}. Raw samples: "
        "sweep.json (schema_version 1). Hover a point for its request.</footer>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>DDTree sweep · {escape(model)}</title><style>{_CSS}</style></head>"
        f"<body><main>{''.join(body)}{footer}</main></body></html>\n"
    )


def write_sweep_html(
    run: SweepRun,
    path: str | os.PathLike[str],
    summaries: Summaries | None = None,
    *,
    load: Sequence[LoadTestResult] = (),
) -> Path:
    """Write ``sweep.html`` atomically."""
    return write_text_atomic(path, render_html(run, summaries, load=load))
