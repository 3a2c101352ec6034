"""The statistics of one budget × load point.

Everything is computed from raw samples, never from other summaries: xdist
workers send their samples, the controller concatenates them and computes the
percentiles once, so a split run and a single-process run of the same samples
give the same numbers.

Conventions (those of the common serving benchmarks):

- TTFT: request sent to the first event carrying content.
- ITL: the gaps between consecutive content events, pooled over requests. A
  speculative server sends several tokens per event, so this is the gap a
  reader sees, not a per-token figure.
- TPOT: the inverse of the decode rate, ``(e2e - TTFT) / (output tokens - tokens of the
  first content event)`` per request (``wire.completion.decode_rate``, the sweep's formula
  too); None with fewer than two content events.
- e2e: request sent to the last byte.
- Achieved concurrency: the time-weighted number of requests in flight over the
  window from the first send to the last byte (the sum of e2e over the span).
- Goodput: the share (and rate) of requests that are valid and within every SLO.

Invalid requests never enter the latency percentiles; they are counted and
reported with their codes and first evidence.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.core.budget import budget_order
from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.core.slo import SLO
from pytest_ddtree.measure.load.arrivals import LoadPoint
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep import quantile
from pytest_ddtree.measure.sweep.statistics import acceptance_text, no_spec_stats_line
from pytest_ddtree.measure.tally import SpecTally, TalliedSpeculation

__all__ = [
    "PERCENTILES",
    "ClientHealth",
    "Percentiles",
    "PointStats",
    "acceptance_cell",
    "chain_health",
    "merge_health",
    "percentiles",
    "speculation_warnings",
    "summarize_point",
    "table_order",
]

PERCENTILES = (0.50, 0.90, 0.99)

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

    def reason(self) -> str:
        """One line: why the client counts as saturated or stalled (empty when neither)."""
        lag = f"event-loop lag p99 {self.lag_p99 * 1000:.1f} ms"
        cpu = f"client CPU {self.cpu_share:.0%} of a core"
        if self.cpu_share > CPU_LIMIT:
            return f"{cpu} > {CPU_LIMIT:.0%}"
        if self.saturated:
            return f"{lag} > {LAG_LIMIT * 1000:g} ms with {cpu} > {BUSY_SHARE:.0%}"
        if self.stalled:
            return (
                f"the event loop woke late for {self.lag_share:.0%} of the point "
                f"(> {STALL_SHARE:.0%}; {lag}) at {cpu}: not its own load but the machine "
                "(or blocking work in the process) held it"
            )
        return ""

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


@dataclass(frozen=True)
class Percentiles:
    """p50/p90/p99/max (and the mean) of one latency, seconds; n values."""

    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    def to_json(self) -> dict[str, Any]:
        """Milliseconds, for reports."""
        return {
            "n": self.n,
            "mean_ms": self.mean * 1000,
            "p50_ms": self.p50 * 1000,
            "p90_ms": self.p90 * 1000,
            "p99_ms": self.p99 * 1000,
            "max_ms": self.max * 1000,
        }


def percentiles(values: Iterable[float]) -> Percentiles | None:
    """Linear-interpolated (type 7) percentiles; None for no values."""
    xs = sorted(values)
    if not xs:
        return None
    p50, p90, p99 = (quantile(xs, q) for q in PERCENTILES)
    return Percentiles(len(xs), statistics.fmean(xs), p50, p90, p99, xs[-1])


@dataclass(frozen=True)
class PointStats(TalliedSpeculation):
    """Everything measured at one tree budget × load point."""

    point: LoadPoint
    tree_budget: int | None
    requests: int
    valid: int
    codes: Mapping[str, int]
    first_evidence: str
    ttft: Percentiles | None
    itl: Percentiles | None
    tpot: Percentiles | None
    e2e: Percentiles | None
    duration: float
    output_tokens_per_second: float
    requests_per_second: float
    achieved_concurrency: float
    slo: SLO | None
    good: int
    mean_acceptance: float | None
    client: ClientHealth | None
    workers: tuple[str, ...] = ()
    tpot_values: tuple[float, ...] = field(default=(), repr=False)
    ttft_offset: Percentiles | None = None
    #: requests whose timing-based checks were withheld (the client was saturated)
    withheld: int = 0
    #: mean accepted / drafted tokens, for a server that reports counts but no length
    mean_acceptance_rate: float | None = None
    #: valid requests whose output token count is unknown (no usage, nothing counted it)
    uncounted: int = 0
    #: the speculation figures, counted as the sweep counts them
    spec: SpecTally = field(default_factory=SpecTally)

    @property
    def invalid(self) -> int:
        """Requests that broke an invariant (or did not complete)."""
        return self.requests - self.valid

    @property
    def goodput_share(self) -> float:
        """Share of all requests that were valid and within every SLO."""
        return self.good / self.requests if self.requests else 0.0

    @property
    def goodput_rate(self) -> float:
        """Good requests per second."""
        return self.good / self.duration if self.duration > 0 else 0.0

    @property
    def slo_met(self) -> bool | None:
        """None without an SLO; else whether the good share reached the required one."""
        if self.slo is None:
            return None
        return self.goodput_share + 1e-12 >= self.slo.goodput

    @property
    def unreliable(self) -> bool:
        """The client was saturated: latencies may include its own queueing."""
        return self.client is not None and self.client.unreliable

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for sweep.json."""

        def pct(p: Percentiles | None) -> dict[str, Any] | None:
            return p.to_json() if p is not None else None

        return {
            "point": jsonmodel.to_json(self.point),
            "label": self.point.label,
            "tree_budget": self.tree_budget,
            "requests": self.requests,
            "valid": self.valid,
            "invalid": self.invalid,
            "codes": dict(self.codes),
            "first_evidence": self.first_evidence,
            "ttft": pct(self.ttft),
            "itl": pct(self.itl),
            "tpot": pct(self.tpot),
            "e2e": pct(self.e2e),
            "ttft_minus_server": pct(self.ttft_offset),
            "timing_checks_withheld": self.withheld,
            "duration_s": self.duration,
            "output_tokens_per_second": self.output_tokens_per_second,
            "requests_per_second": self.requests_per_second,
            "achieved_concurrency": self.achieved_concurrency,
            "slo": self.slo.to_json() if self.slo is not None else None,
            "good": self.good,
            "goodput_share": self.goodput_share,
            "goodput_rate": self.goodput_rate,
            "slo_met": self.slo_met,
            "mean_acceptance_length": self.mean_acceptance,
            "mean_acceptance_rate": self.mean_acceptance_rate,
            **self.spec_json(),
            "uncounted": self.uncounted,
            "client": jsonmodel.to_json(self.client) if self.client is not None else None,
            "unreliable": self.unreliable,
            "workers": list(self.workers),
        }


def summarize_point(
    samples: Sequence[Sample],
    *,
    slo: SLO | None = None,
    client: ClientHealth | None = None,
) -> PointStats:
    """Statistics of the samples of one budget × load point (any number of processes)."""
    if not samples:
        raise ValueError("summarize_point: no samples")
    # a fixed order whatever order the processes' samples were merged in: the bootstrap
    # of the recommendation then gives the same interval for the same samples
    samples = sorted(samples, key=lambda s: (s.start, s.worker or "", s.seconds, s.prompt_id))
    point, budget = samples[0].load_point, samples[0].tree_budget
    for s in samples:
        if s.load_point != point or s.tree_budget != budget:
            raise ValueError(
                f"summarize_point: mixed points {point.label}/{budget} and "
                f"{s.load_point.label}/{s.tree_budget}"
            )
    valid = [s for s in samples if s.valid]
    codes: Counter[str] = Counter()
    first_evidence = ""
    for s in samples:
        if not s.valid:
            codes.update(s.codes or ("error",))
            if not first_evidence:
                first_evidence = s.evidence or (s.error or "")
    # a raced budget is sent in runs with other budgets' runs in between: its span is the
    # sum of its runs' spans, each from its first send to its last byte
    runs: dict[int, list[Sample]] = {}
    for s in samples:
        runs.setdefault(s.round, []).append(s)
    span = max(
        math.fsum(max(s.end for s in r) - min(s.start for s in r) for r in runs.values()), 1e-9
    )
    busy = math.fsum(s.seconds for s in samples)  # exact: the order of merged samples is moot
    tokens = sum(s.completion_tokens or 0 for s in valid)
    tpots = [t for s in valid if (t := s.tpot) is not None]
    good = 0
    if slo is not None:
        good = sum(1 for s in valid if not slo.misses(s.slo_metrics()))
    offsets = [
        s.ttft - s.server_ttft for s in valid if s.ttft is not None and s.server_ttft is not None
    ]
    accept = [a for s in valid if (a := s.mean_acceptance_length) is not None]
    rates = [r for s in valid if (r := s.acceptance_rate) is not None]
    return PointStats(
        point=point,
        tree_budget=budget,
        requests=len(samples),
        valid=len(valid),
        codes=dict(codes),
        first_evidence=first_evidence,
        ttft=percentiles(s.ttft for s in valid if s.ttft is not None),
        itl=percentiles(g for s in valid for g in s.gaps),
        tpot=percentiles(tpots),
        e2e=percentiles(s.seconds for s in valid),
        duration=span,
        output_tokens_per_second=tokens / span,
        requests_per_second=len(valid) / span,
        achieved_concurrency=busy / span,
        slo=slo,
        good=good,
        mean_acceptance=statistics.fmean(accept) if accept else None,
        client=client,
        workers=tuple(sorted({s.worker or "main" for s in samples})),
        tpot_values=tuple(tpots),
        ttft_offset=percentiles(offsets),
        withheld=sum(1 for s in samples if s.withheld),
        mean_acceptance_rate=statistics.fmean(rates) if rates else None,
        uncounted=sum(1 for s in valid if s.completion_tokens is None),
        spec=SpecTally.of(samples),
    )


def table_order(stats: Iterable[PointStats]) -> list[PointStats]:
    """Rows of a load table: by budget (the server's own first, then numerically), then
    by load point (concurrency before rate, each by its number), whatever the run order."""

    def key(s: PointStats) -> tuple[int, str, float, float]:
        b = s.tree_budget
        p = s.point
        return (budget_order(b), p.mode, p.value, p.burstiness)

    return sorted(stats, key=key)


def acceptance_cell(s: PointStats) -> str:
    """The load point's acceptance cell (see ``sweep.statistics.acceptance_text``)."""
    return acceptance_text(
        s.mean_acceptance, s.mean_acceptance_rate, s.never_drafted, s.no_spec_stats
    )


def speculation_warnings(stats: Sequence[PointStats]) -> list[str]:
    """One warning per budget whose load points sent no speculative statistics at all, and
    one per budget whose load points drafted no token at all, with the counts."""
    quiet: dict[int | None, list[PointStats]] = {}
    for s in stats:
        if s.no_spec_stats:
            quiet.setdefault(s.tree_budget, []).append(s)
    lines = [
        no_spec_stats_line(
            f"budget {budget_label(budget)} ({', '.join(s.point.label for s in points)})",
            sum(s.stats_asked for s in points),
        )
        for budget, points in quiet.items()
    ]
    by_budget: dict[int | None, list[PointStats]] = {}
    for s in stats:
        if s.never_drafted:
            by_budget.setdefault(s.tree_budget, []).append(s)
    return lines + [
        f"speculation never drafted at budget {budget_label(budget)}: 0 draft tokens in "
        f"{sum(s.draft_reports for s in points)} request(s) that reported their drafts, at "
        f"{', '.join(s.point.label for s in points)}; these timings are the target model's "
        "alone, not speculative decoding"
        for budget, points in by_budget.items()
    ]
