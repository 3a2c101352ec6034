"""The load section of ``sweep.html``: latency against load per budget, and the schedule."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from html import escape

from pytest_ddtree.core.budget import budget_order
from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.core.wording import percent
from pytest_ddtree.measure.arm import ArmStats
from pytest_ddtree.measure.load.recommend import Choice
from pytest_ddtree.measure.load.record import LoadTestResult
from pytest_ddtree.report.arm_text import speculation_warnings
from pytest_ddtree.report.charts import (
    HEIGHT,
    PALETTE,
    WIDE,
    Svg,
    YScale,
    empty_chart,
    fmt_num,
    nice_ticks,
)
from pytest_ddtree.report.columns import LOAD_COLUMNS, client_cell, html_table, load_rows
from pytest_ddtree.report.load_text import point_detail, point_line, schedule_text, unraced_text

__all__ = ["latency_chart", "render_load_section"]


def latency_chart(stats: Sequence[ArmStats], metric: str, title: str) -> str:
    """An inline SVG: ``metric`` p50 (solid) and p99 (dashed) per budget across load points."""
    points = sorted({s.point for s in stats}, key=lambda p: (p.mode, p.value))
    budgets = sorted({s.tree_budget for s in stats}, key=budget_order)
    values = [
        getattr(p, q) * 1000
        for s in stats
        if (p := getattr(s, metric)) is not None
        for q in ("p50", "p99")
    ]
    if not points or not values:
        return empty_chart(title, "no valid request at any load point reported this figure")
    # the card's whole width, as the sweep's throughput chart (not half of it)
    left, right, top, bottom = 66.0, WIDE - 122.0, 30.0, HEIGHT - 58.0
    top_v = max(values) * 1.08 or 1.0
    span = max(len(points) - 1, 1)

    def x(i: int) -> float:
        return left + (right - left) * (i / span if len(points) > 1 else 0.5)

    svg = Svg(title, WIDE, kind="load")
    svg.title(left, 16, f"{title} (ms; solid p50, dashed p99)")
    # round ticks with their unit ('0.5 ms', '2k ms'), never '0.349' or '2.78e+03'
    ys = YScale([], top, bottom, zero=True, ticks=nice_ticks(0.0, top_v))
    svg.y_grid(ys, left, right, [f"{fmt_num(v)} ms" for v in ys.ticks])
    svg.axis(left, bottom, right, bottom)
    for i, p in enumerate(points):
        svg.x_tick(x(i), bottom + 20, p.label)
    svg.x_title(right + 12 + 40, top + 6, "tree_budget")
    for j, b in enumerate(budgets):
        color = PALETTE[j % len(PALETTE)]
        for q in ("p50", "p99"):
            coords = []
            for i, p in enumerate(points):
                s = next((s for s in stats if s.point == p and s.tree_budget == b), None)
                pct = getattr(s, metric) if s is not None else None
                if pct is not None:
                    coords.append((x(i), ys(getattr(pct, q) * 1000)))
            if coords:
                svg.line(coords, color=color, dashed=q == "p99")
        svg.key(right + 12, top + 16 * (j + 1) + 6, color, budget_label(b))
    return svg.render()


def _table(stats: Sequence[ArmStats]) -> str:
    """The terminal's load table (the same columns), a client that was not to be trusted
    marked with a footnote, its reason in full under the table at full width."""
    notes: list[str] = []

    def client(s: ArmStats) -> str:
        if s.client is None or not s.client.unreliable:
            return escape(client_cell(s))
        notes.append(f"{s.point.label}, budget {budget_label(s.tree_budget)}: {client_cell(s)}")
        return escape(f"{s.client.state()} [{len(notes)}]")

    columns = tuple(replace(c, html=client) if c.name == "client" else c for c in LOAD_COLUMNS)
    table = html_table(columns, load_rows(stats), classes="stats load-points")
    listed = "".join(f"<li>[{i}] {escape(n)}</li>" for i, n in enumerate(notes, 1))
    return table + (f'<ul class="notes load-client-notes">{listed}</ul>' if notes else "")


def _choice_item(c: Choice) -> str:
    """A load point's answer, in the terminal's words (the race's account under it)."""
    detail = "".join(f"<li>{escape(line)}</li>" for line in point_detail(c))
    return f"<li>{escape(point_line(c))}{f'<ul>{detail}</ul>' if detail else ''}</li>"


def _never_drafted(stats: Sequence[ArmStats]) -> str:
    lines = speculation_warnings(stats, by_budget=True)
    return "".join(f'<div class="notice">{escape(line)}</div>' for line in lines)


def _at(temperature: float) -> str:
    return f" at temperature {temperature:g}" if temperature else ""


def render_load_section(tests: Sequence[LoadTestResult]) -> str:
    """One card per load test: the schedule, the charts and the table."""
    out = []
    for test in tests:
        nodeid, stats, schedule = test.nodeid, test.stats, test.schedule
        choices = "".join(_choice_item(c) for c in schedule.choices)
        where = test.where
        races = test.races
        raced = ""
        if races:
            spent, full = sum(r.requests for r in races), sum(r.max_requests for r in races)
            raced = (
                f'<p class="muted">Adaptive: budgets raced at each load point by decode rate '
                f"(margin {percent(races[0].equivalence)}, minimum n {races[0].min_n}); "
                f"{spent} requests of the {full} sent in full.</p>"
            )
        if test.note:
            raced += f'<p class="muted">{escape(unraced_text(test.note))}</p>'
        out.append(
            '<section class="card"><h2>Load: '
            f"{escape(nodeid)}{_at(test.temperature)}</h2>"
            f'<p class="muted">Every request validated before it counts; merged from raw '
            f"samples of {escape(where)}; loads are totals.</p>{raced}"
            f"<p><strong>Schedule: {escape(schedule_text(schedule))}</strong>"
            f"{' (the best budget changes with load)' if schedule.changes_with_load else ''}"
            f"</p><ul>{choices}</ul>{_never_drafted(stats)}"
            f"{latency_chart(stats, 'tpot', 'TPOT vs load')}"
            f"{latency_chart(stats, 'ttft', 'TTFT vs load')}"
            f"{_table(stats)}</section>"
        )
    return "".join(out)
