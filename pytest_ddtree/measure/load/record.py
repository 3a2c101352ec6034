"""What one ``ddtree_load`` call leaves behind, and the merged analysis of a test.

A :class:`LoadRecord` holds the *raw* samples and client health of one call in
one process (never percentiles): under pytest-xdist each worker records its
share and the controller merges the records of a test with :func:`merge_records`,
so the statistics are computed once from every raw sample. No pytest here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.core.slo import SLO, parse_slo
from pytest_ddtree.measure.arm import ArmStats
from pytest_ddtree.measure.load.arrivals import LoadPoint
from pytest_ddtree.measure.load.metrics import ClientHealth
from pytest_ddtree.measure.load.race import PointRace, Unraced
from pytest_ddtree.measure.load.recommend import Schedule
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep.race import DEFAULT_EQUIVALENCE

if TYPE_CHECKING:
    from pytest_ddtree.measure.load.hosts import HostRow, Hosts
    from pytest_ddtree.measure.load.tester import LoadResult

__all__ = ["LoadRecord", "LoadTestResult", "load_json", "merge_records"]

#: client health of one process at one (load point, tree budget)
HealthEntry = tuple[LoadPoint, int | None, ClientHealth]


@dataclass(frozen=True)
class LoadRecord:
    """The raw samples and client health of one ``ddtree_load`` call in one process."""

    nodeid: str
    samples: tuple[Sample, ...]
    health: tuple[HealthEntry, ...] = ()
    shares: int = 1
    partial: bool = False
    slo: SLO | None = None
    #: the sampling temperature of the call
    temperature: float = 0.0
    races: tuple[PointRace, ...] = ()
    mode: str = "exhaustive"
    note: Unraced = ""

    @classmethod
    def of(cls, nodeid: str, result: LoadResult, slo: SLO | None, temperature: float) -> LoadRecord:
        """What one call left for the report; ``slo`` the configured one, unless the call
        judged by an SLO of its own (a call's ``slo=`` replaces it)."""
        return cls(
            nodeid=nodeid,
            samples=result.samples,
            health=tuple((p, b, h) for (p, b), h in result.health.items()),
            shares=result.shares,
            partial=result.partial,
            slo=next((s.slo for s in result.stats), slo),
            temperature=temperature,
            races=result.races,
            mode=result.mode,
            note=result.note,
        )

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (what execnet carries from a worker)."""
        return jsonmodel.to_json(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> LoadRecord:
        """Inverse of :meth:`to_json`; a bad value raises one ``ValueError`` line."""
        return jsonmodel.from_json(cls, doc, source="load record")


def _read_slo(raw: Any, _: Any) -> SLO | None:
    return parse_slo(str(raw), "load record") if raw else None


jsonmodel.register(
    LoadRecord,
    #: the SLO as the user wrote it (``ttft=500ms,goodput=95%``)
    slo=jsonmodel.override(
        unstruct_hook=lambda slo: None if slo is None else str(slo), struct_hook=_read_slo
    ),
    order=(
        *("nodeid", "temperature", "shares", "partial", "slo", "mode", "note", "races"),
        *("samples", "health"),
    ),
)


@dataclass(frozen=True)
class LoadTestResult:
    """One load test, merged from the records of every process that ran it."""

    nodeid: str
    processes: int
    workers: tuple[str, ...]
    partial: bool
    stats: tuple[ArmStats, ...]
    schedule: Schedule
    samples: tuple[Sample, ...]
    #: the sampling temperature of the test's calls
    temperature: float = 0.0
    #: ``adaptive`` when some call raced its budgets, else ``exhaustive``; and why not, if not
    mode: str = "exhaustive"
    note: Unraced = ""
    #: per load host (a run over ``--tx`` gateways): what it sent, its clock (see ``hosts``)
    hosts: tuple[HostRow, ...] = ()
    #: the hosts of a split test that sent none of its requests, each with why (it is partial)
    absent: tuple[str, ...] = ()
    #: the hosts whose clocks the concurrency timeline cannot place (it is approximate)
    clock_problems: tuple[str, ...] = ()

    @property
    def races(self) -> tuple[PointRace, ...]:
        """The races of the raced points, in load order."""
        return tuple(c.race for c in self.schedule.choices if c.race is not None)

    @property
    def requests(self) -> int:
        """Requests sent in all (valid or not)."""
        return len(self.samples)

    @property
    def unreliable(self) -> bool:
        """True when the client was saturated at some load point."""
        return any(s.unreliable for s in self.stats)

    @property
    def where(self) -> str:
        """``2 processes (gw0, gw1)`` or ``1 process``."""
        if self.processes > 1:
            return f"{self.processes} processes ({', '.join(self.workers)})"
        return "1 process"

    def to_json(self) -> dict[str, Any]:
        """The test's entry in the ``load`` part of ``sweep.json``."""
        return {
            "nodeid": self.nodeid,
            "temperature": self.temperature,
            "processes": self.processes,
            "workers": list(self.workers),
            "partial": self.partial,
            "sweep": self.mode,
            "note": self.note,
            "requests": self.requests,
            "points": [jsonmodel.to_json(s) for s in self.stats],
            "schedule": self.schedule.to_json(),
            "samples": [s.to_json() for s in self.samples],
            **self._hosts_json(),
        }

    def _hosts_json(self) -> dict[str, Any]:
        """The hosts' part (only for a run over several hosts)."""
        if not self.hosts:
            return {}
        from pytest_ddtree.measure.load.hosts import start_skew

        origin = min((r.first_send for r in self.hosts if r.first_send is not None), default=None)
        return {
            "hosts": [r.to_json(origin) for r in self.hosts],
            "absent_hosts": list(self.absent),
            "start_skew_s": start_skew(self.hosts),
            "timeline": "approximate" if self.clock_problems else "aligned",
            "clock_problems": list(self.clock_problems),
        }


def merge_records(
    records: Iterable[LoadRecord],
    *,
    seed: int,
    hosts: Hosts | None = None,
    equivalence: float = DEFAULT_EQUIVALENCE,
) -> list[LoadTestResult]:
    """One analysis per test, from the raw samples of every process that ran it.

    ``hosts``: the load hosts of a run over several machines: the send instants move onto
    the controller's clock first, and each test gets its per-host table; ``equivalence``:
    the rule's margin.
    """
    from pytest_ddtree.measure.load.tester import analyse

    if hosts is not None:
        records = hosts.align(list(records))

    by_test: dict[tuple[str, float], list[LoadRecord]] = {}
    for record in records:  # calls at two temperatures are two analyses, never pooled
        by_test.setdefault((record.nodeid, record.temperature), []).append(record)
    out = []
    for (nodeid, _), group in by_test.items():
        samples = tuple(s for r in group for s in r.samples)
        if not samples:
            continue
        health: dict[tuple[LoadPoint, int | None], list[ClientHealth]] = {}
        for record in group:
            for point, budget, h in record.health:
                health.setdefault((point, budget), []).append(h)
        races = [race for r in group for race in r.races]
        extra = _host_fields(hosts, group)
        stats, schedule = analyse(
            samples,
            health,
            slo=group[0].slo,
            seed=seed,
            races=races,
            equivalence=equivalence,
        )
        out.append(
            LoadTestResult(
                nodeid=nodeid,
                processes=max(r.shares for r in group),
                workers=tuple(sorted({s.worker or "main" for s in samples})),
                # a host that sent nothing leaves the test below its total load: partial
                partial=any(r.partial for r in group) or bool(extra.get("absent")),
                stats=stats,
                schedule=schedule,
                samples=samples,
                temperature=group[0].temperature,
                mode="adaptive" if any(r.mode == "adaptive" for r in group) else "exhaustive",
                note=next((r.note for r in group if r.note), ""),
                **extra,
            )
        )
    return out


def _host_fields(hosts: Hosts | None, group: Sequence[LoadRecord]) -> dict[str, Any]:
    """A test's per-host table, absent hosts (it is then partial) and clock problems."""
    if hosts is None:
        return {}
    absent = tuple(hosts.absent_hosts(group))
    fields: dict[str, Any] = {"absent": absent} if absent else {}
    if hosts.spread:
        fields["hosts"] = tuple(hosts.rows(group))
        fields["clock_problems"] = tuple(hosts.timeline_problems())
    return fields


def load_json(tests: Sequence[LoadTestResult]) -> dict[str, Any]:
    """The ``load`` part of ``sweep.json``: per test, the statistics, the schedule, raw samples."""
    return {"tests": [t.to_json() for t in tests]}
