"""The end-of-session sweep table, as plain text lines."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_ddtree.core.budget import budget_order
from pytest_ddtree.core.wording import percent
from pytest_ddtree.measure.sweep import (
    RunMetadata,
    SweepSummary,
    budget_label,
)
from pytest_ddtree.measure.sweep.bootstrap import ci_name
from pytest_ddtree.measure.sweep.race import RaceRecord, RaceRule
from pytest_ddtree.report import race_text
from pytest_ddtree.report.arm_text import speculation_warnings
from pytest_ddtree.report.columns import sweep_columns, sweep_rows, text_table
from pytest_ddtree.report.decision_text import drift_line, sweep_answer
from pytest_ddtree.report.depth_text import deeper_line


def headers() -> tuple[str, ...]:
    """The table's header row (the interval's confidence read from its constant)."""
    return tuple(c.head for c in sweep_columns())


def intervals() -> str:
    """What the two intervals are: printed under every table (they read alike and are not)."""
    return (
        f"[{ci_name()}]: the median's interval over the budget's requests. slowdown vs leader: "
        "the race's paired estimate (by round, balanced over the prompts; not the ratio of the "
        "medians) with its interval at the race's confidence for that look "
        f"({percent(RaceRule().look_confidence(1))} at the first, more later), wider than the "
        "medians' as it counts the noise from round to round."
    )


#: every other column, under the table with ``-v``; docs/sweep.md has the long form
LEGEND = (
    "accept len: tokens committed per decode round, the per-request mean (rate: "
    "accepted/drafted; 'no drafts': speculation never drafted; 'no stats': no speculative "
    "statistics came back); the depth line's accept len pools every round (a long request "
    "weighs more) and the server counters' counts all traffic at a budget (warm-up and smoke "
    "requests too), so the three differ a little; verify steps: decode rounds per request; "
    "srv/cli: server's decode rate over the client's, near 1.00 when honest."
)
#: where the rest is, when it is not printed
MORE = "-v explains every column; docs: sweep.md#columns"


def legend_lines(width: int | None = None, verbose: bool = False) -> list[str]:
    """The table's legend: what its intervals are, then (``verbose``) every other column,
    wrapped to ``width`` (a terminal's; None: one line each)."""
    text = f"{intervals()} {LEGEND if verbose else MORE}"
    if verbose:
        text += " (docs: sweep.md#columns)"
    text = f"({text})"
    if width is None or width < 40:
        return [text]
    return textwrap.wrap(text, width=width, break_long_words=False, break_on_hyphens=False)


def table_lines(
    summary: SweepSummary,
    *,
    notes: Sequence[str] = (),
    shared: Mapping[int | None, str] | None = None,
    width: int | None = None,
    verbose: bool = False,
) -> list[str]:
    """The sweep table plus the recommendation line, ready for ``write_line``; its legend
    wrapped to ``width`` (the terminal's), every column explained when ``verbose``.

    ``accept len/rate`` is the mean acceptance length (tokens committed per decode
    round, bonus token included), or where the server does not report its rounds
    the acceptance rate (accepted / drafted tokens, shown as ``rate 0.85``),
    ``verify steps`` the mean number of decode rounds (target verification passes)
    per request, ``srv/cli`` the server-reported decode rate over the client-measured
    one (close to 1.0 when the server's figure is honest).
    """
    lines = text_table(
        sweep_columns(), sweep_rows(summary.budgets, summary.race, shared), rule=True
    )
    lines.extend(legend_lines(width, verbose))
    if any(st.concurrent for st in summary.budgets):
        lines.append(
            "note: timings were taken concurrently (pytest-xdist workers); "
            "compare budgets within this run only."
        )
    lines.extend(f"note: {n}" for n in notes)
    lines.extend(f"WARNING: {w}" for w in speculation_warnings(summary.budgets))
    lines.extend(drift_lines(summary))
    lines.extend(shared_server_lines(shared))
    lines.extend(race_lines(summary.race))
    lines.append(sweep_answer(summary))
    lines.extend(shared_recommendation(shared))
    deeper = deeper_line([(st.tree_budget, st.depth) for st in summary.budgets if st.depth])
    if deeper is not None:
        lines.append(deeper)
    return lines


def race_lines(race: RaceRecord[int | None] | None) -> list[str]:
    """The adaptive sweep's log as the terminal prints it, each line after ``race:``."""
    return [f"race: {line}" for line in race_log(race)]


def race_log(race: RaceRecord[int | None] | None) -> list[str]:
    """The adaptive sweep's log: which budget left when (requests, round) and why."""
    if race is None or race.mode != "adaptive":
        return []
    rule = race.judgement.rule
    budget = "no request budget" if rule.max_requests is None else f"of {rule.max_requests}"
    lines = [
        f"{race.requests} requests ({budget}) in {race.laps} rounds, "
        f"{percent(rule.equivalence)} margin, min n {rule.min_n}, {percent(rule.confidence)} "
        "confidence "
        "over all looks"
    ]
    for e in race.exits:
        leader = "the leader" if e.leader is None else f"tree_budget={budget_label(e.leader)}"
        reason = race_text.reason(e.why, leader)
        lines.append(
            f"tree_budget={budget_label(e.key)} left after {e.after_requests} requests "
            f"(round {e.lap}, n={e.n}): {reason}"
        )
    if race.spent:
        still = ", ".join(budget_label(k) for k in race.judgement.contending) or "-"
        lines.append(
            f"undecided - the request budget ({rule.max_requests}) was spent with "
            f"tree_budget={still} still in contention with the leader"
        )
    return lines


def unraced_note(meta: RunMetadata | None) -> str | None:
    """What an adaptive sweep that raced nothing says, in the terminal and on the Race card
    alike (None: the run raced, was exhaustive, or did not record it)."""
    if meta is None or meta.sweep != "adaptive" or meta.races != 0:
        return None
    # the budgets as described: numbers, or the server's own budget by its label
    only = str(meta.budgets[0]) if meta.budgets else budget_label(None)
    why = (
        f"(one budget, {only}: there is no other to race it against)"
        if len(meta.budgets) < 2
        else "(no ddtree_sweep call or benchmark test with a tree_budget parameter)"
    )
    return (
        f"--ddtree-sweep adaptive: nothing was raced {why}; every request ran as planned and "
        "is judged by the same rule"
    )


def shared_server_warnings(shared: Mapping[int | None, str] | None) -> list[str]:
    """One warning per budget timed while another client used the server."""
    return [
        f"tree_budget {budget_label(b)}: shared server: {why}" for b, why in (shared or {}).items()
    ]


def shared_server_lines(shared: Mapping[int | None, str] | None) -> list[str]:
    """:func:`shared_server_warnings` as the terminal's WARNING lines."""
    return [f"WARNING: {w}" for w in shared_server_warnings(shared)]


def shared_recommendation(shared: Mapping[int | None, str] | None) -> list[str]:
    """What the recommendation is worth when other traffic disturbed some budgets."""
    if not shared:
        return []
    budgets = ", ".join(budget_label(b) for b in shared)
    return [
        f"recommendation caveat: another client shared the server while tree_budget "
        f"{budgets} was timed; those timings include its load, so the recommendation "
        "cannot be trusted as is: rerun on a server nobody else uses"
    ]


def shared_caveat_notes(shared: Mapping[int | None, str] | None) -> list[str]:
    """The shared-server warnings and the recommendation's caveat, as report notes."""
    return [
        *shared_server_warnings(shared),
        *shared_recommendation(shared),
    ]


def server_counter_lines(
    by_budget: Mapping[int | None, Any], shared: Mapping[int | None, str] | None = None
) -> list[str]:
    """One line per budget: the acceptance the server's own counters show (``CounterDelta``);
    a shared budget's counters include the other client's requests, and say so."""
    lines = []
    # in budget order, the table's (the server's own budget first), not the visiting order
    for budget, d in sorted(by_budget.items(), key=lambda kv: budget_order(kv[0])):
        length = d.acceptance_length
        if length is None:
            continue
        rates = list(d.position_rates.values())
        while len(rates) > 1 and rates[-1] == 0:
            rates.pop()  # llama.cpp lists every position up to its draft limit
        shown = " ".join(f"{r:.2f}" for r in rates[:8]) + (" ..." if len(rates) > 8 else "")
        by_pos = f"; accepted at draft positions 0, 1, ...: {shown}" if rates else ""
        lines.append(
            f"server counters, tree_budget {budget_label(budget)}: accept len {length:.2f} "
            f"over all traffic, {d.drafts:g} verify steps{by_pos}"
            + (" (includes another client's requests)" if shared and budget in shared else "")
        )
    return lines


def drift_lines(summary: SweepSummary) -> list[str]:
    """One line per drift check: the first budget measured again at the end."""
    return [drift_line(c) for c in summary.drift]
