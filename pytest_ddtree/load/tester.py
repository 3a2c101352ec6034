"""``LoadTester``: the object behind the ``ddtree_load`` fixture (no pytest here)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_ddtree.load.arrivals import LoadPoint
from pytest_ddtree.load.metrics import (
    ClientHealth,
    LoadSample,
    PointStats,
    acceptance_cell,
    merge_health,
    summarize_point,
)
from pytest_ddtree.load.recommend import Choice, Schedule, recommend
from pytest_ddtree.load.runner import (
    CLIENT_TIMEOUT,
    NOT_SENT,
    Endpoint,
    Prompt,
    run_point,
    validate,
)
from pytest_ddtree.load.slo import SLO
from pytest_ddtree.servermetrics import Counts, GroupWatch
from pytest_ddtree.settings import budget_label
from pytest_ddtree.wire.protocol import StallGuard

__all__ = ["LoadError", "LoadResult", "LoadTester", "analyse", "render_table"]

Key = tuple[LoadPoint, "int | None"]


class LoadError(AssertionError):
    """A load run failed: invalid requests, or an SLO missed. The message says which."""


@dataclass(frozen=True)
class LoadResult:
    """Samples, per-point statistics and the budget schedule of one load run."""

    samples: tuple[LoadSample, ...]
    stats: tuple[PointStats, ...]
    schedule: Schedule
    health: Mapping[Key, ClientHealth] = field(default_factory=dict)
    shares: int = 1
    partial: bool = False

    def point(self, tree_budget: int | None, point: LoadPoint) -> PointStats:
        """The statistics at one budget × load point."""
        for s in self.stats:
            if s.tree_budget == tree_budget and s.point == point:
                return s
        raise KeyError(f"{point.label} tree_budget={tree_budget}")

    @property
    def invalid(self) -> list[LoadSample]:
        """Every request that was not valid."""
        return [s for s in self.samples if not s.valid]

    def table(self) -> str:
        """The terminal table."""
        return render_table(self.stats, self.schedule)


def analyse(
    samples: Sequence[LoadSample],
    health: Mapping[Key, Sequence[ClientHealth]] | None = None,
    *,
    slo: SLO | None = None,
    seed: int = 0,
) -> tuple[tuple[PointStats, ...], Schedule]:
    """Statistics of raw samples (from any number of processes), and the schedule."""
    groups: dict[Key, list[LoadSample]] = {}
    for s in samples:
        groups.setdefault((s.point, s.tree_budget), []).append(s)
    stats = []
    for key in sorted(groups, key=lambda k: (k[0].mode, k[0].value, k[0].burstiness, k[1] or 0)):
        parts = list((health or {}).get(key, ()))
        stats.append(summarize_point(groups[key], slo=slo, client=merge_health(parts)))
    return tuple(stats), recommend(stats, seed=seed)


def _ms(p: Any, attr: str) -> str:
    return "-" if p is None else f"{getattr(p, attr) * 1000:.1f}"


_HEAD = (
    "load",
    "budget",
    "ok/n",
    "TTFT p50/p99",
    "ITL p50/p99",
    "TPOT p50/p99",
    "e2e p50/p99",
    "tok/s",
    "req/s",
    "C seen",
    "goodput",
    "accept",
    "vs srv",
    "client",
)
#: every column right-aligned (numbers) but the first and the last (prose)
_LEFT = {0, len(_HEAD) - 1}
#: what the columns mean, printed under the table; docs/load.md has the long form
LEGEND = (
    "ms; ok/n valid/sent; C seen achieved concurrency; accept mean acceptance length "
    "(rate: accepted/drafted, 'no drafts': speculation never drafted); vs srv client TTFT "
    "minus the server's (ms); client load generator CPU per token (docs: load.md#columns)"
)


def _client_cell(s: PointStats) -> str:
    if s.client is None:
        return "-"
    cpt = s.client.cpu_per_token
    client = f"{cpt * 1e6:.0f}us/tok" if cpt else "ok"
    if s.client.saturated:
        client = "SATURATED: " + s.client.reason()
        if s.withheld:
            client += f"; timing checks withheld on {s.withheld} request(s)"
    if s.client.retries:
        client += f"; {s.client.retries} sent again on a fresh connection"
    return client


def _cells(s: PointStats) -> tuple[str, ...]:
    def pair(p: Any) -> str:
        return f"{_ms(p, 'p50')}/{_ms(p, 'p99')}"

    return (
        s.point.label,
        budget_label(s.tree_budget),
        f"{s.valid}/{s.requests}",
        pair(s.ttft),
        pair(s.itl),
        pair(s.tpot),
        pair(s.e2e),
        f"{s.output_tokens_per_second:.0f}",
        f"{s.requests_per_second:.1f}",
        f"{s.achieved_concurrency:.1f}",
        "-" if s.slo is None else f"{s.goodput_share:.0%}",
        acceptance_cell(s),
        _ms(s.ttft_offset, "p50"),
        _client_cell(s),
    )


def _choice_line(c: Choice) -> str:
    if not c.chosen:
        return f"best at {c.point.label}: none (no budget had every request valid)"
    ci = f" [{c.ci_ms[0]:.2f}, {c.ci_ms[1]:.2f}]" if c.ci_ms else ""
    tpot = f"TPOT p50 {c.tpot_ms:.2f} ms{ci}" if c.tpot_ms is not None else "no TPOT"
    vs = ""
    if c.has_runner_up and c.margin is not None:
        vs = (
            f"; runner-up {c.runner_up_label} is {c.margin[0]:+.1%} slower "
            f"[{c.margin[1]:+.1%}, {c.margin[2]:+.1%}]"
        )
        vs += "" if c.decisive else " (a tie at this noise)"
    elif not c.has_runner_up:
        vs = "; the only valid budget"
    warn = " (UNRELIABLE: client saturated)" if c.unreliable else ""
    return f"best at {c.point.label}: {c.label} ({tpot}){vs}{warn}"


def render_table(stats: Sequence[PointStats], schedule: Schedule) -> str:
    """Per budget × load point: latencies (ms, p50/p99), rates, concurrency, goodput.

    Columns are as wide as their widest cell, so no budget label or figure runs
    into its neighbour. ``vs srv`` is the median of the client's TTFT minus the
    server's own (ms), where the server reports one.
    """
    rows = [_HEAD, *(_cells(s) for s in stats)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEAD))]
    lines = []
    for row in rows:
        cells = [
            cell.ljust(w) if i in _LEFT else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    lines.append(f"({LEGEND})")
    lines.extend(_choice_line(c) for c in schedule.choices)
    changes = "changes with load" if schedule.changes_with_load else "same at every load point"
    lines.append(f"schedule: {schedule.text()} ({changes})")
    return "\n".join(lines)


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
    controller merges the raw samples of all of them.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        judge: Callable[..., Sequence[Any]] | None,
        tree_budgets: Sequence[int | None] = (None,),
        concurrencies: Sequence[int] = (1,),
        rates: Sequence[float] = (),
        burstiness: float = 1.0,
        requests: int | None = None,
        max_tokens: int = 128,
        slo: SLO | None = None,
        seed: int = 0,
        dialect: str = "auto",
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
    ) -> None:
        self.endpoint = endpoint
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

    def _count(self, point: LoadPoint, requests: int | None) -> int:
        n = requests if requests is not None else self.requests
        if n is None:  # enough that the closing tail barely lowers the achieved concurrency
            n = max(16, 8 * int(point.value)) if point.mode == "concurrency" else 32
        if n < 1:
            raise ValueError(f"ddtree_load: requests must be >= 1, got {n}")
        k = self.shares
        return n // k + (1 if self.share < n % k else 0)

    def __call__(
        self,
        prompts: Sequence[Prompt],
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
        budgets = tuple(tree_budgets) if tree_budgets is not None else self.tree_budgets
        slo = slo if slo is not None else self.slo
        temperature = self.temperature if temperature is None else temperature
        if self.before is not None:
            self.before(temperature)
        mt = max_tokens or self.max_tokens
        samples: list[LoadSample] = []
        health: dict[Key, list[ClientHealth]] = {}
        try:
            self._run(
                prompts,
                per_prompt,
                budgets,
                concurrencies,
                rates,
                requests,
                mt,
                temperature,
                extra,
                samples,
                health,
            )
        except BaseException:
            # an interrupted run (Ctrl-C, a crash) keeps every point it finished
            if samples and self.sink is not None:
                stats, schedule = analyse(samples, health, slo=slo, seed=self.seed)
                self.sink(
                    LoadResult(
                        tuple(samples),
                        stats,
                        schedule,
                        {k: v[0] for k, v in health.items()},
                        self.shares,
                        partial=True,
                    )
                )
            raise
        stats, schedule = analyse(samples, health, slo=slo, seed=self.seed)
        result = LoadResult(
            tuple(samples),
            stats,
            schedule,
            {k: v[0] for k, v in health.items()},
            self.shares,
        )
        if self.sink is not None:
            self.sink(result)
        problem = failure_message(result.stats, self.endpoint, result.samples)
        if problem:
            raise LoadError(problem)
        return result

    def _run(
        self,
        prompts: Sequence[Prompt],
        per_prompt: Sequence[Mapping[str, Any]],
        budgets: Sequence[int | None],
        concurrencies: Sequence[int] | None,
        rates: Sequence[float] | None,
        requests: int | None,
        mt: int,
        temperature: float,
        extra: Mapping[str, Any] | None,
        samples: list[LoadSample],
        health: dict[Key, list[ClientHealth]],
    ) -> None:
        rng = random.Random(f"ddtree-load:{self.seed}")
        for whole in self.points(concurrencies, rates):
            point = whole.split(self.share, self.shares)
            n = self._count(whole, requests)
            if point is None or n == 0:
                continue
            order = list(budgets)
            rng.shuffle(order)  # interleave budgets so slow drift does not favour one
            for budget in order:
                which = [(self.share + i * self.shares) % len(prompts) for i in range(n)]
                specs = [
                    self.endpoint.spec(
                        prompts[k],
                        tree_budget=budget,
                        max_tokens=mt,
                        temperature=temperature,
                        prompt_id=f"p{k}",
                        extra=_seeded(
                            extra, temperature, self.seed, f"p{k}", self.share + i * self.shares
                        ),
                        dialect=self.dialect,
                    )
                    for i, k in enumerate(which)
                ]
                if self.watch is not None:
                    self.watch.start(0, budget)
                raws, wall0, perf0, h = asyncio.run(
                    run_point(
                        self.endpoint,
                        specs,
                        point,
                        seed=self.seed + self.share,
                        expect=[per_prompt[k] for k in which],
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
                    client_saturated=h.saturated,
                )
                tokens = sum(s.output_tokens or 0 for s in got)
                h = replace(h, tokens=tokens, validation_cpu_seconds=time.thread_time() - cpu0)
                if self.watch is not None:
                    counts = [Counts(s.drafted, s.accepted) for s in got]
                    self.watch.end(0, budget, counts, label=whole.label)
                samples.extend(got)
                health.setdefault((whole, budget), []).append(h)


def _seeded(
    extra: Mapping[str, Any] | None, temperature: float, base: int, pid: str, i: int
) -> Mapping[str, Any] | None:
    """Above temperature 0: the body with the seed of the i-th request (same at every budget)."""
    if temperature <= 0:
        return extra
    from pytest_ddtree.sampling import request_seed

    return {"seed": request_seed(base, pid, f"load-{i}"), **(extra or {})}


#: codes of requests that hit the client's own limits: no verdict on the outputs
CLIENT_LIMIT_CODES = frozenset({CLIENT_TIMEOUT, NOT_SENT})


def _client_limit_message(
    samples: Sequence[LoadSample], total: int, endpoint: Endpoint | None
) -> str:
    """The client's own limits, said as such: no verdict on the server's outputs."""
    timed_out = [s for s in samples if CLIENT_TIMEOUT in s.codes]
    unsent = [s for s in samples if NOT_SENT in s.codes]
    t = endpoint.timeout if endpoint is not None else None
    limits = f" (connect={t.connect:g},read={t.read:g},total={t.total:g})" if t else ""
    lines = []
    if timed_out:
        where = ", ".join(dict.fromkeys(_where(s) for s in timed_out))
        lines.append(
            f"{len(timed_out)} of {total} requests under load got no complete answer within "
            f"the client's time limits{limits}, at {where}: the client's limit, no verdict on "
            "the outputs. If the server is only slow at this load (its queue), raise "
            "--ddtree-timeout or lower the concurrency (--ddtree-load-concurrency)"
        )
    if unsent:
        where = ", ".join(dict.fromkeys(_where(s) for s in unsent))
        lines.append(
            f"{len(unsent)} request(s) not sent or stopped mid-answer, at {where}: the stall "
            "guard stopped the point after the endpoint stalled, or sent answers past the "
            "byte cap, twice in a row"
        )
    first = (timed_out or unsent)[0].evidence
    return "\n".join(lines) + (f"\nfirst:\n{first}" if first else "")


def _where(sample: LoadSample) -> str:
    return f"{sample.point.label} tree_budget={sample.tree_budget}"


def failure_message(
    stats: Sequence[PointStats],
    endpoint: Endpoint | None = None,
    samples: Sequence[LoadSample] = (),
) -> str:
    """Why a load run fails (invalid requests first, then SLO misses); empty when it passes.

    Requests that got no answer within the client's time limits, or that the stall
    guard kept from being sent (``samples`` says which), are reported as that, apart
    from the requests whose outputs broke invariants.
    """
    total = sum(s.requests for s in stats)
    limited = [s for s in samples if set(s.codes) & CLIENT_LIMIT_CODES]
    broken = [s for s in samples if set(s.codes) - CLIENT_LIMIT_CODES]
    bad = len(broken) if samples else sum(s.invalid for s in stats)
    parts = []
    if bad:
        codes: dict[str, int] = {}
        evidence = ""
        where = []
        for s in stats:
            for code, k in s.codes.items():
                if code not in CLIENT_LIMIT_CODES or not samples:
                    codes[code] = codes.get(code, 0) + k
            if s.invalid:
                where.append(f"{s.point.label} tree_budget={s.tree_budget}: {s.invalid}")
        evidence = (
            broken[0].evidence
            if broken
            else next((s.first_evidence for s in stats if s.invalid), "")
        )
        listed = ", ".join(f"{c} x{k}" for c, k in sorted(codes.items(), key=lambda i: -i[1]))
        parts.append(
            f"{bad} of {total} requests under load broke output-quality invariants ({listed}); "
            f"not counted in the latencies; at {'; '.join(where)}\nfirst evidence:\n{evidence}"
        )
    if limited:
        parts.append(_client_limit_message(limited, total, endpoint))
    if parts:
        return "\n".join(parts)
    misses, withheld = [], []
    for s in stats:
        if s.slo_met is False:
            line = (
                f"{s.point.label} tree_budget={s.tree_budget}: goodput {s.goodput_share:.1%} "
                f"< {s.slo.goodput:.0%} required by {s.slo}"  # type: ignore[union-attr]
                f" (TTFT p99 {_ms(s.ttft, 'p99')} ms, TPOT p99 {_ms(s.tpot, 'p99')} ms, "
                f"e2e p99 {_ms(s.e2e, 'p99')} ms)"
            )
            if s.unreliable:
                assert s.client is not None
                withheld.append(f"{line}; client saturated: {s.client.reason()}")
            else:
                misses.append(line)
    if misses:
        return f"SLO missed at {len(misses)} load point(s):\n" + "\n".join(misses)
    if withheld:
        return (
            "SLO verdict withheld: the client was saturated, so its own queueing is in the "
            "latencies (lower the concurrency or spread the load over processes with -n):\n"
            + "\n".join(withheld)
        )
    return ""
