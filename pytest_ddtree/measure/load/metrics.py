"""The load's side of an arm's statistics: the load generator's health, and a load point's
arm built from the samples of every process that sent it.

Everything is computed from raw samples, never from other summaries: xdist workers send
their samples, the controller concatenates them and computes the statistics once
(:class:`~pytest_ddtree.measure.arm.ArmStats`, whose docstring gives the conventions), so a
split run and a single-process run of the same samples give the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.core.budget import budget_order
from pytest_ddtree.core.slo import SLO
from pytest_ddtree.measure.arm import ArmStats
from pytest_ddtree.measure.sample import Sample

__all__ = [
    "ClientHealth",
    "chain_health",
    "merge_health",
    "summarize_point",
    "table_order",
]

#: the client is called saturated above this event-loop lag (p99, seconds): timer wake-ups
#: on a busy shared machine jitter by a few milliseconds; beyond 10 ms the client's own
#: queueing is a visible part of a TTFT or an inter-token gap ...
LAG_LIMIT = 0.010
#: ... or above this share of one core spent by the event-loop thread
CPU_LIMIT = 0.90
#: a lag is the load generator's own queueing only while its loop thread is busy: at least
#: this share of one core (below it, the loop was idle and late because the machine did
#: not run it, which is STALLED, not SATURATED; measured: benchmarks/bench_lag.py)
BUSY_SHARE = 0.50
#: the client counts as stalled (latencies unreliable, not saturated) when its loop woke
#: late for more than this share of the point's wall time, summed over the lag samples
#: (each sample's lateness beyond the timer slack, ``wire.health.SLACK``)
STALL_SHARE = 0.05


@dataclass(frozen=True)
class ClientHealth:
    """How busy the load generator itself was during one run (one process).

    ``cpu_seconds`` is the CPU time of the event-loop thread over the run window
    ``wall_seconds``; ``lag_*`` is how late the loop woke a timer. A saturated
    client queues requests and events itself, which would read as server latency.
    """

    cpu_seconds: float
    wall_seconds: float
    requests: int
    tokens: int
    lag_p99: float
    lag_max: float
    lag_samples: int
    workers: int = 1
    validation_cpu_seconds: float = 0.0
    #: requests sent again on a fresh connection after a reused one failed before any byte
    retries: int = 0
    #: the median lag, and the lag summed over the samples (seconds the loop woke late)
    lag_p50: float = 0.0
    lag_total: float = 0.0

    @property
    def lag_share(self) -> float:
        """The share of the wall time the loop woke late (per process, on average)."""
        return self.lag_total / self.wall_seconds / self.workers if self.wall_seconds > 0 else 0.0

    @property
    def cpu_share(self) -> float:
        """CPU of the loop thread as a share of one core (per process, on average)."""
        return self.cpu_seconds / self.wall_seconds / self.workers if self.wall_seconds > 0 else 0.0

    @property
    def cpu_per_request(self) -> float | None:
        """Client CPU seconds per request while streaming."""
        return self.cpu_seconds / self.requests if self.requests else None

    @property
    def cpu_per_token(self) -> float | None:
        """Client CPU seconds per streamed output token."""
        return self.cpu_seconds / self.tokens if self.tokens else None

    @property
    def saturated(self) -> bool:
        """True when the client's own load queues its work: its loop is busy (CPU over
        ``CPU_LIMIT``), or late (lag p99 over ``LAG_LIMIT``) while busy (``BUSY_SHARE``)."""
        if self.cpu_share > CPU_LIMIT:
            return True
        return self.lag_p99 > LAG_LIMIT and self.cpu_share > BUSY_SHARE

    @property
    def stalled(self) -> bool:
        """True when the machine did not run an idle client for a visible share of the
        point (``STALL_SHARE``): not its own load, but its latencies carry the delay."""
        return not self.saturated and self.lag_share > STALL_SHARE

    @property
    def unreliable(self) -> bool:
        """The latencies may hold the client's own delay (saturated or stalled)."""
        return self.saturated or self.stalled

    def state(self) -> str:
        """``SATURATED``, ``STALLED`` or ``ok``."""
        return "SATURATED" if self.saturated else "STALLED" if self.stalled else "ok"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON, with the derived figures."""
        return jsonmodel.to_json(self)


jsonmodel.register(
    ClientHealth,
    #: the derived figures, written for a reader of sweep.json (ignored when read back)
    derived={
        "cpu_share": lambda h: h.cpu_share,
        "cpu_per_request": lambda h: h.cpu_per_request,
        "cpu_per_token": lambda h: h.cpu_per_token,
        "saturated": lambda h: h.saturated,
        "lag_share": lambda h: h.lag_share,
        "stalled": lambda h: h.stalled,
    },
    order=(
        *("cpu_seconds", "wall_seconds", "requests", "tokens", "lag_p99", "lag_max"),
        *("lag_samples", "workers", "validation_cpu_seconds", "retries", "cpu_share"),
        *("cpu_per_request", "cpu_per_token", "saturated", "lag_p50", "lag_total"),
        *("lag_share", "stalled"),
    ),
)


def chain_health(runs: Sequence[ClientHealth]) -> ClientHealth:
    """One health figure for runs one process sent one after the other (a raced budget)."""
    if len(runs) == 1:
        return runs[0]
    return _combine(runs, in_turn=True)


def merge_health(parts: Sequence[ClientHealth]) -> ClientHealth | None:
    """One health figure for processes that shared a load point (worst lag, summed CPU)."""
    if not parts:
        return None
    return _combine(parts, in_turn=False)


def _combine(parts: Sequence[ClientHealth], *, in_turn: bool) -> ClientHealth:
    # runs in turn add their wall time and share one process's workers; processes side
    # by side overlap in time and add their workers
    return ClientHealth(
        cpu_seconds=sum(p.cpu_seconds for p in parts),
        wall_seconds=(sum if in_turn else max)(p.wall_seconds for p in parts),
        requests=sum(p.requests for p in parts),
        tokens=sum(p.tokens for p in parts),
        lag_p99=max(p.lag_p99 for p in parts),
        lag_max=max(p.lag_max for p in parts),
        lag_samples=sum(p.lag_samples for p in parts),
        workers=parts[0].workers if in_turn else sum(p.workers for p in parts),
        validation_cpu_seconds=sum(p.validation_cpu_seconds for p in parts),
        retries=sum(p.retries for p in parts),
        lag_p50=max(p.lag_p50 for p in parts),
        lag_total=sum(p.lag_total for p in parts),
    )


def summarize_point(
    samples: Sequence[Sample],
    *,
    slo: SLO | None = None,
    client: ClientHealth | None = None,
) -> ArmStats:
    """Statistics of the samples of one budget × load point (any number of processes)."""
    if not samples:
        raise ValueError("summarize_point: no samples")
    # a fixed order whatever order the processes' samples were merged in: the bootstrap
    # of the recommendation then gives the same interval for the same samples
    ordered = sorted(samples, key=lambda s: (s.start, s.worker or "", s.seconds, s.prompt_id))
    return ArmStats.of(ordered, slo=slo, client=client)


def table_order(stats: Iterable[ArmStats]) -> list[ArmStats]:
    """Rows of a load table: by budget (the server's own first, then numerically), then
    by load point (concurrency before rate, each by its number), whatever the run order."""

    def key(s: ArmStats) -> tuple[int, str, float, float]:
        b = s.tree_budget
        p = s.point
        return (budget_order(b), p.mode, p.value, p.burstiness)

    return sorted(stats, key=key)
