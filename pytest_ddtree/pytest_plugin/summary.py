"""What pytest-ddtree writes to the terminal: the header, the serving line, the end summary.

Also load mode's: the total load and how it is spread (in the header when
load options were given or tests are split with ``--dist each``, else after
collection when a test uses ``ddtree_load``), and the merged load table; the
regressions of a tripped ``--benchmark-compare-fail`` gate, one line each; and
the line of a failure in pytest's short test summary, codes first.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_ddtree.core.budget import budget_order, group_order
from pytest_ddtree.core.dialects import AUTO, asks_statistics
from pytest_ddtree.core.options import key_note
from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.pytest_plugin.runtime import Runtime
from pytest_ddtree.pytest_plugin.session import DDTreeSession

if TYPE_CHECKING:
    from pytest_ddtree.measure.sweep.decision import Decision

#: the regressions a ``--benchmark-compare-fail`` gate found (name, why), once taken
REGRESSIONS_KEY = pytest.StashKey[list[tuple[str, str]]]()

#: options whose explicit value puts the load line in the header
LOAD_OPTIONS = ("slo", "load_concurrency", "load_rate", "load_requests")


def header_lines(session: DDTreeSession) -> list[str]:
    """The report-header lines: where requests go, and a weakened run said plainly."""
    settings, xdist = session.settings, session.xdist
    if settings.endpoint is None:
        where = "embedded reference server (started on first use"
        where += ", one per xdist worker)" if xdist else ")"
        if settings.reference_faults:
            where += f", faults: {','.join(settings.reference_faults)}"
    else:
        where = f"{settings.endpoint} (from {settings.source_of('endpoint')})"
    budgets = ",".join(map(budget_label, settings.requested_budgets)) + (
        " (budget-mode none)" if settings.budget_mode == "none" else f" via {settings.budget_mode}"
    )
    lines = [
        f"ddtree: endpoint {where}; {key_note(settings)}; "
        f"model {settings.model or 'first listed'}; "
        f"dialect {settings.dialect}; budgets {budgets}; tokenizer {settings.tokenizer}"
    ]
    if settings.temperatures != (0.0,):
        temps = ",".join(f"{t:g}" for t in settings.temperatures)
        lines[0] += f"; timed at temperatures {temps}"
    if settings.skip_checks:
        lines.append(f"ddtree: WEAKENED run, checks skipped: {', '.join(settings.skip_checks)}")
    if _load_in_header(session):
        lines.append(load_line(session))
    return lines


def _load_in_header(session: DDTreeSession) -> bool:
    explicit = any(session.settings.source_of(a) != "default" for a in LOAD_OPTIONS)
    return explicit or getattr(session.config.option, "dist", "no") == "each"


def load_line(session: DDTreeSession) -> str:
    """The total load, and whether it is split over xdist workers."""
    settings, option = session.settings, session.config.option
    n = getattr(option, "numprocesses", None)
    tx = getattr(option, "tx", None) or []
    workers = int(n) if isinstance(n, int) else sum(_tx_count(t) for t in tx)
    total = ",".join(map(str, settings.load_concurrency)) or "-"
    rates = ",".join(f"{r:g}" for r in settings.load_rate)
    load = f"total concurrency {total}" + (f"; total rate {rates}/s" if rates else "")
    if workers > 1 and getattr(option, "dist", "no") == "each":
        where = f"split over {workers} xdist workers, merged from raw samples"
        if settings.endpoint is None:
            where += (
                "; WARNING: each worker starts its own embedded server, so the merged "
                "load is not on one server: give --ddtree-endpoint"
            )
    elif workers > 1:
        where = "each load test runs whole on one worker (use --dist each to split it)"
    else:
        where = "one process"
    return f"ddtree load: {load} ({where})"


def _tx_count(spec: str) -> int:
    head = spec.split("*", 1)
    return int(head[0]) if len(head) == 2 and head[0].isdigit() else 1


def collection_lines(
    session: DDTreeSession, runtime: Runtime, items: list[pytest.Item]
) -> list[str]:
    """After collection: the load line (unless in the header) and the serving lines."""
    lines = []
    uses_load = any("ddtree_load" in getattr(i, "fixturenames", ()) for i in items)
    if uses_load and not _load_in_header(session):
        lines.append(load_line(session))
    return [*lines, *serving_lines(runtime)]


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
    """The sweep and load tables, where the report went, a weakened run, the dialect found;
    written before pytest-benchmark's tables, which the last line announces."""
    if session.is_worker:
        return
    _write_ddtree(tr, session)
    _write_benchmark_lead(tr, session)


def _write_ddtree(tr: pytest.TerminalReporter, session: DDTreeSession) -> None:
    _write_sweep(tr, session)
    _write_load(tr, session)
    _write_breakeven(tr, session)
    for line in session.report_lines:  # where the report went (or why not)
        tr.write_line(line)
    if session.settings.report is None and (session.summaries or session.load_results):
        tr.write_line(
            "ddtree: add --ddtree-report DIR for sweep.json and sweep.html "
            "(every request, the charts, and the load section)"
        )
    settings = session.settings
    if settings.skip_checks:
        tr.write_sep("-", "pytest-ddtree: weakened run", yellow=True)
        tr.write_line(
            f"checks skipped (--ddtree-skip-check): {', '.join(settings.skip_checks)}; "
            "results do not prove these invariants hold"
        )
    runtime = session.runtime
    if runtime is None:
        return
    if runtime.server_metrics is not None and runtime.server_metrics.reader.warning:
        tr.write_line(f"ddtree: WARNING: {runtime.server_metrics.reader.warning}", yellow=True)
    client = runtime.client
    if not client.requests_sent:  # a load test alone: only what went wrong on the wire
        _write_transport(tr, runtime)
        return
    if settings.dialect == AUTO:
        # nothing detected is not the 'none' choice (statistics configured off)
        found = client.detected_dialect or "no dialect (no speculation statistics seen)"
        tr.write_line(f"ddtree: statistics dialect detected: {found}")
    elif _dialect_found_nothing(runtime):
        tr.write_line(
            f"ddtree: WARNING: --ddtree-dialect {settings.dialect} (from "
            f"{settings.source_of('dialect')}) found no statistics in "
            f"{client.requests_sent} response(s): the stats and budget checks did not "
            "run; try --ddtree-dialect auto",
            yellow=True,
        )
    from pytest_ddtree.checks.invariants import unstated

    note = unstated(client.detected_dialect or settings.dialect) if client.stats_seen else None
    if note is not None:  # once a run: what this engine's statistics do not promise
        tr.write_line(f"ddtree: statistics checks: {note}")
    _write_transport(tr, runtime)


def _dialect_found_nothing(runtime: Runtime) -> bool:
    """A dialect given by name that asks for statistics found none in any answer."""
    dialect, client = runtime.settings.dialect, runtime.client
    return (
        dialect != AUTO
        and asks_statistics(dialect)
        and bool(client.requests_sent)
        and not client.stats_seen
    )


def _write_benchmark_lead(tr: pytest.TerminalReporter, session: DDTreeSession) -> None:
    """Say what the tables printed after this summary are, and how to leave them out.

    pytest-benchmark prints one table per group (a budget) after this summary: every
    timed test with its rounds, the detail behind the sweep table's per-budget figures.
    """
    bench = getattr(session.config, "_benchmarksession", None)
    groups = getattr(bench, "groups", None)
    if not groups or getattr(bench, "quiet", False):
        return
    tests = sum(len(g[1]) for g in groups if isinstance(g, tuple) and len(g) == 2)
    tr.write_line(
        f"ddtree: pytest-benchmark's tables follow: {len(groups)} group(s), {tests} timed "
        "test(s), each test's own timings (the sweep table above has the per-budget "
        "figures; --benchmark-columns picks their columns, --benchmark-quiet leaves them out)"
    )


def _write_transport(tr: pytest.TerminalReporter, runtime: Runtime) -> None:
    from pytest_ddtree.pytest_plugin import _guard

    for line in _guard.transport_lines(runtime):  # retries, 429s, counter failures
        tr.write_line(line, yellow=True)


def _write_sweep(tr: pytest.TerminalReporter, session: DDTreeSession) -> None:
    if not session.summaries:
        return
    tr.write_sep("-", "pytest-ddtree budget sweep")
    notes: list[str] = []
    if session.interrupted:
        notes.append("interrupted: partial run, the recommendation is not final")
    if session.smoke_failure:
        notes.append(f"benchmarks skipped: {session.smoke_failure}")
    from pytest_ddtree.report.terminal import unraced_note

    unraced = unraced_note(session.metadata)  # the HTML's Race card says the same
    if unraced:
        notes.append(unraced)
    log = session.runtime.server_metrics if session.runtime is not None else None
    shared = log.shared_budgets() if log is not None else None
    # the legend wrapped to the terminal's width; every column explained with -v
    width = int(getattr(getattr(tr, "_tw", None), "fullwidth", 80))
    for line in _tables(session, notes, shared, width):
        tr.write_line(line)
    if log is not None:
        from pytest_ddtree.measure.sweep.temperature import zero_only
        from pytest_ddtree.report.terminal import server_counter_lines

        # the counters are read per budget group, not per temperature: said so, not split
        pooled = "" if zero_only(session.summaries) else " (every temperature together)"
        for line in server_counter_lines(log.by_budget(), shared):
            tr.write_line(line + pooled)
        from pytest_ddtree.wire.servermetrics import gauge_lines

        for line in gauge_lines(log.by_budget()):
            tr.write_line(line)
    for v in session.budget_ignored:
        tr.write_line(f"FAILED sweep: [{v.code}] {v.message}", red=True)


def _tables(
    session: DDTreeSession,
    notes: list[str],
    shared: Mapping[int | None, str] | None,
    width: int | None = None,
) -> list[str]:
    """The sweep table, or above temperature 0 one table per temperature, headed with it."""
    from pytest_ddtree.measure.sweep.temperature import (
        heading,
        only_summary,
        sampling_problems,
        zero_only,
    )
    from pytest_ddtree.report import table_lines

    verbose = int(session.config.getoption("verbose", 0) or 0) >= 1
    if zero_only(session.summaries):
        return table_lines(
            only_summary(session.summaries),
            notes=notes,
            shared=shared,
            width=width,
            verbose=verbose,
        )
    lines: list[str] = []
    for t, part in session.summaries.items():
        problems = sampling_problems([s for s in session.samples if s.temperature == t])
        lines.append(f"-- {heading(t)} --")
        lines.extend(f"WARNING: {p}" for p in problems)
        lines.extend(table_lines(part, notes=notes, shared=shared, width=width, verbose=verbose))
    return lines


def _write_breakeven(tr: pytest.TerminalReporter, session: DDTreeSession) -> None:
    """Each break-even map: depth by load point, the crossover, the slope, the answer."""
    if not session.breakeven:
        return
    from pytest_ddtree.report.breakeven_text import map_lines

    tr.write_sep("-", "pytest-ddtree break-even")
    for nodeid, found in session.breakeven:
        tr.write_line(f"{nodeid}: speedup over the target alone, by prompt depth and load")
        for line in map_lines(found):
            tr.write_line("  " + line)


def _write_load(tr: pytest.TerminalReporter, session: DDTreeSession) -> None:
    if not session.load_results:
        return
    from pytest_ddtree.report.arm_text import speculation_warnings
    from pytest_ddtree.report.hosts_text import absent_line, approximate_lines, render_hosts
    from pytest_ddtree.report.load_text import load_lines, unraced_text

    tr.write_sep("-", "pytest-ddtree load")
    for test in session.load_results:
        cut = " (interrupted: partial results)" if test.partial and not test.absent else ""
        at = f" at temperature {test.temperature:g}" if test.temperature else ""
        tr.write_line(f"{test.nodeid}{at}: merged from {test.where}; total load per point{cut}")
        if test.absent:
            tr.write_line("  " + absent_line(test.absent), red=True)
        if test.note:
            tr.write_line(f"  note: {unraced_text(test.note)}")
        width = int(getattr(getattr(tr, "_tw", None), "fullwidth", 80))
        for line in load_lines(test.stats, test.schedule):
            if line.startswith("("):  # the legend, wrapped to the terminal's width
                for part in textwrap.wrap(line, width=max(40, width - 2), break_on_hyphens=False):
                    tr.write_line("  " + part)
                continue
            tr.write_line("  " + line)
        for line in speculation_warnings(test.stats, by_budget=True):
            tr.write_line(f"  WARNING: {line}", yellow=True)
        if test.unreliable:
            tr.write_line(
                "  UNRELIABLE points: the client was saturated (its own queueing) or stalled "
                "(the machine did not run it) there, and that delay is in those latencies "
                "(spread the load with -n K --dist each; run the client on a quieter machine)",
                yellow=True,
            )
        if test.hosts:
            tr.write_line("  per host:")
            for line in render_hosts(test.hosts):
                tr.write_line("  " + line)
            for line in approximate_lines(test.clock_problems):
                tr.write_line("  " + line, yellow=True)


def take_regressions(config: pytest.Config) -> list[tuple[str, str]]:
    """pytest-benchmark's ``--benchmark-compare-fail`` findings, taken before it raises on them.

    pytest-benchmark raises ``PerformanceRegression`` from its terminal summary when a
    comparison fails: the run then ends in a long traceback, and every summary after its
    own (the sweep table, pytest's closing line) is lost. Taken here, the findings are
    written as one line each and the exit status is set instead (``gate_exit_status``).
    """
    bench = getattr(config, "_benchmarksession", None)
    found = getattr(bench, "performance_regressions", None)
    if not isinstance(found, list) or not found:
        return []
    taken = [(str(name), str(why)) for name, why in found]
    found.clear()
    config.stash[REGRESSIONS_KEY] = taken
    return taken


def write_regressions(tr: pytest.TerminalReporter, regressions: list[tuple[str, str]]) -> None:
    """One line per regression the gate found."""
    if not regressions:
        return
    tr.write_sep("-", f"--benchmark-compare-fail: {len(regressions)} regression(s)", red=True)
    for name, why in sorted(regressions, key=lambda r: regression_order(r[0])):
        tr.write_line(f"REGRESSION {name}: {_regression_text(why)}", red=True)
    # pytest's closing line counts it: "1 failed, 111 passed" in its failure colour,
    # not a green line over a failed exit status
    tr.stats.setdefault("failed", []).append(
        pytest.TestReport(
            nodeid="ddtree::benchmark-compare",
            location=("ddtree", None, "benchmark-compare"),
            keywords={},
            outcome="failed",
            longrepr=f"--benchmark-compare-fail: {len(regressions)} regression(s)",
            when="call",
            duration=0.0,
        )
    )


def regression_order(name: str) -> tuple[int, str]:
    """Regressions by budget (numerically; the server's own first), then by name."""
    return (group_order(name), name)


_CHECK = re.compile(
    r"Field '(\w+)' has failed (Percentage|Difference)RegressionCheck: (\S+) > (\S+)"
)


def _regression_text(why: str) -> str:
    """``median 47.1% slower than the baseline (limit 10%)`` from pytest-benchmark's
    ``Field 'median' has failed PercentageRegressionCheck: 47.090628174 > 10.000000000``;
    any other text as it is."""
    m = _CHECK.fullmatch(why.strip())
    if m is None:
        return why
    field, kind, value, limit = m.group(1), m.group(2), float(m.group(3)), float(m.group(4))
    if kind == "Percentage":
        return f"{field} {value:.1f}% slower than the baseline (limit {limit:g}%)"
    return f"{field} {value:.6g} s slower than the baseline (limit {limit:g} s)"


def gate_exit_status(config: pytest.Config, status: int) -> int:
    """The run's exit status, a failure when the compare gate found a regression."""
    if config.stash.get(REGRESSIONS_KEY, None) and status == pytest.ExitCode.OK:
        return int(pytest.ExitCode.TESTS_FAILED)
    return status


def short_crash_line(
    report: pytest.TestReport,
    excinfo: pytest.ExceptionInfo[BaseException] | None,
    tbstyle: str = "",
    path: Path | None = None,
) -> None:
    """Put the violation codes where the short test summary shows them.

    pytest shows the exception's qualified name first (``pytest_ddtree.core.violation.
    InvariantError``) and cuts the line at the terminal's width, so at 80 columns
    the codes were never seen; this line starts with them, and the project's other
    exceptions are named without their module. The message is otherwise whole, as
    JUnit XML's failure message carries it.
    """
    from pytest_ddtree.core.violation import InvariantError

    exc = excinfo.value if excinfo is not None else None
    if (
        isinstance(exc, InvariantError)
        and excinfo is not None
        and report.when == "call"
        and tbstyle == "auto"
    ):
        # the cause on screen: the failing line and the E lines, without the test's whole
        # source and a repr of every fixture above them (--tb=long shows those)
        # from the test's own frame on, as pytest's own pruning does (a bare tbfilter=True
        # kept every frame of pytest's runner and pluggy above it)
        test_path = Path(str(report.fspath)) if path is None else path
        report.longrepr = excinfo.getrepr(
            style="short", tbfilter=lambda info: info.traceback.cut(path=test_path).filter(info)
        )
    crash = getattr(report.longrepr, "reprcrash", None)
    if exc is None or crash is None or not hasattr(crash, "message"):
        return
    if isinstance(exc, InvariantError):
        crash.message = exc.coded_message
    elif type(exc).__module__.partition(".")[0] == "pytest_ddtree":  # LoadError: its counts, codes
        crash.message = f"{type(exc).__name__}: {exc}"


def _shortened(reason: str, width: int = 80) -> str:
    """``reason`` in at most ``width`` characters, cut at a word (never mid-word)."""
    if len(reason) <= width:
        return reason
    cut = reason[: width - 3].rsplit(" ", 1)[0].rstrip(" ,;:(")
    return f"{cut}..."


def write_answer(tr: pytest.TerminalReporter, session: DDTreeSession) -> None:
    """The run's answer, last (after pytest-benchmark's tables): the recommendation with its
    reason, what the load test adds to it, and what was skipped, in a few lines."""
    if session.is_worker:
        return
    if session.runtime is None and not session.summaries and not session.load_results:
        return  # a run that never talked to an endpoint has no answer to give
    lines = answer_lines(session) + caveat_lines(session) + feature_lines(tr) + skip_lines(tr)
    if not lines:
        return
    tr.write_sep("-", "pytest-ddtree: the answer")
    for line in lines:
        tr.write_line(line)


def answer_lines(session: DDTreeSession) -> list[str]:
    """The recommendation of each temperature, then each load test's schedule joined to it."""
    from pytest_ddtree.measure.sweep.temperature import zero_only
    from pytest_ddtree.report.decision_text import sweep_answer
    from pytest_ddtree.report.load_text import load_answer

    lines: list[str] = []
    sweep: Decision[int | None] | None = None
    for t, summary in session.summaries.items():
        rec = summary.recommendation
        at = "" if zero_only(session.summaries) else f"at temperature {t:g}: "
        lines.append(f"{at}{sweep_answer(summary)}")
        if t == 0 and rec.decode_median is not None:
            sweep = rec.decision
    for test in session.load_results:
        lines.append(load_answer(test.nodeid, test.schedule, sweep))
    if session.breakeven:
        from pytest_ddtree.report.breakeven_text import breakeven_answer

        lines.extend(breakeven_answer(found) for _, found in session.breakeven)
    return lines


def caveat_lines(session: DDTreeSession) -> list[str]:
    """Every warning of the run that qualifies its answer, restated short after it (each is
    said whole above, where it was found): an answer is never read without them."""
    from pytest_ddtree.pytest_plugin import _guard
    from pytest_ddtree.report.arm_text import speculation_notes

    if not (session.summaries or session.load_results):
        return []
    settings, runtime = session.settings, session.runtime
    found: list[str] = []
    if session.interrupted:
        found.append("interrupted: a partial run")
    if settings.skip_checks:
        found.append(f"weakened run: checks skipped ({', '.join(settings.skip_checks)})")
    for summary in session.summaries.values():
        found.extend(n.head for n in speculation_notes(summary.budgets))
        found.extend(
            f"DRIFT at tree_budget={budget_label(c.tree_budget)}: the server changed during "
            "the sweep"
            for c in summary.drift
            if c.drifting
        )
    for test in session.load_results:
        found.extend(n.head for n in speculation_notes(test.stats, by_budget=True))
        found.extend(f"partial: {line}" for line in test.absent)
        found.extend(f"timeline approximate: {line}" for line in test.clock_problems)
    if runtime is not None:
        log = runtime.server_metrics
        shared = log.shared_budgets() if log is not None else None
        if shared:
            where = ", ".join(budget_label(b) for b in sorted(shared, key=budget_order))
            found.append(f"shared server: another client used it at tree_budget {where}")
        if _dialect_found_nothing(runtime):
            found.append(f"--ddtree-dialect {settings.dialect} found no statistics")
        found.extend(n.head for n in _guard.transport_notes(runtime, benign=False))
    return [f"caveat: {c}" for c in dict.fromkeys(found)]


def _skipped(tr: pytest.TerminalReporter) -> list[tuple[str, tuple[str, ...] | None]]:
    """Each skipped test's reason and, for the plugin's own skips, its kind and details."""
    from pytest_ddtree.pytest_plugin.skips import kind_of

    out = []
    for report in tr.stats.get("skipped", []):
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else ""
        out.append((reason.removeprefix("Skipped: "), kind_of(report)))
    return out


def feature_lines(tr: pytest.TerminalReporter) -> list[str]:
    """One line per feature the deployment refused (its tests skipped), or none."""
    from pytest_ddtree.pytest_plugin import features

    return features.summary_lines(kind for _, kind in _skipped(tr) if kind is not None)


def skip_lines(tr: pytest.TerminalReporter) -> list[str]:
    """One line counting the skipped tests by why (-rs lists them), or none."""
    from pytest_ddtree.pytest_plugin import features, skips

    skipped = _skipped(tr)
    if not skipped:
        return []
    why: dict[str, int] = {}
    for reason, kind in skipped:
        if kind is None:  # not the plugin's: its reason, shortened
            key = _shortened(reason) or "no reason given"
        elif kind[0] == skips.FEATURE:
            key = features.skip_key(kind)
        else:
            key = kind[0]
        why[key] = why.get(key, 0) + 1
    parts = [f"{n} {key}" for key, n in sorted(why.items(), key=lambda kv: -kv[1])]
    shown = "; ".join(parts[:3]) + ("; ..." if len(parts) > 3 else "")
    return [f"{len(skipped)} test(s) skipped: {shown} (-rs lists them)"]
