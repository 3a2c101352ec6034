"""The load client's health in words: why its latencies carry its own delay."""

from __future__ import annotations

from pytest_ddtree.measure.load.metrics import (
    BUSY_SHARE,
    CPU_LIMIT,
    LAG_LIMIT,
    STALL_SHARE,
    ClientHealth,
)

__all__ = ["client_reason"]


def client_reason(h: ClientHealth) -> str:
    """One line: why the client counts as saturated or stalled (empty when neither)."""
    lag = f"event-loop lag p99 {h.lag_p99 * 1000:.1f} ms"
    cpu = f"client CPU {h.cpu_share:.0%} of a core"
    if h.cpu_share > CPU_LIMIT:
        return f"{cpu} > {CPU_LIMIT:.0%}"
    if h.saturated:
        return f"{lag} > {LAG_LIMIT * 1000:g} ms with {cpu} > {BUSY_SHARE:.0%}"
    if h.stalled:
        return (
            f"the event loop woke late for {h.lag_share:.0%} of the point "
            f"(> {STALL_SHARE:.0%}; {lag}) at {cpu}: not its own load but the machine "
            "(or blocking work in the process) held it"
        )
    return ""
