"""The load hosts of a run spread over machines: their clocks, their faults, their table.

Under pytest-xdist with ``--tx`` gateways every worker lives on some host (``local`` for a
``popen`` worker, the ``ssh=`` or ``socket=`` address otherwise). The controller estimates
each remote host's wall-clock offset to its own, NTP-style, at the start and at the end of
the run (``HostClock``), and keeps what went wrong with a host (``Host.fault``). With those:

- latencies are measured on each host's monotonic clock and never corrected: only the
  send instants (``Sample.start``, wall clock) move onto the controller's clock (``align``),
  for the concurrency timeline;
- a host whose offset is unknown or moved more than ``DRIFT_LIMIT`` during the run is named,
  and the timeline is approximate (``timeline_problems``);
- per load test, a table per host: requests, valid, client CPU, saturated or not, offset and
  drift, when its first request went out (``host_rows``); a host that sent nothing is named
  with its fault, and the answer is partial (``absent_hosts``).

No pytest here; the execnet side is ``pytest_plugin.remote``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_ddtree.measure.load.record import LoadRecord

__all__ = [
    "DRIFT_LIMIT",
    "LOCAL",
    "UNREACHABLE",
    "Barrier",
    "ClockReading",
    "Host",
    "HostClock",
    "HostRow",
    "Hosts",
    "Release",
]

#: the name of the controller's own machine (``popen`` workers share its clock)
LOCAL = "local"
#: the fault of a host whose workers could not reach the endpoint (their tests skipped)
UNREACHABLE = "cannot reach the endpoint"
#: a host's offset may move this much (seconds) over the run, or be this uncertain (± RTT/2),
#: before the concurrency timeline is called approximate: a millisecond-scale error is small
#: beside the time-to-first-token of a loaded server, which the timeline is read against
DRIFT_LIMIT = 0.005


@dataclass(frozen=True)
class ClockReading:
    """One offset estimate: the host's wall clock minus the controller's, ± ``error``.

    From the exchange with the smallest round trip of a few: the controller stamps ``sent``
    and ``received``, the host its own ``remote`` time in between; the offset is
    ``remote - (sent + received) / 2``, within half the round trip either way.
    """

    offset: float
    error: float
    #: the controller's wall time of the reading
    at: float

    @classmethod
    def best(cls, exchanges: Iterable[tuple[float, float, float]]) -> ClockReading | None:
        """The reading of the quickest ``(sent, remote, received)`` exchange (None: none)."""
        done = sorted(exchanges, key=lambda e: e[2] - e[0])
        if not done:
            return None
        sent, remote, received = done[0]
        return cls(remote - (sent + received) / 2, (received - sent) / 2, (sent + received) / 2)


@dataclass(frozen=True)
class HostClock:
    """A host's offset at the start and at the end of the run (None: not measured)."""

    start: ClockReading | None = None
    end: ClockReading | None = None

    @property
    def drift(self) -> float | None:
        """How far the offset moved between the start and the end (seconds)."""
        if self.start is None or self.end is None:
            return None
        return self.end.offset - self.start.offset

    def offset_at(self, t: float) -> float | None:
        """The offset at the controller's time ``t`` (linear between the two readings)."""
        a, b = self.start, self.end
        if a is None or b is None:
            return (a or b).offset if (a or b) is not None else None  # type: ignore[union-attr]
        if b.at <= a.at:
            return b.offset
        share = min(1.0, max(0.0, (t - a.at) / (b.at - a.at)))
        return a.offset + share * (b.offset - a.offset)

    def problem(self) -> str:
        """Why the timeline cannot place this host within ``DRIFT_LIMIT`` (empty: it can)."""
        if self.start is None and self.end is None:
            return "clock offset unknown"
        worst = max(r.error for r in (self.start, self.end) if r is not None)
        if worst > DRIFT_LIMIT:
            return f"clock offset uncertain by ±{worst * 1000:.1f} ms"
        drift = self.drift
        if drift is not None and abs(drift) > DRIFT_LIMIT:
            return f"clock drifted {drift * 1000:+.1f} ms during the run"
        return ""

    def to_json(self) -> dict[str, Any]:
        def reading(r: ClockReading | None) -> dict[str, float] | None:
            return None if r is None else {"offset_s": r.offset, "error_s": r.error, "at": r.at}

        return {"start": reading(self.start), "end": reading(self.end), "drift_s": self.drift}


#: where a worker is in a split load test: (test node id, call, run); every host runs the
#: same calls and runs of a test in the same order, each run a load point at a budget
Mark = tuple[str, int, int]
#: seconds from the last arrival at a run to its start: time for the instant to reach each
#: host (raised to four times the largest clock uncertainty, half a round trip, of a host)
LEAD = 0.05


@dataclass
class Barrier:
    """Each run of a split load test starts at one instant on every host.

    A worker arrives at its run's mark and waits. Once every worker expected there has
    arrived, all of them are released to start ``lead`` seconds from now. Expected: the live
    workers that have not finished the test, nor arrived at a later mark of it (a call that
    ended early on one host); so a host that cannot reach the endpoint (its tests skipped),
    died, or left a call early holds no one up.
    """

    lead: float = LEAD
    live: set[str] = field(default_factory=set)
    #: per mark, the workers waiting there
    waiting: dict[Mark, set[str]] = field(default_factory=dict)
    #: the last mark each worker arrived at
    last: dict[str, Mark] = field(default_factory=dict)
    #: (worker, test node id) of each test a worker has finished
    done: set[tuple[str, str]] = field(default_factory=set)

    def join(self, worker: str) -> None:
        self.live.add(worker)

    def arrive(self, worker: str, mark: Mark, now: float) -> list[Release]:
        self.last[worker] = mark
        self.waiting.setdefault(mark, set()).add(worker)
        return self._releases(now)

    def finish(self, worker: str, nodeid: str, now: float) -> list[Release]:
        self.done.add((worker, nodeid))
        return self._releases(now)

    def leave(self, worker: str, now: float) -> list[Release]:
        self.live.discard(worker)
        return self._releases(now)

    def expected(self, mark: Mark) -> set[str]:
        """The workers a run waits for."""
        nodeid = mark[0]
        return {
            w
            for w in self.live
            if (w, nodeid) not in self.done
            and not (w in self.last and self.last[w][0] == nodeid and self.last[w] > mark)
        }

    def _releases(self, now: float) -> list[Release]:
        out = []
        for mark, here in list(self.waiting.items()):
            if self.expected(mark) <= here:
                del self.waiting[mark]
                out.append(Release(mark, frozenset(here), now + self.lead))
        return out


@dataclass(frozen=True)
class Release:
    """The workers waiting at ``mark`` start at ``at`` (the controller's wall clock)."""

    mark: Mark
    workers: frozenset[str]
    at: float


@dataclass(frozen=True)
class Host:
    """One load host: its workers, its clock (None: the controller's own), what went wrong."""

    name: str
    workers: tuple[str, ...]
    clock: HostClock | None = None
    #: one line: the host died mid-run, could not reach the endpoint ... (empty: none)
    fault: str = ""

    @property
    def local(self) -> bool:
        """True for the controller's machine (its clock, no offset)."""
        return self.clock is None


@dataclass
class Hosts:
    """The controller's ledger of hosts, by worker id."""

    by_worker: dict[str, Host] = field(default_factory=dict)
    #: where each run of a split load test starts together on every host
    barrier: Barrier = field(default_factory=lambda: Barrier())
    #: each worker's gate channel (execnet), the barrier's answers go there
    gates: dict[str, Any] = field(default_factory=dict)

    def add(self, worker: str, name: str, clock: HostClock | None) -> None:
        """A worker set up on host ``name`` (its clock read at the start, or the controller's)."""
        known = self.host_of(name)
        workers = (*known.workers, worker) if known else (worker,)
        host = Host(name, workers, clock if known is None or known.clock is None else known.clock)
        for w in workers:
            self.by_worker[w] = host

    def host_of(self, name: str) -> Host | None:
        return next((h for h in self.by_worker.values() if h.name == name), None)

    def update(self, worker: str, *, end: ClockReading | None = None, fault: str = "") -> None:
        """The clock read at the end, or a fault, for the host of ``worker``."""
        host = self.by_worker.get(worker)
        if host is None:
            return
        clock = host.clock
        if clock is not None and end is not None:
            clock = replace(clock, end=end)
        where = f"{fault} ({worker})" if fault and len(host.workers) > 1 else fault
        new = replace(host, clock=clock, fault=host.fault or where)
        for w in host.workers:
            self.by_worker[w] = new

    @property
    def hosts(self) -> list[Host]:
        """Each host once, in the order of its first worker."""
        return list({h.name: h for h in self.by_worker.values()}.values())

    @property
    def spread(self) -> bool:
        """True when some worker runs on another machine (the table is worth printing)."""
        return any(not h.local for h in self.hosts)

    def align(self, records: Sequence[LoadRecord]) -> list[LoadRecord]:
        """The records with every send instant on the controller's clock (latencies as they
        were: each measured on its own host's monotonic clock)."""
        return [self._aligned(r) for r in records]

    def _aligned(self, record: LoadRecord) -> LoadRecord:
        samples = []
        for s in record.samples:
            host = self.by_worker.get(s.worker or "")
            offset = host.clock.offset_at(s.start) if host and host.clock else None
            samples.append(s if not offset else replace(s, start=s.start - offset))
        return replace(record, samples=tuple(samples))

    def timeline_problems(self) -> list[str]:
        """One line per host the timeline cannot place within ``DRIFT_LIMIT``."""
        return [
            f"{h.name}: {h.clock.problem()}"
            for h in self.hosts
            if h.clock is not None and h.clock.problem()
        ]

    def absent_hosts(self, records: Sequence[LoadRecord]) -> list[str]:
        """The hosts of a split load test (``--dist each``) that sent none of its requests,
        one line each with why, where known."""
        if not records or max(r.shares for r in records) < 2:
            return []
        sent = {s.worker for r in records for s in r.samples}
        return [
            f"{h.name} ({', '.join(h.workers)}): {h.fault or 'sent no request of this test'}"
            for h in self.hosts
            if not sent & set(h.workers)
        ]

    def unreachable(self) -> list[tuple[str, str]]:
        """Each host that could not reach the endpoint (its tests did not run), with its one
        line."""
        return [
            (h.name, f"ddtree: host {h.name} ({', '.join(h.workers)}) {h.fault}")
            for h in self.hosts
            if h.fault.startswith(UNREACHABLE)
        ]

    @property
    def none_reached(self) -> bool:
        """True when every host failed to reach the endpoint (nothing ran against it)."""
        return bool(self.hosts) and all(h.fault.startswith(UNREACHABLE) for h in self.hosts)

    def rows(self, records: Sequence[LoadRecord]) -> list[HostRow]:
        """Per host, what it sent in one load test (``records``: the test's, aligned)."""
        return [_row(h, records) for h in self.hosts]

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {
                "host": h.name,
                "workers": list(h.workers),
                "clock": None if h.clock is None else h.clock.to_json(),
                "fault": h.fault,
            }
            for h in self.hosts
        ]


@dataclass(frozen=True)
class HostRow:
    """One host's share of one load test."""

    host: Host
    requests: int
    valid: int
    cpu_seconds: float
    tokens: int
    #: the largest share of a core the host's event loops used at a point
    cpu_peak: float
    saturated: bool
    stalled: bool
    #: the controller-clock instant of the host's first request (None: it sent none)
    first_send: float | None
    #: the same, per run (load point, budget, round) the host sent in
    run_starts: dict[tuple[str, int | None, int], float] = field(default_factory=dict)

    @property
    def client(self) -> str:
        """``SATURATED``, ``STALLED`` or ``ok``."""
        return "SATURATED" if self.saturated else "STALLED" if self.stalled else "ok"

    def to_json(self, skew_origin: float | None) -> dict[str, Any]:
        clock = self.host.clock
        return {
            "host": self.host.name,
            "workers": list(self.host.workers),
            "requests": self.requests,
            "valid": self.valid,
            "client_cpu_seconds": self.cpu_seconds,
            "client_cpu_per_token_s": self.cpu_seconds / self.tokens if self.tokens else None,
            "client_cpu_peak_share": self.cpu_peak,
            "client": self.client,
            "clock": None if clock is None else clock.to_json(),
            "first_send_after_s": None
            if self.first_send is None or skew_origin is None
            else self.first_send - skew_origin,
            "fault": self.host.fault,
        }


def _row(host: Host, records: Sequence[LoadRecord]) -> HostRow:
    mine = [r for r in records if r.samples and r.samples[0].worker in host.workers]
    samples = [s for r in mine for s in r.samples]
    health = [h for r in mine for _, _, h in r.health]
    return HostRow(
        host=host,
        requests=len(samples),
        valid=sum(s.valid for s in samples),
        cpu_seconds=sum(h.cpu_seconds for h in health),
        tokens=sum(h.tokens for h in health),
        cpu_peak=max((h.cpu_share for h in health), default=0.0),
        saturated=any(h.saturated for h in health),
        stalled=any(h.stalled for h in health),
        first_send=min((s.start for s in samples), default=None),
        run_starts=_run_starts(samples),
    )


def _run_starts(samples: Iterable[Any]) -> dict[tuple[str, int | None, int], float]:
    starts: dict[tuple[str, int | None, int], float] = {}
    for s in samples:
        key = (s.point.label if s.point is not None else "", s.tree_budget, s.round)
        starts[key] = min(starts.get(key, s.start), s.start)
    return starts


def start_skew(rows: Sequence[HostRow]) -> float | None:
    """How far apart the hosts' first requests of a run (a load point at a budget) went out,
    at worst over the runs two hosts or more sent in (seconds; None: there is none)."""
    runs: dict[tuple[str, int | None, int], list[float]] = {}
    for row in rows:
        for key, start in row.run_starts.items():
            runs.setdefault(key, []).append(start)
    spreads = [max(s) - min(s) for s in runs.values() if len(s) > 1]
    return max(spreads) if spreads else None
