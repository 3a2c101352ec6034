"""One arm of the measurement and its statistics: :class:`ArmStats`.

An arm is one point of the experiment: a tree budget × a load point (the serial sweep is
the point C=1, ``SERIAL``). The budget sweep and the load test both summarise each arm as an
:class:`ArmStats`, with one set of names for the figures they share; as pytest-benchmark's
``Stats``, it holds the arm's samples and computes each figure from them when first read
(``functools.cached_property``), so a figure one path never reads is never computed.

Timing and acceptance figures use the valid samples only: an invalid response measured
nothing worth reporting. Invalid requests are counted, with their codes (``error`` for a
request that did not complete) and first evidence.

Conventions (those of the common serving benchmarks):

- decode rate: ``wire.completion.decode_rate`` per request; its median, quartiles and a
  seeded bootstrap interval of the median;
- TTFT: request sent to the first event carrying content;
- ITL: the gaps between consecutive content events, pooled over requests (a speculative
  server sends several tokens per event, so this is the gap a reader sees);
- TPOT: the inverse of the decode rate, per request;
- e2e: request sent to the last byte;
- achieved concurrency: the time-weighted number of requests in flight over the arm's span;
- goodput: the share (and rate) of requests that are valid and within every SLO.

``sweep.json`` writes an arm in one of two forms, both through the one converter
(``core.jsonmodel``): a load point's (``jsonmodel.to_json``) and the sweep's budget row
(:data:`budget_json`), each with the keys it had before the two paths shared this type.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.core.slo import SLO
from pytest_ddtree.measure.load.arrivals import LoadPoint
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep.bootstrap import bootstrap_ci, bootstrap_median_ci, quantile
from pytest_ddtree.measure.sweep.depth import DepthProfile, depth_profile
from pytest_ddtree.measure.tally import SpecTally

if TYPE_CHECKING:
    from pytest_ddtree.measure.load.metrics import ClientHealth

__all__ = [
    "PERCENTILES",
    "ArmStats",
    "Percentiles",
    "Place",
    "SpeculationGap",
    "budget_json",
    "percentiles",
    "speculation_gaps",
]

PERCENTILES = (0.50, 0.90, 0.99)


@dataclass(frozen=True)
class Percentiles:
    """p50/p90/p99/max (and the mean) of one latency, seconds; n values."""

    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float


def _in_ms(name: str) -> Callable[[Percentiles], float]:
    def figure(p: Percentiles) -> float:
        return float(getattr(p, name)) * 1000

    return figure


_MS = ("mean", "p50", "p90", "p99", "max")
_SECONDS: dict[str, Any] = {name: jsonmodel.override(omit=True) for name in _MS}
#: milliseconds, for reports
jsonmodel.register(Percentiles, **_SECONDS, derived={f"{n}_ms": _in_ms(n) for n in _MS}, read=False)


def percentiles(values: Iterable[float]) -> Percentiles | None:
    """Linear-interpolated (type 7) percentiles; None for no values."""
    xs = sorted(values)
    if not xs:
        return None
    p50, p90, p99 = (quantile(xs, q) for q in PERCENTILES)
    return Percentiles(len(xs), statistics.fmean(xs), p50, p90, p99, xs[-1])


#: A budget's place under the sweep's rule: what the verdict column says of it (and its colour).
Place = Literal[
    "best",
    "smallest as fast",
    "leads, undecided",
    "leads within the margin",
    "as fast",
    "slower",
    "in contention",
    "excluded",
    "invalid",
    "no timings",
    "not raced",
    "budget ignored",
]


def _mean(values: Iterable[float | int | None]) -> float | None:
    xs = [float(v) for v in values if v is not None]
    return statistics.fmean(xs) if xs else None


@dataclass(frozen=True)
class ArmStats:
    """The statistics of one arm (``tree_budget`` × ``point``), from its ``samples``.

    ``seed`` seeds the bootstrap intervals. A load point adds its ``slo`` (goodput) and the
    load generator's ``client`` health; the sweep adds each budget's ``place`` under the
    rule (with ``left_after`` and ``drifting``), set once every budget is known.
    """

    tree_budget: int | None
    point: LoadPoint
    samples: tuple[Sample, ...] = field(repr=False)
    seed: int = 0
    slo: SLO | None = None
    client: ClientHealth | None = None
    #: the budget's place under the sweep's rule (None until every budget was judged)
    place: Place | None = None
    #: the round after which a raced budget left as slower (None: it did not leave)
    left_after: int | None = None
    #: the server changed while this budget was measured again (the drift check)
    drifting: bool = False

    @classmethod
    def of(
        cls,
        samples: Sequence[Sample],
        *,
        seed: int = 0,
        slo: SLO | None = None,
        client: ClientHealth | None = None,
    ) -> ArmStats:
        """The statistics of ``samples``, all of one arm (in the order given: the bootstrap
        intervals depend on it)."""
        if not samples:
            raise ValueError("ArmStats: no samples")
        point, budget = samples[0].load_point, samples[0].tree_budget
        for s in samples:
            if s.load_point != point or s.tree_budget != budget:
                raise ValueError(
                    f"ArmStats: mixed points {point.label}/{budget} and "
                    f"{s.load_point.label}/{s.tree_budget}"
                )
        return cls(budget, point, tuple(samples), seed, slo, client)

    # -- requests and their validity ---------------------------------------------------

    @cached_property
    def valid_samples(self) -> tuple[Sample, ...]:
        """The valid requests, whose timings count."""
        return tuple(s for s in self.samples if s.valid)

    @property
    def requests(self) -> int:
        """Requests sent (valid or not)."""
        return len(self.samples)

    @property
    def valid(self) -> int:
        """Requests that passed every invariant."""
        return len(self.valid_samples)

    @property
    def invalid(self) -> int:
        """Requests that broke an invariant (or did not complete)."""
        return self.requests - self.valid

    @property
    def all_valid(self) -> bool:
        """True when every request of the arm passed the invariants."""
        return self.requests > 0 and self.valid == self.requests

    @cached_property
    def codes(self) -> Mapping[str, int]:
        """The violation codes of the invalid requests, counted (``error``: it did not
        complete)."""
        codes: Counter[str] = Counter()
        for s in self.samples:
            if not s.valid:
                codes.update(s.codes or ("error",))
        return dict(codes)

    @cached_property
    def first_evidence(self) -> str:
        """The first invalid request's evidence (or transport error)."""
        return next((s.evidence or (s.error or "") for s in self.samples if not s.valid), "")

    # -- decode rate -----------------------------------------------------------------

    @cached_property
    def _timed(self) -> tuple[Sample, ...]:
        return tuple(s for s in self.valid_samples if s.decode_tokens_per_second is not None)

    @cached_property
    def decode(self) -> tuple[float, ...]:
        """The decode rates of the valid requests that have one, tokens/s."""
        return tuple(s.decode_tokens_per_second or 0.0 for s in self._timed)

    @cached_property
    def decode_prompts(self) -> tuple[str, ...]:
        """The prompt of each decode rate (the bootstrap's strata)."""
        return tuple(s.prompt_id for s in self._timed)

    @cached_property
    def decode_median(self) -> float | None:
        """Median decode rate, tokens/s."""
        return statistics.median(self.decode) if self.decode else None

    @cached_property
    def decode_q1(self) -> float | None:
        """First quartile of the decode rate."""
        return quantile(self.decode, 0.25) if self.decode else None

    @cached_property
    def decode_q3(self) -> float | None:
        """Third quartile of the decode rate."""
        return quantile(self.decode, 0.75) if self.decode else None

    @property
    def decode_iqr(self) -> float | None:
        """Interquartile range of decode tokens/s."""
        if self.decode_q1 is None or self.decode_q3 is None:
            return None
        return self.decode_q3 - self.decode_q1

    @cached_property
    def decode_ci(self) -> tuple[float, float] | None:
        """Bootstrap interval of the median decode rate (stratified by prompt)."""
        return bootstrap_median_ci(
            self.decode, seed=self.seed, salt=self.tree_budget, strata=self.decode_prompts
        )

    # -- latencies ---------------------------------------------------------------------

    @cached_property
    def ttft(self) -> Percentiles | None:
        """Time to first content."""
        return percentiles(s.ttft for s in self.valid_samples if s.ttft is not None)

    @cached_property
    def ttft_ci(self) -> tuple[float, float] | None:
        """Bootstrap interval of the median TTFT (stratified by prompt)."""
        timed = [s for s in self.valid_samples if s.ttft is not None]
        return bootstrap_median_ci(
            [s.ttft or 0.0 for s in timed],
            seed=self.seed,
            salt=f"ttft{self.tree_budget}",
            strata=[s.prompt_id for s in timed],
        )

    @cached_property
    def itl(self) -> Percentiles | None:
        """Gaps between content events, pooled over the requests."""
        return percentiles(g for s in self.valid_samples for g in s.gaps)

    @cached_property
    def tpot_values(self) -> tuple[float, ...]:
        """Seconds per output token after the first event, per valid request with one."""
        return tuple(t for s in self.valid_samples if (t := s.tpot) is not None)

    @cached_property
    def tpot(self) -> Percentiles | None:
        """Seconds per output token after the first event (the inverse decode rate)."""
        return percentiles(self.tpot_values)

    @cached_property
    def e2e(self) -> Percentiles | None:
        """Request sent to the last byte."""
        return percentiles(s.seconds for s in self.valid_samples)

    @cached_property
    def ttft_offset(self) -> Percentiles | None:
        """The client's TTFT minus the server's own."""
        return percentiles(
            s.ttft - s.server_ttft
            for s in self.valid_samples
            if s.ttft is not None and s.server_ttft is not None
        )

    # -- speculation -------------------------------------------------------------------

    @cached_property
    def mean_acceptance_length(self) -> float | None:
        """Mean tokens per verify step, over the valid requests that report it."""
        return _mean(s.mean_acceptance_length for s in self.valid_samples)

    @cached_property
    def acceptance_ci(self) -> tuple[float, float] | None:
        """Bootstrap interval of the mean acceptance length."""
        accept = [a for s in self.valid_samples if (a := s.mean_acceptance_length) is not None]
        return bootstrap_ci(accept, statistics.fmean, seed=self.seed, salt=f"acc{self.tree_budget}")

    @cached_property
    def mean_acceptance_rate(self) -> float | None:
        """Mean accepted / drafted tokens (shown where the length is unknown: llama.cpp)."""
        return _mean(s.acceptance_rate for s in self.valid_samples)

    @cached_property
    def mean_decode_rounds(self) -> float | None:
        """Mean verify steps per valid request."""
        return _mean(s.decode_rounds for s in self.valid_samples)

    @cached_property
    def server_client_ratio(self) -> float | None:
        """Median server-reported over client-measured decode rate."""
        ratios = [r for s in self.valid_samples if (r := s.server_client_ratio) is not None]
        return statistics.median(ratios) if ratios else None

    @cached_property
    def spec(self) -> SpecTally:
        """The speculation figures, counted over every request."""
        return SpecTally.of(self.samples)

    @property
    def drafted_tokens(self) -> int:
        """Draft tokens summed over the requests that reported a count."""
        return self.spec.drafted_tokens

    @property
    def draft_reports(self) -> int:
        """Requests that reported a draft count."""
        return self.spec.draft_reports

    @property
    def stats_asked(self) -> int:
        """Answers that were read for speculative statistics."""
        return self.spec.stats_asked

    @property
    def spec_reports(self) -> int:
        """Answers that carried speculative statistics."""
        return self.spec.spec_reports

    @property
    def no_spec_stats(self) -> bool:
        """Answers were read for speculative statistics and not one carried any."""
        return self.spec.no_spec_stats

    @property
    def never_drafted(self) -> bool:
        """Requests reported their draft counts and not one drafted a token."""
        return self.spec.never_drafted

    @cached_property
    def depth(self) -> DepthProfile | None:
        """Acceptance by depth, pooled over the valid requests (None: no histogram)."""
        return depth_profile(self.valid_samples)

    # -- the sweep's own ---------------------------------------------------------------

    @cached_property
    def echoed_mismatch(self) -> int:
        """Requests whose server echoed a budget other than the one requested."""
        return sum(
            1
            for s in self.samples
            if s.echoed_tree_budget is not None
            and s.tree_budget is not None
            and s.echoed_tree_budget != s.tree_budget
        )

    @property
    def concurrent(self) -> bool:
        """Some timing was taken while other requests were in flight (pytest-xdist)."""
        return any(s.concurrent for s in self.samples)

    # -- the load's own ----------------------------------------------------------------

    @cached_property
    def duration(self) -> float:
        """The arm's span, seconds: a raced budget is sent in runs with other budgets' runs
        in between, so the sum of its runs' spans, each from its first send to its last
        byte."""
        runs: dict[int, list[Sample]] = {}
        for s in self.samples:
            runs.setdefault(s.round, []).append(s)
        spans = (max(s.end for s in r) - min(s.start for s in r) for r in runs.values())
        return max(math.fsum(spans), 1e-9)

    @property
    def output_tokens_per_second(self) -> float:
        """Output tokens of the valid requests over the span."""
        return sum(s.completion_tokens or 0 for s in self.valid_samples) / self.duration

    @property
    def requests_per_second(self) -> float:
        """Valid requests over the span."""
        return self.valid / self.duration

    @property
    def achieved_concurrency(self) -> float:
        """The time-weighted number of requests in flight over the span."""
        # exact: the order of merged samples is moot
        return math.fsum(s.seconds for s in self.samples) / self.duration

    @cached_property
    def good(self) -> int:
        """Valid requests within every SLO (0 without one)."""
        slo = self.slo
        if slo is None:
            return 0
        return sum(1 for s in self.valid_samples if not slo.misses(s.slo_metrics()))

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

    @property
    def workers(self) -> tuple[str, ...]:
        """The processes that sent the arm's requests."""
        return tuple(sorted({s.worker or "main" for s in self.samples}))

    @property
    def withheld(self) -> int:
        """Requests whose timing-based checks were withheld (the client was saturated)."""
        return sum(1 for s in self.samples if s.withheld)

    @property
    def uncounted(self) -> int:
        """Valid requests whose output token count is unknown."""
        return sum(1 for s in self.valid_samples if s.completion_tokens is None)


Figure = Callable[[ArmStats], Any]

#: the speculation figures, as both forms write them
_SPEC: dict[str, Figure] = {
    "drafted_tokens": lambda a: a.drafted_tokens,
    "draft_reports": lambda a: a.draft_reports,
    "never_drafted": lambda a: a.never_drafted,
    "stats_asked": lambda a: a.stats_asked,
    "spec_reports": lambda a: a.spec_reports,
    "no_speculative_statistics": lambda a: a.no_spec_stats,
}

#: every field left out: an arm's JSON is its figures, recomputed from the samples on reading
_FIGURES_ONLY: dict[str, Any] = {
    f.name: jsonmodel.override(omit=True) for f in dataclasses.fields(ArmStats)
}

#: a load point's JSON form (``points`` of a load test in ``sweep.json``)
jsonmodel.register(
    ArmStats,
    localns={"ClientHealth": Any},  # imported for type checking only; written by its own hook
    read=False,
    **_FIGURES_ONLY,
    derived={
        "point": lambda a: a.point,
        "label": lambda a: a.point.label,
        "tree_budget": lambda a: a.tree_budget,
        "requests": lambda a: a.requests,
        "valid": lambda a: a.valid,
        "invalid": lambda a: a.invalid,
        "codes": lambda a: a.codes,
        "first_evidence": lambda a: a.first_evidence,
        "ttft": lambda a: a.ttft,
        "itl": lambda a: a.itl,
        "tpot": lambda a: a.tpot,
        "e2e": lambda a: a.e2e,
        "ttft_minus_server": lambda a: a.ttft_offset,
        "timing_checks_withheld": lambda a: a.withheld,
        "duration_s": lambda a: a.duration,
        "output_tokens_per_second": lambda a: a.output_tokens_per_second,
        "requests_per_second": lambda a: a.requests_per_second,
        "achieved_concurrency": lambda a: a.achieved_concurrency,
        "slo": lambda a: None if a.slo is None else a.slo.to_json(),
        "good": lambda a: a.good,
        "goodput_share": lambda a: a.goodput_share,
        "goodput_rate": lambda a: a.goodput_rate,
        "slo_met": lambda a: a.slo_met,
        "mean_acceptance_length": lambda a: a.mean_acceptance_length,
        "mean_acceptance_rate": lambda a: a.mean_acceptance_rate,
        **_SPEC,
        "uncounted": lambda a: a.uncounted,
        "client": lambda a: a.client,
        "unreliable": lambda a: a.unreliable,
        "workers": lambda a: a.workers,
    },
)

#: the sweep's JSON form of a budget (``budgets`` in ``sweep.json``)
budget_json: Callable[[ArmStats], dict[str, Any]] = jsonmodel.writer(
    ArmStats,
    **_FIGURES_ONLY,
    derived={
        "tree_budget": lambda a: a.tree_budget,
        "total": lambda a: a.requests,
        "valid": lambda a: a.valid,
        "codes": lambda a: a.codes,
        "decode_tokens_per_second": lambda a: {
            "median": a.decode_median,
            "q1": a.decode_q1,
            "q3": a.decode_q3,
            "ci95": a.decode_ci,
            "n": len(a.decode),
        },
        "ttft": lambda a: {
            "p50": None if a.ttft is None else a.ttft.p50,
            "p90": None if a.ttft is None else a.ttft.p90,
            "ci95": a.ttft_ci,
        },
        "mean_acceptance_length": lambda a: a.mean_acceptance_length,
        "acceptance_ci95": lambda a: a.acceptance_ci,
        "mean_decode_rounds": lambda a: a.mean_decode_rounds,
        "server_client_ratio": lambda a: a.server_client_ratio,
        "echoed_mismatch": lambda a: a.echoed_mismatch,
        "concurrent": lambda a: a.concurrent,
        "mean_acceptance_rate": lambda a: a.mean_acceptance_rate,
        **_SPEC,
        "acceptance_by_depth": lambda a: None if a.depth is None else a.depth.to_json(),
    },
)


@dataclass(frozen=True)
class SpeculationGap:
    """Arms whose answers show no speculation at all: ``"no statistics"`` (answers were read
    for speculative statistics and not one carried any) or ``"never drafted"`` (requests
    reported their draft counts and not one drafted a token). Worded in ``report/``."""

    kind: Literal["no statistics", "never drafted"]
    budgets: tuple[int | None, ...]
    #: the budgets are every budget of the run
    every: bool
    #: the answers read for statistics ("no statistics"), the requests that reported their
    #: drafts ("never drafted")
    requests: int
    #: the load points concerned (a load test's gap is one budget's; empty for the sweep)
    points: tuple[str, ...] = ()


def speculation_gaps(stats: Sequence[ArmStats], *, by_budget: bool = False) -> list[SpeculationGap]:
    """The gaps of ``stats``: the sweep's, one per kind over all its budgets; a load test's
    (``by_budget``), one per kind and budget, naming its load points. No statistics first."""
    out: list[SpeculationGap] = []
    for kind in ("no statistics", "never drafted"):
        quiet = kind == "no statistics"
        hit = [s for s in stats if (s.no_spec_stats if quiet else s.never_drafted)]
        count: Callable[[ArmStats], int] = (
            (lambda s: s.stats_asked) if quiet else (lambda s: s.draft_reports)
        )
        if not by_budget:
            if hit:
                budgets = tuple(s.tree_budget for s in hit)
                out.append(
                    SpeculationGap(kind, budgets, len(hit) == len(stats), sum(map(count, hit)))
                )
            continue
        groups: dict[int | None, list[ArmStats]] = {}
        for s in hit:
            groups.setdefault(s.tree_budget, []).append(s)
        out.extend(
            SpeculationGap(kind, (b,), False, sum(map(count, g)), tuple(s.point.label for s in g))
            for b, g in groups.items()
        )
    return out
