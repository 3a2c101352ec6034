"""The "Server counters" section of ``sweep.html``: what the server's ``/metrics`` counted."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from pytest_ddtree.core.budget import budget_order
from pytest_ddtree.core.settings import budget_label


def _num(x: Any, digits: int = 0) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return "-"
    return f"{x:,.{digits}f}"


def _positions(rates: Any) -> str:
    if not isinstance(rates, Mapping) or not rates:
        return "-"
    items = list(rates.items())
    while len(items) > 1 and items[-1][1] == 0:
        items.pop()  # llama.cpp lists every position up to its draft limit: the zero tail
    return " ".join(f"{escape(str(p))}:{_num(r, 2)}" for p, r in items)


def _row(b: Mapping[str, Any], shared: Mapping[Any, str], timed: Mapping[int | None, int]) -> str:
    budget = b.get("tree_budget")
    key = budget if isinstance(budget, int) else None
    flag = shared.get(budget)
    plain = (
        budget_label(key),
        _num(b.get("requests")),
        _num(timed.get(key)),
        _num(b.get("drafts")),
        _num(b.get("draft_tokens")),
        _num(b.get("accepted_tokens")),
        _num(b.get("acceptance_length"), 2),
    )
    running = f"{_num(b.get('running_before'))} / {_num(b.get('waiting_before'))}"
    # the positions are escaped as they are built
    cells = (*(escape(c) for c in plain), _positions(b.get("position_rates")), escape(running))
    tds = "".join(f"<td>{c}</td>" for c in cells)
    mark = f"<td><strong>shared server</strong>: {escape(flag)}</td>" if flag else "<td>-</td>"
    return f"<tr>{tds}{mark}</tr>"


def _table(head: tuple[str, ...], rows: str) -> str:
    heads = "".join(f"<th>{escape(h)}</th>" for h in head)
    return f'<table class="stats"><thead><tr>{heads}</tr></thead><tbody>{rows}</tbody></table>'


_BUDGET_HEAD = (
    "tree_budget",
    "requests the server counted",
    "timed",
    "verify steps",
    "draft tokens",
    "accepted",
    "accept len",
    "accepted by position (rate)",
    "running / waiting before",
    "other traffic",
)
_LOAD_HEAD = ("test", "load point", "tree_budget", "sent", "requests", "accept len", "note")


def _budget_order(budget: Any) -> int:
    """The server's own budget (None) first, then the budgets in numeric order."""
    return budget_order(budget if isinstance(budget, int) else None)


def _point_order(record: Mapping[str, Any]) -> tuple[int, str, float, float, str]:
    """``C=4`` before ``C=16``, concurrency before rate, by the point the record carries;
    records written before they carried one come after, in the order they were written
    (the run's; the sort is stable)."""
    point = record.get("point")
    label = str(record.get("label") or "")
    if isinstance(point, Mapping):
        value, burst = point.get("value"), point.get("burstiness", 1.0)
        if isinstance(value, (int, float)) and isinstance(burst, (int, float)):
            return (0, str(point.get("mode", "")), float(value), float(burst), label)
    return (1, "", 0.0, 0.0, "")


def _load_rows(records: list[Mapping[str, Any]]) -> str:
    rows = []
    ordered = sorted(
        records,
        key=lambda r: (
            str(r.get("test", "")),
            _budget_order(r.get("tree_budget")),
            _point_order(r),
        ),
    )
    for r in ordered:
        d = r.get("delta") if isinstance(r.get("delta"), Mapping) else {}
        assert isinstance(d, Mapping)
        budget = r.get("tree_budget")
        cells = (
            str(r.get("test", "")),
            str(r.get("label", "")),
            budget_label(budget if isinstance(budget, int) else None),
            _num(r.get("sent")),
            _num(d.get("requests")),
            _num(d.get("acceptance_length"), 2),
            str(r.get("shared") or "-"),
        )
        rows.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    return "".join(rows)


def server_counters_section(doc: Any, timed: Mapping[int | None, int] | None = None) -> str:
    """The section for ``metadata.server_counters`` (empty when the counters were not read);
    ``timed``: each budget's requests in the per-budget statistics, shown beside the count
    of the server, which counts every request it saw."""
    if not isinstance(doc, Mapping):
        return ""
    status = escape(str(doc.get("status") or ""))
    budgets = sorted(
        (b for b in doc.get("budgets") or () if isinstance(b, Mapping)),
        key=lambda b: _budget_order(b.get("tree_budget")),
    )
    load = [
        r for r in doc.get("records") or () if isinstance(r, Mapping) and r.get("scope") == "load"
    ]
    parts = [
        '<section class="card"><h2>Server counters</h2>',
        f'<p class="muted">/metrics: {status}. Deltas of the server\'s own Prometheus counters '
        "while each budget was measured, added over the rounds. The server counts every "
        "request it finished in that time, not only the timed ones: a benchmark's warm-up "
        "rounds, the drift check's blocks and any other client's requests too; "
        "<em>timed</em> is the budget's count in the per-budget statistics (valid or not). A "
        "budget marked <strong>shared server</strong> was timed while another client used "
        "the server, so its timings include that load.</p>",
    ]
    if budgets:
        shared = {
            s.get("tree_budget"): str(s.get("why", ""))
            for s in doc.get("shared") or ()
            if isinstance(s, Mapping)
        }
        rows = "".join(_row(b, shared, timed or {}) for b in budgets)
        parts.append(_table(_BUDGET_HEAD, rows))
    if load:
        parts.append("<h3>Load points</h3>")
        parts.append(_table(_LOAD_HEAD, _load_rows(load)))
    parts.append("</section>")
    return "".join(parts)
