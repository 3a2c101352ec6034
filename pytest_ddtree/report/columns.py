"""One column specification per table: the terminal and the HTML report render the sweep's
per-budget table and the load's per-point table from the same columns (name, unit, order and
each cell's text), so the two cannot disagree on what a column holds.

A column's ``html`` adds markup to the same figure (a pill, a footnote mark, the codes of
the invalid answers); it never shows another figure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any, Generic, TypeVar

from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.measure.arm import ArmStats, Place
from pytest_ddtree.measure.load.metrics import table_order
from pytest_ddtree.measure.sweep.bootstrap import ci_name
from pytest_ddtree.measure.sweep.race import RaceRecord
from pytest_ddtree.report.arm_text import acceptance_cell, verdict_text
from pytest_ddtree.report.client_text import client_reason
from pytest_ddtree.report.decision_text import standing_text

__all__ = [
    "LOAD_COLUMNS",
    "LOAD_LEGEND",
    "PLACE_CLASS",
    "Column",
    "SweepRow",
    "client_cell",
    "html_table",
    "load_rows",
    "race_cell",
    "sweep_columns",
    "sweep_rows",
    "text_table",
]

R = TypeVar("R")


@dataclass(frozen=True)
class Column(Generic[R]):
    """One column: its ``name``, its ``unit`` (after the name in the terminal, under it in
    the HTML), its cell's text, and whether it is prose (left-aligned)."""

    name: str
    unit: str
    cell: Callable[[R], str]
    left: bool = False
    #: the cell as HTML, where markup helps the same figure (default: the text, escaped)
    html: Callable[[R], str] | None = None

    @property
    def head(self) -> str:
        return f"{self.name} {self.unit}".strip()

    def html_head(self) -> str:
        unit = f"<br><small>{escape(self.unit)}</small>" if self.unit else ""
        return f"{escape(self.name)}{unit}"

    def html_cell(self, row: R) -> str:
        return self.html(row) if self.html is not None else escape(self.cell(row))


def text_table(columns: Sequence[Column[R]], rows: Sequence[R], *, rule: bool = False) -> list[str]:
    """The rows as aligned text lines, the header first (``rule``: a dashed line under it);
    each column as wide as its widest cell."""
    body = [tuple(c.head for c in columns), *(tuple(c.cell(r) for c in columns) for r in rows)]
    widths = [max(len(line[i]) for line in body) for i in range(len(columns))]
    lines = []
    for n, line in enumerate(body):
        cells = [
            cell.ljust(w) if c.left else cell.rjust(w)
            for cell, w, c in zip(line, widths, columns, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
        if rule and n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def html_table(
    columns: Sequence[Column[R]],
    rows: Sequence[R],
    *,
    classes: str = "stats",
    row_class: Callable[[R], str] = lambda r: "",
) -> str:
    """The rows as an HTML table in a sideways-scrolling box (a narrow page scrolls it,
    never clips it); ``classes`` ``one-line`` keeps each cell on one line."""
    head = "".join(f"<th>{c.html_head()}</th>" for c in columns)
    body = []
    for r in rows:
        cls = row_class(r)
        cells = "".join(f"<td>{c.html_cell(r)}</td>" for c in columns)
        body.append(f"<tr{f' class={chr(34)}{cls}{chr(34)}' if cls else ''}>{cells}</tr>")
    return (
        f'<div class="table-scroll"><table class="{classes}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


# ------------------------------------------------------------------ the sweep's table


@dataclass(frozen=True)
class SweepRow:
    """One budget of the sweep: its statistics, the race it ran in, and what another client
    of the server left on it (None: nobody)."""

    st: ArmStats
    race: RaceRecord[int | None] | None = None
    shared: str | None = None


def sweep_rows(
    budgets: Sequence[ArmStats],
    race: RaceRecord[int | None] | None,
    shared: Mapping[int | None, str] | None = None,
) -> list[SweepRow]:
    return [SweepRow(st, race, (shared or {}).get(st.tree_budget)) for st in budgets]


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:,.0f}"


def _decode(r: SweepRow) -> str:
    st = r.st
    out = _rate(st.decode_median)
    if st.decode_ci is not None:
        out += f" [{_rate(st.decode_ci[0])}, {_rate(st.decode_ci[1])}]"
    return f"{out} n={len(st.decode)}"


def _decode_html(r: SweepRow) -> str:
    st = r.st
    ci = "" if st.decode_ci is None else f" [{_rate(st.decode_ci[0])}, {_rate(st.decode_ci[1])}]"
    return f"<b>{_rate(st.decode_median)}</b>{ci} <small>n={len(st.decode)}</small>"


def race_cell(st: ArmStats, race: RaceRecord[int | None] | None) -> str:
    """The budget's slowdown against the leader with its interval and n (``leader``, ``-``)."""
    if race is None or st.tree_budget not in {s.key for s in race.judgement.standings}:
        return "-"
    s = race.judgement.standing(st.tree_budget)
    if s.status == "leader":
        return f"leader n={s.n}"
    return standing_text(s)


def _verdict(r: SweepRow) -> str:
    verdict = verdict_text(r.st)
    return f"{verdict} (shared server)".strip() if r.shared else verdict


#: the colour of a budget's verdict pill, by its place under the rule (others: "none")
PLACE_CLASS: Mapping[Place, str] = {
    "best": "best",
    "smallest as fast": "best",
    "as fast": "tied",
    "leads, undecided": "tied",
    "leads within the margin": "tied",
    "invalid": "bad",
    "slower": "slow",
}


def _verdict_html(r: SweepRow) -> str:
    cls = "none" if r.st.place is None else PLACE_CLASS.get(r.st.place, "none")
    return f'<span class="pill {cls}">{escape(_verdict(r))}</span>'


def sweep_columns() -> tuple[Column[SweepRow], ...]:
    """The sweep table's columns (the interval's name read from its constant)."""
    return (
        Column("tree_budget", "", lambda r: budget_label(r.st.tree_budget)),
        Column("valid", "", lambda r: f"{r.st.valid}/{r.st.requests}"),
        Column("decode tok/s", f"median [{ci_name()}] n", _decode, html=_decode_html),
        Column(
            "TTFT",
            "p50/p90 ms",
            lambda r: "-" if r.st.ttft is None else f"{_ms(r.st.ttft.p50)} / {_ms(r.st.ttft.p90)}",
        ),
        Column("accept", "len/rate", lambda r: acceptance_cell(r.st)),
        Column(
            "verify",
            "steps",
            lambda r: "-" if r.st.mean_decode_rounds is None else f"{r.st.mean_decode_rounds:.1f}",
        ),
        Column(
            "srv/cli",
            "",
            lambda r: (
                "-" if r.st.server_client_ratio is None else f"{r.st.server_client_ratio:.2f}"
            ),
        ),
        Column("slowdown vs leader", "[race CI] n", lambda r: race_cell(r.st, r.race)),
        Column("verdict", "", _verdict, left=True, html=_verdict_html),
    )


# ------------------------------------------------------------------ the load's table


def _load_ms(p: Any, attr: str) -> str:
    return "-" if p is None else f"{getattr(p, attr) * 1000:.1f}"


def _pair(p: Any) -> str:
    return f"{_load_ms(p, 'p50')}/{_load_ms(p, 'p99')}"


def client_cell(s: ArmStats) -> str:
    """The load generator's CPU per token, or why its timings are not to be trusted."""
    if s.client is None:
        return "-"
    cpt = s.client.cpu_per_token
    client = f"{cpt * 1e6:.0f}us/tok" if cpt else "ok"
    if s.client.unreliable:
        client = f"{s.client.state()}: {client_reason(s.client)}"
    if s.withheld:
        client += f"; timing checks withheld on {s.withheld} request(s)"
    if s.client.retries:
        client += f"; {s.client.retries} sent again on a fresh connection"
    return client


def _valid_html(s: ArmStats) -> str:
    codes = ", ".join(f"{c} ×{k}" for c, k in s.codes.items())
    return escape(f"{s.valid}/{s.requests}" + (f" ({codes})" if codes else ""))


LOAD_COLUMNS: tuple[Column[ArmStats], ...] = (
    Column("load", "", lambda s: s.point.label, left=True),
    Column("budget", "", lambda s: budget_label(s.tree_budget)),
    Column("ok/n", "", lambda s: f"{s.valid}/{s.requests}", html=_valid_html),
    Column("TTFT", "p50/p99", lambda s: _pair(s.ttft)),
    Column("ITL", "p50/p99", lambda s: _pair(s.itl)),
    Column("TPOT", "p50/p99", lambda s: _pair(s.tpot)),
    Column("e2e", "p50/p99", lambda s: _pair(s.e2e)),
    Column("tok/s", "", lambda s: f"{s.output_tokens_per_second:.0f}"),
    Column("req/s", "", lambda s: f"{s.requests_per_second:.1f}"),
    Column("C seen", "", lambda s: f"{s.achieved_concurrency:.1f}"),
    Column("goodput", "", lambda s: "-" if s.slo is None else f"{s.goodput_share:.0%}"),
    Column("accept", "", acceptance_cell),
    Column("vs srv", "", lambda s: _load_ms(s.ttft_offset, "p50")),
    Column("client", "", client_cell, left=True),
)


#: what the load table's columns mean, printed under it; docs/load.md has the long form
LOAD_LEGEND = (
    "ms; ok/n valid/sent; C seen achieved concurrency; accept mean acceptance length "
    "(rate: accepted/drafted, 'no drafts': speculation never drafted, 'no stats': no "
    "speculative statistics came back); vs srv client TTFT "
    "minus the server's (ms); client load generator CPU per token (docs: load.md#columns)"
)


def load_rows(stats: Sequence[ArmStats]) -> list[ArmStats]:
    """The load table's rows: by budget, then load point."""
    return table_order(stats)
