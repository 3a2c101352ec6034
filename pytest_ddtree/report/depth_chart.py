"""The acceptance-by-depth section of ``sweep.html``: one line per budget of the
conditional acceptance at each draft depth, the figures beside it, and whether
deeper trees are still accepted at the largest budget."""

from __future__ import annotations

from html import escape

from pytest_ddtree.measure.arm import ArmStats
from pytest_ddtree.measure.sweep import SweepSummary, budget_label
from pytest_ddtree.measure.sweep.depth import DepthProfile
from pytest_ddtree.report.charts import HEIGHT, NARROW, PALETTE, Svg, YScale, empty_chart
from pytest_ddtree.report.depth_text import deeper_line

_TITLE = "Conditional acceptance by draft depth"
_TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)


def _profiles(summary: SweepSummary) -> list[tuple[ArmStats, DepthProfile]]:
    return [(st, st.depth) for st in summary.budgets if st.depth is not None]


def _chart(profiles: list[tuple[ArmStats, DepthProfile]]) -> str:
    if not any(p.conditional for _, p in profiles):
        return empty_chart(_TITLE, "no decode round reached a draft depth")
    depth = max(len(p.conditional) for _, p in profiles) or 1
    span = max(depth - 1, 1)
    left, right, top, bottom = 66.0, NARROW - 18.0, 30.0, HEIGHT - 58.0

    def x(d: int) -> float:
        return left + (d - 1) / span * (right - left)

    svg = Svg(_TITLE, NARROW, kind="depth")
    ys = YScale([], top, bottom, zero=True, ticks=_TICKS)
    svg.y_grid(ys, left, right, [f"{tick:.0%}" for tick in _TICKS])
    for d in range(1, depth + 1):
        svg.x_tick(x(d), bottom + 20, str(d))
    svg.x_title((left + right) / 2, HEIGHT - 10, "draft depth")
    for i, (st, p) in enumerate(profiles):
        color = PALETTE[i % len(PALETTE)]
        pts = [(x(d), ys(v)) for d, v in enumerate(p.conditional, start=1)]
        label = budget_label(st.tree_budget)
        svg.line(pts, color=color, tip=f"tree_budget={label}")
        for d, ((px, py), v) in enumerate(zip(pts, p.conditional, strict=True), start=1):
            tip = (
                f"tree_budget={label}, depth {d}: {v:.0%} of the {p.reaching[d - 1]:,} rounds "
                f"accepted to depth {d - 1} were accepted at depth {d}"
            )
            svg.dot(px, py, 3.5, color, tip)
    return svg.render()


def _table(profiles: list[tuple[ArmStats, DepthProfile]]) -> str:
    depth = max(len(p.conditional) for _, p in profiles)
    head = "".join(f"<th>d{d}</th>" for d in range(1, depth + 1))
    rows = []
    for i, (st, p) in enumerate(profiles):
        color = PALETTE[i % len(PALETTE)]
        cells = "".join(f"<td>{v:.0%}</td>" for v in p.conditional)
        cells += "<td></td>" * (depth - len(p.conditional))
        mean = "-" if p.mean_accepted_length is None else f"{p.mean_accepted_length:.2f}"
        rows.append(
            f'<tr><td><span style="color:{color}">●</span> '
            f"{escape(budget_label(st.tree_budget))}</td><td>{mean}</td>"
            f"<td>{p.decode_rounds:,}</td>{cells}</tr>"
        )
    return (
        '<table class="stats depth-table"><thead><tr><th>tree_budget</th>'
        "<th>mean accepted length</th>"
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
