"""The load generator: one asyncio event loop, one httpx pool, raw stamps.

The hot path of a stream only stamps ``time.perf_counter()`` and keeps each
event's data: parsing, token counting and the invariants run after the load
point has finished, so they cost the timings nothing, and no request counts
before it has been validated. Each request is bounded in time (the total
deadline) and in bytes.

While a point runs, a timer task measures how late the event loop wakes it
(the lag), and the loop thread's CPU time is read before and after: a client
that is saturated queues its own work, and that must never read as server
latency (see ``ClientHealth``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from typing import Any

import httpx

from pytest_ddtree.core.settings import Settings
from pytest_ddtree.measure.load.arrivals import LoadPoint, arrival_offsets
from pytest_ddtree.measure.load.metrics import ClientHealth
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep import quantile
from pytest_ddtree.wire.clock import WireClock, with_connect
from pytest_ddtree.wire.completion import STALL_KINDS, Completion, ErrorKind, RequestSpec
from pytest_ddtree.wire.health import SLACK, StallLog
from pytest_ddtree.wire.protocol import (
    EVENT_STREAM,
    KEEPALIVE_EXPIRY,
    Attempts,
    EndpointConfig,
    Exchange,
    StallGuard,
    StreamDecoder,
    assemble,
    classify_transport,
)

__all__ = ["RawRequest", "completion_of", "run_point", "validate"]

#: the lag monitor's timer period
LAG_INTERVAL = 0.005
#: the codes of requests that failed on the client's limits, not on the server's output
CLIENT_TIMEOUT = "client-timeout"
NOT_SENT = "not-sent"


@dataclass
class RawRequest(Exchange):
    """What the hot path recorded for one request: the bytes as they came, and when.

    Parsed later by ``validate`` through the same decoder as the sync client.
    """

    expect: Mapping[str, Any] = field(default_factory=dict)
    #: when the attempt began (its deadline runs from there); ``sent`` is the wire's
    issued: float = 0.0
    #: the new connection's setup (start, end) before ``sent``; None when one was reused
    connected: tuple[float, float] | None = None
    chunks: list[bytes] = field(default_factory=list)
    stamps: list[float] = field(default_factory=list)
    #: the stream was read to its end (not cut, not broken)
    complete: bool = False
    retried: bool = False
    notes: tuple[str, ...] = ()
    #: the point's event-loop stalls (the lag timer's late wake-ups), for ``client_stall``
    stalls: StallLog | None = None

    def reset(self) -> None:
        """Forget a failed attempt, to send the request again."""
        self.headers_at, self.status, self.content_type, self.retry_after = None, 0, None, None
        self.body, self.received, self.error, self.kind = b"", 0, None, None
        self.connected = None
        self.chunks.clear()
        self.stamps.clear()
        self.complete = False


async def _stream(
    http: httpx.AsyncClient,
    raw: RawRequest,
    endpoint: EndpointConfig,
    halt: list[str],
    clock: WireClock,
) -> None:
    """Read one answer into ``raw``: stamp and keep the bytes, nothing else (the hot path).

    ``halt`` gets the guard's reason once the point's guard trips: the answers still in
    flight stop at their next read (a runaway endpoint costs the byte cap twice, not once
    per connection).
    """
    spec = raw.spec
    cap = endpoint.max_response_bytes
    perf = time.perf_counter
    chunks, stamps = raw.chunks, raw.stamps
    action = ""
    try:
        # the clock starts when the request goes on the wire (``wire.clock``, as in the sync
        # client): the pool, the request's building and a new connection's setup come before
        async with http.stream(
            "POST",
            spec.url,
            json=spec.body,
            headers=spec.headers,
            extensions={"trace": clock.atrace},
        ) as resp:
            raw.headers_at = perf()
            h = resp.headers
            action = raw.head(resp.status_code, h.get("content-type"), h.get("retry-after"))
            keep = action != "drain"  # a stream, or a plain or error body: kept
            async for chunk in resp.aiter_bytes():
                if keep:
                    stamps.append(perf())
                    chunks.append(chunk)
                raw.received += len(chunk)
                if raw.received > cap:
                    raw.fail(endpoint.too_large(raw.received), ErrorKind.TOO_LARGE)
                    break
                if halt:
                    raw.fail(f"stopped mid-answer: {halt[0]}", ErrorKind.STOPPED)
                    chunks.clear()  # not judged: its bytes would only hold memory
                    stamps.clear()
                    break
            else:
                raw.complete = True
    finally:
        if action != "stream":  # a plain or error answer: its body whole, or nothing
            if action == "body" and raw.complete:
                raw.body = b"".join(chunks)
            chunks.clear()
            stamps.clear()


async def _one(
    http: httpx.AsyncClient, raw: RawRequest, endpoint: EndpointConfig, halt: list[str]
) -> None:
    clock = WireClock()
    raw.sent = raw.issued = clock.began  # ``sent`` moves to the wire time, if any
    total = endpoint.timeout.total  # bounds the whole call, from ``issued``
    try:
        if sys.version_info >= (3, 11):
            async with asyncio.timeout(total):  # no extra task per request
                await _stream(http, raw, endpoint, halt, clock)
        else:  # pragma: no cover - Python 3.10
            await asyncio.wait_for(_stream(http, raw, endpoint, halt, clock), timeout=total)
    except (asyncio.TimeoutError, TimeoutError):
        raw.fail(endpoint.deadline(raw.received), ErrorKind.DEADLINE)
    except httpx.HTTPError as exc:
        got = raw.received or (0 if raw.headers_at is None else 1)
        raw.fail(*classify_transport(exc, endpoint.timeout, received=got))
    raw.done = time.perf_counter()
    raw.sent, raw.connected = clock.sent_at, clock.connected


async def _lag_monitor(lags: list[float], stop: asyncio.Event, log: StallLog) -> None:
    perf = time.perf_counter  # the clock of the chunk stamps
    while not stop.is_set():
        due = perf() + LAG_INTERVAL
        await asyncio.sleep(LAG_INTERVAL)
        now = perf()
        lags.append(max(0.0, now - due))
        log.tick(due, now)


def _client(
    endpoint: EndpointConfig, transport: httpx.AsyncBaseTransport | None
) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        headers=endpoint.headers(EVENT_STREAM),
        timeout=endpoint.httpx_timeout(),
        # below the 5 s idle timeout of llama.cpp's server and of uvicorn (vLLM, SGLang)
        limits=httpx.Limits(
            max_connections=1, max_keepalive_connections=1, keepalive_expiry=KEEPALIVE_EXPIRY
        ),
        transport=transport,
    )


class _Pool:
    """Keep-alive connections, one httpx client each, handed to one request at a time.

    httpcore's own pool rescans every connection on each request and each release,
    which costs more than the streams themselves at 64 connections; single-connection
    clients in a free list keep that work constant. ``limit`` caps the connections.
    """

    def __init__(
        self,
        endpoint: EndpointConfig,
        limit: int,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.limit = limit
        self.transport = transport
        self.idle: list[httpx.AsyncClient] = []
        self.every: list[httpx.AsyncClient] = []
        self.used: set[int] = set()  # ids of clients whose connection served a request
        self.freed = asyncio.Condition()

    async def warm(self, count: int) -> None:
        """Open ``count`` connections before the clock starts (``GET /models``, untimed)."""
        url = self.endpoint.base_url.rstrip("/") + "/models"

        async def ping(c: httpx.AsyncClient) -> None:
            with contextlib.suppress(httpx.HTTPError):  # warm-up only: failures show later
                await c.get(url)
                self.used.add(id(c))

        fresh = [self._new() for _ in range(min(count, self.limit) - len(self.every))]
        await asyncio.gather(*(ping(c) for c in fresh))
        self.idle.extend(fresh)

    def _new(self) -> httpx.AsyncClient:
        c = _client(self.endpoint, self.transport)
        self.every.append(c)
        return c

    async def acquire(self) -> httpx.AsyncClient:
        if self.idle:
            return self.idle.pop()
        if len(self.every) < self.limit:
            return self._new()
        async with self.freed:
            await self.freed.wait_for(lambda: bool(self.idle))
            return self.idle.pop()

    async def renew(self, c: httpx.AsyncClient) -> httpx.AsyncClient:
        """A client on a fresh connection in place of ``c`` (whose connection went stale)."""
        self.every.remove(c)
        self.used.discard(id(c))
        with contextlib.suppress(httpx.HTTPError, OSError):
            await c.aclose()
        return self._new()

    async def release(self, c: httpx.AsyncClient) -> None:
        self.idle.append(c)
        async with self.freed:
            self.freed.notify()

    async def close(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self.every), return_exceptions=True)


async def run_point(
    endpoint: EndpointConfig,
    specs: Sequence[RequestSpec],
    point: LoadPoint,
    *,
    seed: int = 0,
    expect: Sequence[Mapping[str, Any]] | None = None,
    max_connections: int = 512,
    guard: StallGuard | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> tuple[list[RawRequest], float, float, ClientHealth]:
    """Send ``specs`` at ``point``; returns the raw requests, the run's wall and perf anchors.

    Concurrency C: C tasks, each sending the next request as soon as its last one
    ended, over C keep-alive connections opened before the clock starts. Rate λ:
    each request is sent at its seeded arrival time (Poisson or gamma), however
    many are in flight, up to ``max_connections``.

    The point has a stall guard of its own: once it trips (the endpoint stalled, or
    sent runaway answers, twice in a row), the point sends nothing more and its
    remaining requests come back ``not-sent``. Nothing is sent when the session's
    ``guard`` has tripped already, and the session's guard trips in turn when the
    point found a dead endpoint (no answer completed in time) or a runaway one; a server that
    answered some requests while others timed out in its queue is only slow for
    this load, and the requests after the point still go.
    """
    raws = [
        RawRequest(spec, expect=dict(expect[i]) if expect else {}) for i, spec in enumerate(specs)
    ]
    n = len(raws)
    c = point.concurrency
    local = _point_guard(guard)
    halt: list[str] = []  # the guard's reason, once it trips: in-flight answers stop
    limit = min(c, n) if c is not None else max(1, min(n, max_connections))
    pool = _Pool(endpoint, limit, transport)
    try:
        if not local.tripped:
            await pool.warm(min(c, n) if c is not None else min(n, 8))
        lags: list[float] = []
        stop = asyncio.Event()
        stalls = StallLog("event-loop")
        stalls.period = LAG_INTERVAL
        stalls.start(time.perf_counter())
        for raw in raws:
            raw.stalls = stalls
        monitor = asyncio.create_task(_lag_monitor(lags, stop, stalls))
        wall0, perf0 = time.time(), time.perf_counter()
        cpu0 = time.thread_time()

        async def send(raw: RawRequest) -> None:
            await _send(raw, pool, endpoint, local, halt)

        if c is not None:
            await _by_concurrency(raws, c, send)
        else:
            offsets = arrival_offsets(point.value, n, burstiness=point.burstiness, seed=seed)
            await _by_rate(raws, offsets, send, local)
        # a point that sent nothing generated no load: its CPU says nothing about the client
        sent = any(r.kind != ErrorKind.NOT_SENT for r in raws)
        cpu = time.thread_time() - cpu0 if sent else 0.0
        wall = time.perf_counter() - perf0
        stop.set()
        await monitor
        stalls.stop()  # judged after the point: nothing is overdue then
    finally:
        await pool.close()
    _report_to_session(guard, local, raws)
    return raws, wall0, perf0, _health(raws, lags, cpu, wall)


async def _send(
    raw: RawRequest, pool: _Pool, endpoint: EndpointConfig, local: StallGuard, halt: list[str]
) -> None:
    """One request over a pooled connection, unless the point's guard refuses it."""
    refused = local.blocked()
    if refused is not None:
        raw.sent = raw.issued = raw.done = time.perf_counter()
        raw.fail(refused, ErrorKind.NOT_SENT)
        return
    http = await pool.acquire()
    try:
        http = await _attempts(pool, http, raw, endpoint, halt)
        pool.used.add(id(http))
    finally:
        await pool.release(http)
    local.note(raw.kind, raw.error, raw.status)
    if not halt and local.reason is not None:
        halt.append(local.reason)


async def _by_concurrency(
    raws: Sequence[RawRequest], c: int, send: Callable[[RawRequest], Awaitable[None]]
) -> None:
    """C tasks, each sending the next request as soon as its last one ended."""
    queue = iter(raws)

    async def worker() -> None:
        for raw in queue:
            await send(raw)

    await asyncio.gather(*(worker() for _ in range(min(c, len(raws)))))


async def _by_rate(
    raws: Sequence[RawRequest],
    offsets: Sequence[float],
    send: Callable[[RawRequest], Awaitable[None]],
    local: StallGuard,
) -> None:
    """Each request at its arrival offset, however many are in flight."""
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def at(offset: float, raw: RawRequest) -> None:
        delay = start + offset - loop.time()
        if delay > 0 and not local.tripped:
            await asyncio.sleep(delay)
        await send(raw)

    await asyncio.gather(*(at(o, r) for o, r in zip(offsets, raws, strict=True)))


def _health(
    raws: Sequence[RawRequest], lags: Sequence[float], cpu: float, wall: float
) -> ClientHealth:
    """How the client fared over the point: its CPU, and the event loop's lateness."""
    return ClientHealth(
        cpu_seconds=cpu,
        wall_seconds=wall,
        requests=len(raws),
        tokens=0,
        lag_p99=quantile(lags, 0.99) if lags else 0.0,
        lag_max=max(lags) if lags else 0.0,
        lag_samples=len(lags),
        lag_p50=quantile(lags, 0.5) if lags else 0.0,
        # what the loop lost beyond timer slack: jitter of a millisecond on every tick is no
        # stall, and summed over thousands of ticks it would look like one
        lag_total=sum(x - SLACK for x in lags if x > SLACK),
        retries=sum(1 for r in raws if r.retried),
    )


async def _attempts(
    pool: _Pool, http: httpx.AsyncClient, raw: RawRequest, endpoint: EndpointConfig, halt: list[str]
) -> httpx.AsyncClient:
    """Send ``raw``, again where ``protocol.Attempts`` says so; returns the client it ended on."""
    attempts = Attempts(endpoint)
    reused = id(http) in pool.used
    while True:
        await _one(http, raw, endpoint, halt)
        step = attempts.after(raw, reused=reused)
        if step is None:
            break
        if step.fresh:
            http, reused = await pool.renew(http), False
        else:
            await asyncio.sleep(step.wait)
        raw.reset()
    raw.retried = attempts.fresh_retries > 0
    raw.notes = tuple(attempts.notes)
    return http


def _point_guard(session: StallGuard | None) -> StallGuard:
    """A point's own guard, tripped already when the session's is."""
    local = StallGuard(session.limit if session is not None else 2)
    reason = session.reason if session is not None else None
    if reason is not None:
        local.trip(reason)
    return local


def _report_to_session(
    session: StallGuard | None, local: StallGuard, raws: Sequence[RawRequest]
) -> None:
    """Trip the session's guard when the point found a runaway or a dead endpoint."""
    if session is None or session.tripped:
        return
    if any(r.status and r.status < 500 for r in raws):
        session.answered()  # the endpoint is up: its later failures are findings, not a stop
    if local.reason is None:
        return
    # a queued server completes some answers while others time out; a dead one none
    answered = any(r.status and r.kind not in STALL_KINDS | {ErrorKind.STOPPED} for r in raws)
    if local.runaway or not answered:
        session.trip(local.reason)


def completion_of(
    raw: RawRequest,
    *,
    dialect: str = Settings.dialect,
    stats_map: Mapping[str, str] | None = None,
    counter: Any = None,
) -> Completion:
    """The ``Completion`` a raw request amounts to: its bytes through the protocol core's
    decoder, as the sync client reads them (parsed after the run)."""
    decoder: StreamDecoder | None = None
    if raw.spec.stream:
        decoder = StreamDecoder(raw.spec.api)
        decoder.feed_many(raw.chunks, raw.stamps)
        if raw.complete:
            decoder.close()
    completion, _ = assemble(
        raw, decoder, dialect=dialect, stats_map=stats_map, counter=counter, stalls=raw.stalls
    )
    if raw.notes:
        completion = replace(completion, retries=raw.notes)
    return with_connect(completion, raw.connected)


def _server_ttft(chunks: Sequence[Any]) -> float | None:
    """The server's own time to first content (``ddtree_stats.ttft_ms``), in seconds."""
    for obj in reversed(chunks):
        if isinstance(obj, dict):
            stats = obj.get("ddtree_stats")
            if isinstance(stats, dict):
                value = stats.get("ttft_ms")
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    return float(value) / 1000.0
    return None


def validate(
    raws: Sequence[RawRequest],
    point: LoadPoint,
    wall0: float,
    perf0: float,
    *,
    judge: Callable[..., Sequence[Any]] | None,
    dialect: str = Settings.dialect,
    stats_map: Mapping[str, str] | None = None,
    counter: Any = None,
    worker: str = "main",
    client_saturated: bool = False,
) -> list[Sample]:
    """Parse and judge every raw request; one ``Sample`` each, valid or not.

    ``judge(completion, **expect)`` returns the violations of a completion (the
    project's invariants), ``expect`` being the request's own expectations; None
    judges only the exchange (HTTP status, transport). With ``client_saturated``
    the checks that compare the server's figures with the client's own timings
    (a server decode rate above the client-measured one) are withheld, never
    judged: a late client would make an honest server look inflated.
    """
    out: list[Sample] = []
    for raw in raws:
        c = completion_of(raw, dialect=dialect, stats_map=stats_map, counter=counter)
        codes, evidence, withheld = _judged(c, raw.expect, judge, client_saturated)
        measured = Sample.from_completion(c, (), round=0, worker=worker)
        out.append(
            replace(
                measured,
                valid=not codes,
                codes=codes,
                point=point,
                start=wall0 + (raw.sent - perf0),
                gaps=tuple(b - a for a, b in pairwise(c.timings.chunk_times)),
                error=c.error,
                evidence=evidence,
                server_ttft=_server_ttft(c.raw) if isinstance(c.raw, list) else None,
                withheld=withheld,
            )
        )
    return out


def _judged(
    c: Completion,
    expect: Mapping[str, Any],
    judge: Callable[..., Sequence[Any]] | None,
    client_saturated: bool,
) -> tuple[tuple[str, ...], str, tuple[str, ...]]:
    """(codes, evidence, withheld codes) of one completion.

    A request that was not sent, or that hit the client's own time limits, is not
    judged: it says nothing about the outputs (``not-sent``, ``client-timeout``).
    """
    if c.error_kind in (ErrorKind.NOT_SENT, ErrorKind.STOPPED):
        return (NOT_SENT,), f"{c.error}\n    request: {c.request.describe()}", ()
    if c.error_kind in STALL_KINDS:
        return (CLIENT_TIMEOUT,), f"{c.error}\n    request: {c.request.describe()}", ()
    found = judge(c, **expect) if judge is not None else []
    violations = list(found)
    # the checks the invariants withheld themselves because the client stalled in this decode
    # (a check withheld for the request's own sake is no timing matter)
    stalled = (w for w in getattr(found, "withheld", ()) if getattr(w, "client_stalled", False))
    withheld = tuple(dict.fromkeys(str(w.code) for w in stalled))
    if client_saturated:
        timed = [v for v in violations if _client_timed(v)]
        violations = [v for v in violations if not _client_timed(v)]
        withheld = tuple(dict.fromkeys([*withheld, *(str(v.code) for v in timed)]))
    codes = tuple(dict.fromkeys(str(getattr(v, "code", "invalid")) for v in violations))
    if not c.ok and not codes:
        codes = ("transport",)
    evidence = ""
    if violations:
        first = violations[0]
        evidence = first.format() if hasattr(first, "format") else str(first)
    elif not c.ok:
        evidence = f"{c.error or f'HTTP {c.status_code}'}\n    request: {c.request.describe()}"
    return codes, evidence, withheld


def _client_timed(violation: Any) -> bool:
    """Whether a violation rests on the client's own timing (the decode-rate comparison)."""
    evidence = getattr(violation, "evidence", None) or {}
    return "client_decode_tokens_per_second" in evidence
