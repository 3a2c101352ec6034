"""What pytest-ddtree writes to the terminal: the header, the serving line, the end summary."""

from __future__ import annotations

import pytest

from pytest_ddtree.runtime import Runtime
from pytest_ddtree.session import DDTreeSession
from pytest_ddtree.settings import Settings, budget_label


def header_lines(settings: Settings, xdist: bool) -> list[str]:
    """The report-header lines: where requests go, and a weakened run said plainly."""
    if settings.endpoint is None:
        where = "embedded reference server (started on first use"
        where += ", one per xdist worker)" if xdist else ")"
        if settings.reference_faults:
            where += f", faults: {','.join(settings.reference_faults)}"
    else:
        where = settings.endpoint
    budgets = (
        f"{budget_label(None)} (budget-mode none)"
        if settings.budget_mode == "none"
        else ",".join(map(str, settings.budgets)) + f" via {settings.budget_mode}"
    )
    lines = [
        f"ddtree: endpoint {where}; model {settings.model or 'first listed'}; "
        f"dialect {settings.dialect}; budgets {budgets}; tokenizer {settings.tokenizer}"
    ]
    if settings.skip_checks:
        lines.append(f"ddtree: WEAKENED run, checks skipped: {', '.join(settings.skip_checks)}")
    return lines


def serving_lines(runtime: Runtime) -> list[str]:
    """Once the runtime is up: what is served, and any caveat of the setup."""
    line = (
        f"ddtree: serving {runtime.endpoint} model {runtime.model}; "
        f"tokenizer {runtime.tokenizer_source}"
    )
    if runtime.baseline is not None:
        line += f"; baseline {runtime.baseline_endpoint}"
    return [line, *(f"ddtree: {note}" for note in runtime.notes)]


def write_summary(tr: pytest.TerminalReporter, session: DDTreeSession) -> None:
    """The sweep table and recommendation, then a weakened run and the dialect found."""
    if session.is_worker:
        return
    _write_sweep(tr, session)
    settings = session.settings
    if settings.skip_checks:
        tr.write_sep("-", "pytest-ddtree: weakened run", yellow=True)
        tr.write_line(
            f"checks skipped (--ddtree-skip-check): {', '.join(settings.skip_checks)}; "
            "results do not prove these invariants hold"
        )
    runtime = session.runtime
    if runtime is None or not runtime.client.requests_sent:
        return
    client = runtime.client
    if settings.dialect == "auto":
        found = client.detected_dialect or "none (no speculation statistics seen)"
        tr.write_line(f"ddtree: statistics dialect detected: {found}")
    elif settings.dialect != "none" and not client.stats_seen:
        tr.write_line(
            f"ddtree: WARNING: --ddtree-dialect {settings.dialect} (from "
            f"{settings.source_of('dialect')}) found no statistics in "
            f"{client.requests_sent} response(s): the stats and budget checks did not "
            "run; try --ddtree-dialect auto",
            yellow=True,
        )
    from pytest_ddtree import _guard

    for line in _guard.transport_lines(runtime):  # retries, 429s, counter failures
        tr.write_line(line, yellow=True)


def _write_sweep(tr: pytest.TerminalReporter, session: DDTreeSession) -> None:
    if session.summary is None:
        for line in session.report_lines:
            tr.write_line(line)
        return
    from pytest_ddtree.report import table_lines

    tr.write_sep("-", "pytest-ddtree budget sweep")
    notes: list[str] = []
    if session.interrupted:
        notes.append("interrupted: partial run, the recommendation is not final")
    if session.smoke_failure:
        notes.append(f"benchmarks skipped: {session.smoke_failure}")
    for line in table_lines(session.summary, notes=notes):
        tr.write_line(line)
    for v in session.budget_ignored:
        tr.write_line(f"FAILED sweep: [{v.code}] {v.message}", red=True)
    for line in session.report_lines:
        tr.write_line(line)
