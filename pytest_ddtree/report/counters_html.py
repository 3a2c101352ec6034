"""The "Server counters" section of ``sweep.html``: what the server's ``/metrics`` counted."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from pytest_ddtree.settings import budget_label


def _num(x: Any, digits: int = 0) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return "-"
    return f"{x:,.{digits}f}"


def _positions(rates: Any) -> str:
    if not isinstance(rates, Mapping) or not rates:
        return "-"
    return " ".join(f"{escape(str(p))}:{_num(r, 2)}" for p, r in rates.items())


def _row(b: Mapping[str, Any], shared: Mapping[Any, str]) -> str:
    budget = b.get("tree_budget")
    flag = shared.get(budget)
    cells = [
        budget_label(budget if isinstance(budget, int) else None),
        _num(b.get("requests")),
        _num(b.get("drafts")),
        _num(b.get("draft_tokens")),
        _num(b.get("accepted_tokens")),
        _num(b.get("acceptance_length"), 2),
        _positions(b.get("position_rates")),
        f"{_num(b.get('running_before'))} / {_num(b.get('waiting_before'))}",
    ]
    tds = "".join(f"<td>{escape(c) if i != 6 else c}</td>" for i, c in enumerate(cells))
    mark = f"<td><strong>shared server</strong>: {escape(flag)}</td>" if flag else "<td>-</td>"
    return f"<tr>{tds}{mark}</tr>"


def server_counters_section(doc: Any) -> str:
    """The section for ``metadata.server_counters`` (empty when the counters were not read)."""
    if not isinstance(doc, Mapping):
        return ""
    status = escape(str(doc.get("status") or ""))
    budgets = [b for b in doc.get("budgets") or () if isinstance(b, Mapping)]
    if not budgets:
        return (
            '<section class="card"><h2>Server counters</h2>'
            f'<p class="muted">/metrics: {status}</p></section>'
        )
    shared = {
        s.get("tree_budget"): str(s.get("why", ""))
        for s in doc.get("shared") or ()
        if isinstance(s, Mapping)
    }
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "tree_budget",
            "requests",
            "verify steps",
            "draft tokens",
            "accepted",
            "accept len",
            "accepted by position (rate)",
            "running / waiting before",
            "other traffic",
        )
    )
    rows = "".join(_row(b, shared) for b in budgets)
    return (
        '<section class="card"><h2>Server counters</h2>'
        f'<p class="muted">Deltas of the server\'s own Prometheus counters ({status}) over '
        "each budget's timed requests, added over the rounds. Server-wide counters include "
        "every client's requests: a budget marked <strong>shared server</strong> was timed "
        "while another client used the server, so its timings include that load.</p>"
        f'<table class="stats"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
        "</section>"
    )


def shared_notices(doc: Any) -> list[str]:
    """The page's notices: each shared budget, and what it means for the recommendation."""
    from pytest_ddtree.report.terminal import shared_recommendation, shared_server_lines

    if not isinstance(doc, Mapping):
        return []
    shared = {
        s.get("tree_budget"): str(s.get("why", ""))
        for s in doc.get("shared") or ()
        if isinstance(s, Mapping)
    }
    return [*shared_server_lines(shared), *shared_recommendation(shared)]
