"""``LoadTester``: the object behind the ``ddtree_load`` fixture (no pytest here)."""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.core.settings import Settings, Timeout
from pytest_ddtree.core.slo import SLO
from pytest_ddtree.measure.arm import ArmStats
from pytest_ddtree.measure.load.arrivals import LoadPoint
from pytest_ddtree.measure.load.metrics import (
    ClientHealth,
    chain_health,
    merge_health,
    summarize_point,
)
from pytest_ddtree.measure.load.race import PointRace, PointRacer, Run, Unraced
from pytest_ddtree.measure.load.recommend import Schedule, recommend
from pytest_ddtree.measure.load.runner import (
    CLIENT_TIMEOUT,
    NOT_SENT,
    run_point,
    validate,
)
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep.race import DEFAULT_EQUIVALENCE
from pytest_ddtree.wire.protocol import EndpointConfig, Messages, StallGuard
from pytest_ddtree.wire.servermetrics import Counts, GroupWatch

__all__ = ["LoadError", "LoadFailure", "LoadResult", "LoadTester", "analyse", "load_failure"]

Key = tuple[LoadPoint, "int | None"]


@dataclass
class _Call:
    """One ``ddtree_load`` call's arguments, and the races it ran (the last one in progress)."""

    prompts: Sequence[Messages]
    per_prompt: Sequence[Mapping[str, Any]]
    budgets: tuple[int | None, ...]
    concurrencies: Sequence[int] | None
    rates: Sequence[float] | None
    requests: int | None
    max_tokens: int
    temperature: float
    extra: Mapping[str, Any] | None
    races: list[PointRace] = field(default_factory=list)
    racer: PointRacer | None = None
    #: requests of each (point, budget) sent so far: where its prompt cycle goes on
    sent: dict[Key, int] = field(default_factory=dict)


class LoadError(AssertionError):
    """A load run failed: invalid requests, or an SLO missed. The message says which (worded
    by the report where the plugin made the tester); ``failure`` is the same as data."""

    def __init__(self, message: str, failure: LoadFailure | None = None) -> None:
        super().__init__(message)
        self.failure = failure

    # failure blocks name it as users import it, whatever folder defines it
    __module__ = "pytest_ddtree"


@dataclass(frozen=True)
class LoadResult:
    """Samples, per-point statistics and the budget schedule of one load run."""

    samples: tuple[Sample, ...]
    stats: tuple[ArmStats, ...]
    schedule: Schedule
    health: Mapping[Key, ClientHealth] = field(default_factory=dict)
    shares: int = 1
    partial: bool = False
    #: per load point, how its race went (``--ddtree-sweep adaptive``)
    races: tuple[PointRace, ...] = ()
    #: ``adaptive`` when the budgets were raced at each point, else ``exhaustive``
    mode: str = "exhaustive"
    #: why an adaptive sweep ran the points in full (``split`` over processes, ``one
    #: budget``); empty otherwise (``report/load_text.py`` ``unraced_text`` words it)
    note: Unraced = ""

    def point(self, tree_budget: int | None, point: LoadPoint) -> ArmStats:
        """The statistics at one budget × load point."""
        for s in self.stats:
            if s.tree_budget == tree_budget and s.point == point:
                return s
        raise KeyError(f"{point.label} tree_budget={tree_budget}")

    @property
    def invalid(self) -> list[Sample]:
        """Every request that was not valid."""
        return [s for s in self.samples if not s.valid]


def analyse(
    samples: Sequence[Sample],
    health: Mapping[Key, Sequence[ClientHealth]] | None = None,
    *,
    slo: SLO | None = None,
    seed: int = 0,
    races: Sequence[PointRace] = (),
    equivalence: float = DEFAULT_EQUIVALENCE,
) -> tuple[tuple[ArmStats, ...], Schedule]:
    """Statistics of raw samples (from any number of processes), and the schedule.

    ``races``: the points whose budgets were raced; their choice is the race's;
    ``equivalence``: the rule's margin for the points run in full.
    """
    groups: dict[Key, list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.load_point, s.tree_budget), []).append(s)
    stats = []
    for key in sorted(groups, key=lambda k: (k[0].mode, k[0].value, k[0].burstiness, k[1] or 0)):
        parts = list((health or {}).get(key, ()))
        stats.append(summarize_point(groups[key], slo=slo, client=merge_health(parts)))
    return tuple(stats), recommend(stats, samples, seed=seed, races=races, equivalence=equivalence)


class LoadTester:
    """Run requests under load, validate every one, and judge latency against an SLO.

    ``ddtree_load(prompts, concurrencies=[1, 8], tree_budgets=[32, 128])`` sends,
    for each tree budget × load point, ``requests`` streamed requests cycling
    through ``prompts``, at a fixed concurrency C or at a Poisson/gamma arrival
    rate, from one asyncio event loop. Every response is checked with the
    project's invariants before it counts. The call raises ``LoadError`` when a
    request is invalid (counts, codes and the first evidence in the message) or
    when an SLO is missed; a miss measured while the client itself was saturated
    is reported as that, never as server latency. Under pytest-xdist with
    ``--dist each`` each worker sends its share of every load point and the
    controller merges the raw samples of all of them. With ``sweep="adaptive"``
    (``--ddtree-sweep adaptive``) the budgets race at each load point instead of
    all getting ``requests`` (see ``load.race``); under ``--dist each`` they run in full.
    """

    def __init__(
        self,
        endpoint: EndpointConfig,
        *,
        judge: Callable[..., Sequence[Any]] | None,
        tree_budgets: Sequence[int | None] = (None,),
        concurrencies: Sequence[int] = (1,),
        rates: Sequence[float] = (),
        burstiness: float = Settings.load_burstiness,
        requests: int | None = None,
        max_tokens: int = Settings.max_tokens,
        slo: SLO | None = None,
        seed: int = Settings.sweep_seed,
        dialect: str = Settings.dialect,
        stats_map: Mapping[str, str] | None = None,
        counter: Any = None,
        guard: StallGuard | None = None,
        share: int = 0,
        shares: int = 1,
        worker: str = "main",
        sink: Callable[[LoadResult], None] | None = None,
        watch: GroupWatch | None = None,
        temperature: float = 0.0,
        before: Callable[[float], None] | None = None,
        sweep: str = "exhaustive",
        equivalence: float = DEFAULT_EQUIVALENCE,
        start_gate: Callable[[int, int], object] | None = None,
        describe: Callable[[LoadFailure], str] | None = None,
    ) -> None:
        self.endpoint = endpoint
        #: words a failed run's ``LoadError`` (the plugin passes the report's ``failure_text``;
        #: None: the message is the failure's data, ``repr``)
        self.describe = describe
        #: the server's counters around each load point (None: /metrics not read)
        self.watch = watch
        self.judge = judge
        self.tree_budgets = tuple(tree_budgets)
        self.concurrencies = tuple(concurrencies)
        self.rates = tuple(rates)
        self.burstiness = burstiness
        self.requests = requests
        self.max_tokens = max_tokens
        self.slo = slo
        self.seed = seed
        self.dialect = dialect
        self.stats_map = dict(stats_map or {})
        self.counter = counter
        self.guard = guard
        self.share = share
        self.shares = max(1, shares)
        self.worker = worker
        self.sink = sink
        #: the default temperature of a call; above 0 each request carries a seed
        self.temperature = temperature
        #: called with a call's temperature before its first request (the sampling check)
        self.before = before
        #: ``adaptive``: race the budgets at each load point (see ``load.race``)
        self.sweep = sweep
        self.equivalence = equivalence
        #: called with (call, run) before each run (a load point at a budget) of a call, on
        #: every host alike (a host with no share of the point too): waits for the instant
        #: the run starts on every host (``measure.load.hosts.Barrier``)
        self.start_gate = start_gate
        #: the calls made so far (the gate's call number)
        self.calls = 0

    def points(
        self, concurrencies: Sequence[int] | None = None, rates: Sequence[float] | None = None
    ) -> list[LoadPoint]:
        """The (whole, unsplit) load points a call would run."""
        cs = (
            self.concurrencies if concurrencies is None and rates is None else (concurrencies or ())
        )
        rs = self.rates if concurrencies is None and rates is None else (rates or ())
        pts = [LoadPoint("concurrency", int(c)) for c in cs]
        pts += [LoadPoint("rate", float(r), self.burstiness) for r in rs]
        if not pts:
            raise ValueError("ddtree_load: no load point (give concurrencies or rates)")
        return pts

    def _total(self, point: LoadPoint, requests: int | None) -> int:
        """The requests a budget gets at ``point`` in all processes together."""
        n = requests if requests is not None else self.requests
        if n is None:  # enough that the closing tail barely lowers the achieved concurrency
            n = max(16, 8 * int(point.value)) if point.mode == "concurrency" else 32
        if n < 1:
            raise ValueError(f"ddtree_load: requests must be >= 1, got {n}")
        return n

    def _count(self, point: LoadPoint, requests: int | None) -> int:
        """This process's share of a budget's requests at ``point``."""
        return len(self._indices(point, self._total(point, requests)))

    def _indices(self, point: LoadPoint, n: int) -> list[int]:
        """Which of the ``n`` requests a one-process run sends at ``point`` this process sends.

        A rate is dealt out request by request. A concurrency C is dealt out by stream, as
        ``LoadPoint.split`` deals the streams (stream j to process j mod W): request i goes on
        stream i mod C, so each process sends as many requests per stream as one process
        would, and its streams end together with the others' (dealing the requests evenly per
        process made a process with fewer streams run twice as many rounds). The processes'
        indices together are the one-process run's, each once.
        """
        w = self.shares
        if w == 1:
            return list(range(n))
        if point.mode == "concurrency":
            c = int(point.value)
            return [i for i in range(n) if (i % c) % w == self.share]
        return [i for i in range(n) if i % w == self.share]

    def __call__(
        self,
        prompts: Sequence[Messages],
        *,
        tree_budgets: Sequence[int | None] | None = None,
        concurrencies: Sequence[int] | None = None,
        rates: Sequence[float] | None = None,
        requests: int | None = None,
        max_tokens: int | None = None,
        slo: SLO | None = None,
        temperature: float | None = None,
        expect: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> LoadResult:
        """Run every tree budget × load point; return the result or raise ``LoadError``.

        ``prompts``: a non-empty list of prompt strings (or chat message lists),
        cycled. ``concurrencies``/``rates``: the load points (default: the
        configured ones; giving either replaces both). ``requests``: per budget
        and point (default: the configured count, else 8 × C, at least 16, or 32
        at a rate). ``slo`` replaces the configured SLO for this call. ``expect``:
        keyword arguments of the invariants (``min_tokens=64``) for every prompt, or a
        list with one mapping per prompt. ``temperature``: default the tester's (the
        test's, ``--ddtree-temperatures``); above 0 the i-th request of a load point
        carries the same seed at every budget.
        """
        __tracebackhide__ = True  # a failure shows the test, not this method
        if isinstance(prompts, str) or not prompts:
            raise ValueError("ddtree_load: prompts must be a non-empty list of prompts")
        if expect is None:
            per_prompt: list[Mapping[str, Any]] = [{} for _ in prompts]
        elif isinstance(expect, Mapping):
            per_prompt = [expect for _ in prompts]
        else:
            per_prompt = list(expect)
            if len(per_prompt) != len(prompts):
                raise ValueError(
                    f"ddtree_load: expect has {len(per_prompt)} entries for {len(prompts)} prompts"
                )
        temperature = self.temperature if temperature is None else temperature
        if self.before is not None:
            self.before(temperature)
        call = _Call(
            prompts=prompts,
            per_prompt=per_prompt,
            budgets=tuple(tree_budgets) if tree_budgets is not None else self.tree_budgets,
            concurrencies=concurrencies,
            rates=rates,
            requests=requests,
            max_tokens=max_tokens or self.max_tokens,
            temperature=temperature,
            extra=extra,
        )
        slo = slo if slo is not None else self.slo
        self._check_race(call)
        samples: list[Sample] = []
        health: dict[Key, list[ClientHealth]] = {}
        try:
            self._run(call, samples, health)
        except BaseException:
            # an interrupted run (Ctrl-C, a crash) keeps every point it finished
            if samples and self.sink is not None:
                if call.racer is not None:  # the point in progress: undecided, said so
                    call.races.append(call.racer.snapshot(interrupted=True))
                self.sink(self._result(call, samples, health, slo, partial=True))
            raise
        result = self._result(call, samples, health, slo)
        if self.sink is not None:
            self.sink(result)
        failure = load_failure(result.stats, self.endpoint, result.samples)
        if failure is not None:
            raise LoadError(self.describe(failure) if self.describe else repr(failure), failure)
        return result

    def racing(self, budgets: Sequence[int | None]) -> bool:
        """True when this call races its budgets at each point (see :attr:`note`)."""
        return self.sweep == "adaptive" and self.shares == 1 and len(budgets) > 1

    def note(self, budgets: Sequence[int | None]) -> Unraced:
        """Why an adaptive sweep runs this call's points in full (``split``: over several
        processes; ``one budget``), or empty when it races or is not adaptive."""
        if self.sweep != "adaptive" or self.racing(budgets):
            return ""
        return "split" if self.shares > 1 else "one budget"

    def _check_race(self, call: _Call) -> None:
        """Before anything is sent: every point's requests cover the race's first batch."""
        if not self.racing(call.budgets):
            return
        for whole in self.points(call.concurrencies, call.rates):
            n = self._count(whole, call.requests)
            first = self._racer(whole, call, n).first_batch
            if first > n:
                given = (
                    f"requests={n}" if call.requests is not None else f"--ddtree-load-requests {n}"
                )
                raise ValueError(
                    f"ddtree_load: {given} per budget at {whole.label} is below the race's first "
                    f"batch of {first} (--ddtree-sweep adaptive): no budget could be judged; "
                    f"give at least {first} requests, or --ddtree-sweep exhaustive"
                )

    def _prompts(self, call: _Call, requests: Sequence[int]) -> list[int]:
        """Which prompt each of a budget's ``requests`` at a point sends.

        ``requests`` are indices of the one-process run (see ``_indices``): in turn; in a
        race each prompt twice in a row, so a budget has a spread within prompts from its
        first batch on (the race compares budgets prompt by prompt, over the prompts both
        have).
        """
        k = len(call.prompts)
        if self.racing(call.budgets):
            return [(i // 2) % k for i in requests]
        return [i % k for i in requests]

    def _racer(self, whole: LoadPoint, call: _Call, n: int) -> PointRacer:
        return PointRacer(whole, call.budgets, n, equivalence=self.equivalence, seed=self.seed)

    def _result(
        self,
        call: _Call,
        samples: list[Sample],
        health: dict[Key, list[ClientHealth]],
        slo: SLO | None,
        *,
        partial: bool = False,
    ) -> LoadResult:
        races = tuple(call.races)
        chained = {k: chain_health(v) for k, v in health.items()}  # a raced budget's runs
        merged = {k: [h] for k, h in chained.items()}
        stats, schedule = analyse(
            samples, merged, slo=slo, seed=self.seed, races=races, equivalence=self.equivalence
        )
        return LoadResult(
            tuple(samples),
            stats,
            schedule,
            chained,
            self.shares,
            partial=partial,
            races=races,
            mode="adaptive" if self.racing(call.budgets) else "exhaustive",
            note=self.note(call.budgets),
        )

    def _run(
        self, call: _Call, samples: list[Sample], health: dict[Key, list[ClientHealth]]
    ) -> None:
        rng = random.Random(f"ddtree-load:{self.seed}")
        number, self.calls = self.calls, self.calls + 1
        runs = itertools.count()
        for whole in self.points(call.concurrencies, call.rates):
            point = whole.split(self.share, self.shares)
            n = self._count(whole, call.requests)
            if n == 0:
                continue
            order = list(call.budgets)
            rng.shuffle(order)  # interleave budgets so slow drift does not favour one (the
            if point is None:  # same order on every host: the same seed); no share here:
                for _ in order:  # the other hosts' runs still pass the gate
                    self._gate(number, next(runs))
                continue
            measure = functools.partial(self._send, call, whole, point, samples, health)
            if self.racing(call.budgets):  # one process (shares 1): no gate
                call.racer = self._racer(whole, call, n)
                call.races.append(call.racer.run(measure))
                call.racer = None
                continue
            for budget in order:
                self._gate(number, next(runs))
                measure(budget, n)

    def _gate(self, call: int, run: int) -> None:
        if self.start_gate is not None:
            self.start_gate(call, run)

    def _send(
        self,
        call: _Call,
        whole: LoadPoint,
        point: LoadPoint,
        samples: list[Sample],
        health: dict[Key, list[ClientHealth]],
        budget: int | None,
        count: int,
    ) -> Run:
        """Send ``count`` requests of ``budget`` at ``point`` (this process's share) as one run,
        validate them, keep them. A budget's runs at a point go on through the prompts."""
        prompts = call.prompts
        first = call.sent.get((whole, budget), 0)
        call.sent[(whole, budget)] = first + count
        total = self._total(whole, call.requests)
        mine = self._indices(whole, total)
        # the one-process run's index of each request (past the share: the next rounds)
        index = [
            mine[i % len(mine)] + (i // len(mine)) * total for i in range(first, first + count)
        ]
        which = self._prompts(call, index)
        # above 0 the i-th request of a point samples alike at every budget
        specs = [
            self.endpoint.spec(
                prompts[k],
                tree_budget=budget,
                max_tokens=call.max_tokens,
                temperature=call.temperature,
                prompt_id=f"p{k}",
                extra=_seeded(call.extra, call.temperature, self.seed, f"p{k}", i),
                dialect=self.dialect,
            )
            for i, k in zip(index, which, strict=True)
        ]
        if self.watch is not None:
            self.watch.start(0, budget)
        raws, wall0, perf0, h = asyncio.run(
            run_point(
                self.endpoint,
                specs,
                point,
                seed=self.seed + self.share,
                expect=[call.per_prompt[k] for k in which],
                guard=self.guard,
            )
        )
        cpu0 = time.thread_time()
        got = validate(
            raws,
            whole,
            wall0,
            perf0,
            judge=self.judge,
            dialect=self.dialect,
            stats_map=self.stats_map,
            counter=self.counter,
            worker=self.worker,
            client_saturated=h.unreliable,
        )
        runs = health.setdefault((whole, budget), [])
        if runs:  # a later run of a raced budget: its own span (see summarize_point)
            got = [replace(s, round=len(runs)) for s in got]
        tokens = sum(s.completion_tokens or 0 for s in got)
        h = replace(h, tokens=tokens, validation_cpu_seconds=time.thread_time() - cpu0)
        if self.watch is not None:
            counts = [Counts(s.drafted_tokens, s.accepted_tokens) for s in got]
            self.watch.end(0, budget, counts, label=whole.label, point=jsonmodel.to_json(whole))
        samples.extend(got)
        runs.append(h)
        return Run(got, h.unreliable)


def _seeded(
    extra: Mapping[str, Any] | None, temperature: float, base: int, pid: str, i: int
) -> Mapping[str, Any] | None:
    """Above temperature 0: the body with the seed of the i-th request (same at every budget)."""
    if temperature <= 0:
        return extra
    from pytest_ddtree.checks.sampling import request_seed

    return {"seed": request_seed(base, pid, f"load-{i}"), **(extra or {})}


#: codes of requests that hit the client's own limits: no verdict on the outputs
CLIENT_LIMIT_CODES = frozenset({CLIENT_TIMEOUT, NOT_SENT})


@dataclass(frozen=True)
class LoadFailure:
    """Why a load run fails, as data: its per-point statistics and validated samples (requests
    that broke invariants, requests the client's own limits stopped, SLO misses among the
    points) and the client's time limits. ``report/load_text.py`` words it
    (``failure_text``)."""

    stats: tuple[ArmStats, ...]
    samples: tuple[Sample, ...] = ()
    timeout: Timeout | None = None

    @property
    def broken(self) -> int:
        """Requests whose outputs broke invariants (the client's limits apart)."""
        if self.samples:
            return sum(1 for s in self.samples if set(s.codes) - CLIENT_LIMIT_CODES)
        return sum(s.invalid for s in self.stats)

    @property
    def limited(self) -> tuple[Sample, ...]:
        """Requests the client's own limits stopped (timed out, or not sent)."""
        return tuple(s for s in self.samples if set(s.codes) & CLIENT_LIMIT_CODES)

    @property
    def missed(self) -> tuple[ArmStats, ...]:
        """Points that missed the SLO (a verdict withheld where the client was unreliable)."""
        return tuple(s for s in self.stats if s.slo_met is False)


def load_failure(
    stats: Sequence[ArmStats],
    endpoint: EndpointConfig | None = None,
    samples: Sequence[Sample] = (),
) -> LoadFailure | None:
    """Why a load run fails (invalid requests, requests the client's limits stopped, SLO
    misses); None when it passes."""
    found = LoadFailure(
        tuple(stats), tuple(samples), endpoint.timeout if endpoint is not None else None
    )
    return found if found.broken or found.limited or found.missed else None
