"""The acceptance-by-depth section of ``sweep.html``: one line per budget of the
conditional acceptance at each draft depth, the figures beside it, and whether
deeper trees are still accepted at the largest budget."""

from __future__ import annotations

from html import escape

from pytest_ddtree.sweep import BudgetStats, SweepSummary, budget_label, deeper_line
from pytest_ddtree.sweep.depth import DepthProfile

_PALETTE = ("#3b5bdb", "#2b8a3e", "#e8590c", "#ae3ec9", "#1098ad", "#d6336c", "#5c940d", "#868e96")
_W, _H = 560.0, 300.0
_LEFT, _RIGHT, _TOP, _BOTTOM = 56.0, 540.0, 24.0, 250.0


def _profiles(summary: SweepSummary) -> list[tuple[BudgetStats, DepthProfile]]:
    return [(st, st.depth) for st in summary.budgets if st.depth is not None]


def _chart(profiles: list[tuple[BudgetStats, DepthProfile]]) -> str:
    if not any(p.conditional for _, p in profiles):
        return (
            '<div class="chart-empty" role="note"><strong>Conditional acceptance by draft '
            "depth</strong>: nothing to draw - no decode round reached a draft depth.</div>"
        )
    depth = max(len(p.conditional) for _, p in profiles) or 1
    span = max(depth - 1, 1)

    def x(d: int) -> float:
        return _LEFT + (d - 1) / span * (_RIGHT - _LEFT)

    def y(v: float) -> float:
        return _BOTTOM - v * (_BOTTOM - _TOP)

    out = [
        f'<svg class="chart depth" width="{_W:.0f}" height="{_H:.0f}" '
        f'viewBox="0 0 {_W:.0f} {_H:.0f}" role="img" '
        'aria-label="Conditional acceptance by draft depth" '
        'xmlns="http://www.w3.org/2000/svg">'
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        out.append(
            f'<line class="grid" x1="{_LEFT}" x2="{_RIGHT}" y1="{y(tick):.1f}" y2="{y(tick):.1f}"/>'
            f'<text class="tick" x="{_LEFT - 6}" y="{y(tick) + 4:.1f}" '
            f'text-anchor="end">{tick:.0%}</text>'
        )
    for d in range(1, depth + 1):
        out.append(
            f'<text class="tick" x="{x(d):.1f}" y="{_BOTTOM + 16}" text-anchor="middle">{d}</text>'
        )
    out.append(
        f'<text class="axis-title" x="{(_LEFT + _RIGHT) / 2:.0f}" y="{_BOTTOM + 38}" '
        'text-anchor="middle">draft depth</text>'
    )
    for i, (st, p) in enumerate(profiles):
        color = _PALETTE[i % len(_PALETTE)]
        pts = [(x(d), y(v)) for d, v in enumerate(p.conditional, start=1)]
        label = escape(budget_label(st.tree_budget))
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
        out.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}">'
            f"<title>tree_budget={label}</title></polyline>"
        )
        for d, ((px, py), v) in enumerate(zip(pts, p.conditional, strict=True), start=1):
            tip = (
                f"tree_budget={label}, depth {d}: {v:.0%} of the {p.reaching[d - 1]:,} rounds "
                f"accepted to depth {d - 1} were accepted at depth {d}"
            )
            out.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{color}">'
                f"<title>{escape(tip)}</title></circle>"
            )
    out.append("</svg>")
    return "".join(out)


def _table(profiles: list[tuple[BudgetStats, DepthProfile]]) -> str:
    depth = max(len(p.conditional) for _, p in profiles)
    head = "".join(f"<th>d{d}</th>" for d in range(1, depth + 1))
    rows = []
    for i, (st, p) in enumerate(profiles):
        color = _PALETTE[i % len(_PALETTE)]
        cells = "".join(f"<td>{v:.0%}</td>" for v in p.conditional)
        cells += "<td></td>" * (depth - len(p.conditional))
        mean = "-" if p.mean_accepted_length is None else f"{p.mean_accepted_length:.2f}"
        rows.append(
            f'<tr><td><span style="color:{color}">●</span> '
            f"{escape(budget_label(st.tree_budget))}</td><td>{mean}</td>"
            f"<td>{p.rounds:,}</td>{cells}</tr>"
        )
    return (
        '<table class="depth-table"><thead><tr><th>tree_budget</th><th>mean accepted length</th>'
        f"<th>rounds</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def depth_section(summary: SweepSummary) -> str:
    """The section, or an empty string when no budget has a server histogram."""
    profiles = _profiles(summary)
    if not profiles:
        return ""
    line = deeper_line([(st.tree_budget, p) for st, p in profiles]) or ""
    sources = sorted({s for _, p in profiles for s in p.sources})
    return (
        '<section class="card"><h2>Acceptance by depth</h2>'
        '<p class="muted">Of the decode rounds whose draft was accepted up to depth d-1, '
        "the share accepted at depth d too, pooled over each budget's valid requests; "
        f"from the server's {escape(', '.join(sources))}.</p>"
        f"{_chart(profiles)}{_table(profiles)}"
        f'<p class="depth-verdict">{escape(line)}</p></section>'
    )
