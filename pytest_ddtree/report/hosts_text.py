"""The per-host table of a load test spread over machines, its legend and its lines.

The hosts' data (their clocks, faults and shares of a test) are ``measure/load/hosts.py``'s;
this module words them for the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_ddtree.measure.load.hosts import (
    DRIFT_LIMIT,
    UNREACHABLE,
    HostClock,
    HostRow,
    start_skew,
)

__all__ = ["absent_line", "approximate_lines", "render_hosts"]


def _clock_cells(clock: HostClock) -> tuple[str, str]:
    """``offset ± error`` and drift, in milliseconds, for the table."""
    first = clock.start or clock.end
    offset = "?" if first is None else f"{first.offset * 1000:+.2f}±{first.error * 1000:.2f}"
    drift = "?" if clock.drift is None else f"{clock.drift * 1000:+.2f}"
    return offset, drift


_HEAD = (
    "host",
    "workers",
    "requests",
    "valid",
    "client CPU",
    "client",
    "offset ms",
    "drift ms",
    "first send",
)


def render_hosts(rows: Sequence[HostRow]) -> list[str]:
    """The per-host table of one load test, its legend and the start skew."""
    origin = min((r.first_send for r in rows if r.first_send is not None), default=None)
    body = [_HEAD, *(_host_cells(r, origin) for r in rows)]
    widths = [max(len(row[i]) for row in body) for i in range(len(_HEAD))]
    lines = [
        "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in body
    ]
    lines.append(
        "(offset: the host's wall clock minus the controller's, ± half the round trip over the "
        "execnet channel, at the start; drift: its change by the end; latencies are measured on "
        "each host's own monotonic clock and never corrected; first send: after the first host's)"
    )
    skew = start_skew(rows)
    if skew is not None:
        lines.append(
            f"start skew: {skew * 1000:.1f} ms at worst between the hosts' first requests of a "
            "load point at a budget (each starts together on every host)"
        )
    return lines


def approximate_lines(problems: Sequence[str]) -> list[str]:
    """What makes the timeline approximate, one line per host named."""
    return [
        f"timeline approximate: {line} (limit {DRIFT_LIMIT * 1000:g} ms); the achieved "
        "concurrency across hosts carries that error, the latencies do not"
        for line in problems
    ]


def _host_cells(row: HostRow, origin: float | None) -> tuple[str, ...]:
    clock = row.host.clock
    offset, drift = ("0 (controller)", "0") if clock is None else _clock_cells(clock)
    cpu = (
        f"{row.cpu_seconds / row.tokens * 1e6:.0f}us/tok, peak {row.cpu_peak:.0%}"
        if row.tokens
        else "-"
    )
    first = (
        "-"
        if row.first_send is None or origin is None
        else f"+{(row.first_send - origin) * 1000:.1f} ms"
    )
    return (
        row.host.name,
        ",".join(row.host.workers),
        str(row.requests),
        str(row.valid),
        cpu,
        row.client if row.requests else _short(row.host.fault) or "-",
        offset,
        drift,
        first,
    )


def _short(fault: str) -> str:
    """A fault in the table's cell (the partial line gives an unreachable host's reason)."""
    return UNREACHABLE if fault.startswith(UNREACHABLE) else fault


def absent_line(absent: Sequence[str]) -> str:
    """The partial answer's one line, naming each host that sent nothing."""
    return (
        "partial: "
        + "; ".join(absent)
        + " -- the statistics are from the other hosts' samples, below the total load"
    )
