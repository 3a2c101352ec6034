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
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import httpx
from httpx_sse import EventSource

from pytest_ddtree.load.arrivals import LoadPoint, arrival_offsets
from pytest_ddtree.load.metrics import ClientHealth, LoadSample
from pytest_ddtree.settings import Timeout
from pytest_ddtree.sweep import quantile
from pytest_ddtree.wire import dialects
from pytest_ddtree.wire._net import KEEPALIVE_EXPIRY
from pytest_ddtree.wire.client import _chunk_choice, _http_error, _transport_error
from pytest_ddtree.wire.completion import Api, Completion, RequestSpec, StreamInfo, Timings

__all__ = ["DEFAULT_MAX_BYTES", "Endpoint", "RawRequest", "run_point", "validate"]

#: a streamed answer larger than this is cut and reported (a runaway server)
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
#: the lag monitor's timer period
LAG_INTERVAL = 0.005

Prompt = str | Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Endpoint:
    """Where and how requests go (no secrets in ``repr``)."""

    base_url: str
    model: str | None = None
    api: Api = "chat"
    api_key: str | None = field(default=None, repr=False)
    budget_mode: str = "field"
    budget_field: str = "tree_budget"
    budget_endpoints: Mapping[int, str] = field(default_factory=dict)
    timeout: Timeout = field(default_factory=Timeout)
    max_bytes: int = DEFAULT_MAX_BYTES
    enable_thinking: bool = False

    def spec(
        self,
        prompt: Prompt,
        *,
        tree_budget: int | None,
        max_tokens: int,
        temperature: float = 0.0,
        prompt_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> RequestSpec:
        """The streamed request for ``prompt`` at ``tree_budget``."""
        body: dict[str, Any] = {}
        if self.api == "chat":
            msgs = (
                [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
            )
            body["messages"] = msgs
            body["chat_template_kwargs"] = {"enable_thinking": self.enable_thinking}
        else:
            if not isinstance(prompt, str):
                raise TypeError("the completions API takes a prompt string, not messages")
            body["prompt"] = prompt
        if self.model:
            body["model"] = self.model
        body.update(
            max_tokens=max_tokens,
            temperature=temperature,
            stream=True,
            stream_options={"include_usage": True},
        )
        body.update(extra or {})
        base = self.base_url.rstrip("/")
        if tree_budget is not None:
            if self.budget_mode == "field":
                body = dialects.put_budget(body, self.budget_field, tree_budget)
            elif self.budget_mode == "endpoints":
                if tree_budget not in self.budget_endpoints:
                    raise ValueError(f"no endpoint for tree_budget {tree_budget}")
                base = self.budget_endpoints[tree_budget].rstrip("/")
        path = "/chat/completions" if self.api == "chat" else "/completions"
        return RequestSpec(
            api=self.api,
            url=base + path,
            body=body,
            tree_budget=tree_budget,
            stream=True,
            max_tokens=max_tokens,
            temperature=temperature,
            prompt_id=prompt_id,
        )


@dataclass
class RawRequest:
    """What the hot path recorded for one request (parsed later by ``validate``)."""

    spec: RequestSpec
    expect: Mapping[str, Any] = field(default_factory=dict)
    issued: float = 0.0
    sent: float = 0.0
    headers_at: float | None = None
    done: float = 0.0
    status: int = 0
    error: str | None = None
    data: list[str] = field(default_factory=list)
    stamps: list[float] = field(default_factory=list)
    body: bytes = b""
    #: the connection failed before any byte of the response (a stale keep-alive, if reused)
    nothing_received: bool = False
    retried: bool = False

    def reset(self) -> None:
        """Forget a failed attempt, to send the request again."""
        self.headers_at, self.status, self.error, self.body = None, 0, None, b""
        self.data.clear()
        self.stamps.clear()
        self.nothing_received = False


async def _send(http: httpx.AsyncClient, raw: RawRequest, endpoint: Endpoint) -> None:
    """Stream one request into ``raw`` (never raises for what the server does)."""
    spec = raw.spec
    cap = endpoint.max_bytes
    perf = time.perf_counter
    data, stamps = raw.data, raw.stamps
    size = 0

    async def trace(name: str, info: Mapping[str, Any]) -> None:
        # the clock starts when the request goes on the wire, not when httpx starts
        # building it: client-side preparation is not server latency
        if name == "http11.send_request_headers.started":
            raw.sent = perf()

    async with http.stream("POST", spec.url, json=spec.body, extensions={"trace": trace}) as resp:
        raw.headers_at = perf()
        raw.status = resp.status_code
        if resp.status_code >= 400 or "text/event-stream" not in resp.headers.get(
            "content-type", ""
        ):
            chunks = []
            async for piece in resp.aiter_bytes():
                chunks.append(piece)
                size += len(piece)
                if size > cap:
                    raw.error = f"response larger than {cap} bytes: cut"
                    break
            raw.body = b"".join(chunks)
            return
        async for sse in EventSource(resp).aiter_sse():
            stamps.append(perf())
            data.append(sse.data)
            size += len(sse.data)
            if size > cap:
                raw.error = f"stream larger than {cap} bytes: cut"
                return


async def _one(http: httpx.AsyncClient, raw: RawRequest, endpoint: Endpoint) -> None:
    raw.sent = raw.issued = time.perf_counter()  # ``sent`` moves to the wire time, if any
    total = endpoint.timeout.total
    try:
        if sys.version_info >= (3, 11):
            async with asyncio.timeout(total):  # no extra task per request
                await _send(http, raw, endpoint)
        else:  # pragma: no cover - Python 3.10
            await asyncio.wait_for(_send(http, raw, endpoint), timeout=total)
    except (asyncio.TimeoutError, TimeoutError):
        raw.error = f"deadline: request still running after the total deadline of {total:g}s"
    except httpx.HTTPError as exc:
        raw.error = _transport_error(exc, endpoint.timeout)
        raw.nothing_received = raw.headers_at is None and isinstance(
            exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)
        )
    raw.done = time.perf_counter()


async def _lag_monitor(lags: list[float], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        due = loop.time() + LAG_INTERVAL
        await asyncio.sleep(LAG_INTERVAL)
        lags.append(max(0.0, loop.time() - due))


def _client(endpoint: Endpoint) -> httpx.AsyncClient:
    headers = {"Accept": "text/event-stream"}
    if endpoint.api_key:
        headers["Authorization"] = f"Bearer {endpoint.api_key}"
    t = endpoint.timeout
    return httpx.AsyncClient(
        headers=headers,
        timeout=httpx.Timeout(
            connect=t.connect, read=min(t.read, t.total), write=t.connect, pool=t.total
        ),
        # below the 5 s idle timeout of llama.cpp's server and of uvicorn (vLLM, SGLang)
        limits=httpx.Limits(
            max_connections=1, max_keepalive_connections=1, keepalive_expiry=KEEPALIVE_EXPIRY
        ),
    )


class _Pool:
    """Keep-alive connections, one httpx client each, handed to one request at a time.

    httpcore's own pool rescans every connection on each request and each release,
    which costs more than the streams themselves at 64 connections; single-connection
    clients in a free list keep that work constant. ``limit`` caps the connections.
    """

    def __init__(self, endpoint: Endpoint, limit: int) -> None:
        self.endpoint = endpoint
        self.limit = limit
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
        c = _client(self.endpoint)
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
    endpoint: Endpoint,
    specs: Sequence[RequestSpec],
    point: LoadPoint,
    *,
    seed: int = 0,
    expect: Sequence[Mapping[str, Any]] | None = None,
    max_connections: int = 512,
) -> tuple[list[RawRequest], float, float, ClientHealth]:
    """Send ``specs`` at ``point``; returns the raw requests, the run's wall and perf anchors.

    Concurrency C: C tasks, each sending the next request as soon as its last one
    ended, over C keep-alive connections opened before the clock starts. Rate λ:
    each request is sent at its seeded arrival time (Poisson or gamma), however
    many are in flight, up to ``max_connections``.
    """
    raws = [RawRequest(spec, dict(expect[i]) if expect else {}) for i, spec in enumerate(specs)]
    n = len(raws)
    c = point.concurrency
    pool = _Pool(endpoint, min(c, n) if c is not None else max(1, min(n, max_connections)))
    try:
        await pool.warm(min(c, n) if c is not None else min(n, 8))
        lags: list[float] = []
        stop = asyncio.Event()
        monitor = asyncio.create_task(_lag_monitor(lags, stop))
        wall0, perf0 = time.time(), time.perf_counter()
        cpu0 = time.thread_time()

        async def send(raw: RawRequest) -> None:
            http = await pool.acquire()
            try:
                reused = id(http) in pool.used
                await _one(http, raw, endpoint)
                if raw.error is not None and raw.nothing_received and reused:
                    # the server had closed the idle keep-alive connection: exactly one
                    # retry on a fresh one, counted (the client's race, not the server's fault)
                    http = await pool.renew(http)
                    raw.reset()
                    raw.retried = True
                    await _one(http, raw, endpoint)
                pool.used.add(id(http))
            finally:
                await pool.release(http)

        if c is not None:
            queue = iter(raws)

            async def worker() -> None:
                for raw in queue:
                    await send(raw)

            await asyncio.gather(*(worker() for _ in range(min(c, n))))
        else:
            offsets = arrival_offsets(point.value, n, burstiness=point.burstiness, seed=seed)
            loop = asyncio.get_running_loop()
            start = loop.time()

            async def at(offset: float, raw: RawRequest) -> None:
                delay = start + offset - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                await send(raw)

            await asyncio.gather(*(at(o, r) for o, r in zip(offsets, raws, strict=True)))
        cpu = time.thread_time() - cpu0
        wall = time.perf_counter() - perf0
        stop.set()
        await monitor
    finally:
        await pool.close()
    health = ClientHealth(
        cpu_seconds=cpu,
        wall_seconds=wall,
        requests=n,
        tokens=0,
        lag_p99=quantile(lags, 0.99) if lags else 0.0,
        lag_max=max(lags) if lags else 0.0,
        lag_samples=len(lags),
        retries=sum(1 for r in raws if r.retried),
    )
    return raws, wall0, perf0, health


def completion_of(
    raw: RawRequest,
    *,
    dialect: str = "auto",
    stats_map: Mapping[str, str] | None = None,
    counter: Any = None,
) -> Completion:
    """The ``Completion`` a raw request amounts to (parsed after the run)."""
    spec = raw.spec
    chunks: list[Any] = []
    content_stamps: list[float] = []
    pieces: list[str] = []
    text: list[str] = []
    reasoning: list[str] = []
    finish: str | None = None
    finish_chunks = 0
    done_seen = False
    usage_seen = False
    parse_errors: list[str] = []
    error_events: list[Mapping[str, Any]] = []
    error = raw.error
    if raw.status >= 400 and error is None:
        try:
            payload = json.loads(raw.body)
        except ValueError:
            payload = None
        error = _http_error(raw.status, payload, raw.body)
    for data, stamp in zip(raw.data, raw.stamps, strict=True):
        if done_seen:
            parse_errors.append(f"event after [DONE]: {data[:120]!r}")
            continue
        if data.strip() == "[DONE]":
            done_seen = True
            continue
        try:
            obj = json.loads(data)
        except ValueError:
            parse_errors.append(data[:200])
            continue
        if not isinstance(obj, dict):
            parse_errors.append(data[:200])
            continue
        chunks.append(obj)
        if "error" in obj:
            err = obj["error"]
            error_events.append(err if isinstance(err, dict) else {"error": err})
        if type(obj.get("usage")) is dict:
            usage_seen = True
        piece, rpiece, fin = _chunk_choice(obj, spec.api)
        if piece or rpiece:
            content_stamps.append(stamp)
            pieces.append(piece + rpiece)
            if piece:
                text.append(piece)
            if rpiece:
                reasoning.append(rpiece)
        if fin is not None:
            finish_chunks += 1
            finish = fin
    if raw.status and raw.status < 400 and not raw.data and error is None:
        error = f"response is not an event stream: {raw.body[:200]!r}"
    info = StreamInfo(
        events=len(raw.data),
        done_seen=done_seen,
        finish_chunks=finish_chunks,
        parse_errors=tuple(parse_errors),
        error_events=tuple(error_events),
        usage_seen=usage_seen,
    )
    found = dialects.detect(chunks) if dialect == "auto" else dialect
    stats = dialects.extract_stats(found, chunks, stats_map)
    usage = dialects.extract_usage(chunks)
    full_text, full_reasoning = "".join(text), "".join(reasoning)
    local: int | None = None
    first_tokens: int | None = None
    has_usage = usage is not None and usage.completion_tokens is not None
    if counter is not None:
        if not has_usage:
            local = counter.count(full_text) + (
                counter.count(full_reasoning) if full_reasoning else 0
            )
        if pieces:
            first_tokens = max(1, counter.count(pieces[0]))
    source = "usage" if has_usage else (counter.source if local is not None else "none")
    first = chunks[0] if chunks else {}
    return Completion(
        request=spec,
        status_code=raw.status,
        text=full_text,
        reasoning_text=full_reasoning,
        finish_reason=finish,
        usage=usage,
        stats=stats,
        timings=Timings(
            sent=raw.sent,
            headers=raw.headers_at,
            first_content=content_stamps[0] if content_stamps else None,
            done=raw.done,
            chunk_times=tuple(content_stamps),
            first_chunk_tokens=first_tokens,
        ),
        raw=chunks,
        stream=info,
        error=error,
        local_completion_tokens=local,
        token_count_source=source,
        local_count_source=counter.source if local is not None and counter is not None else "none",
        chunk_texts=tuple(pieces),
        model=first.get("model") if isinstance(first.get("model"), str) else None,
        response_id=first.get("id") if isinstance(first.get("id"), str) else None,
    )


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
    dialect: str = "auto",
    stats_map: Mapping[str, str] | None = None,
    counter: Any = None,
    worker: str = "main",
    client_saturated: bool = False,
) -> list[LoadSample]:
    """Parse and judge every raw request; one ``LoadSample`` each, valid or not.

    ``judge(completion, **expect)`` returns the violations of a completion (the
    project's invariants), ``expect`` being the request's own expectations; None
    judges only the exchange (HTTP status, transport). With ``client_saturated``
    the checks that compare the server's figures with the client's own timings
    (a server decode rate above the client-measured one) are withheld, never
    judged: a late client would make an honest server look inflated.
    """
    out: list[LoadSample] = []
    for raw in raws:
        c = completion_of(raw, dialect=dialect, stats_map=stats_map, counter=counter)
        violations = list(judge(c, **raw.expect)) if judge is not None else []
        withheld: tuple[str, ...] = ()
        if client_saturated:
            timed = [v for v in violations if _client_timed(v)]
            violations = [v for v in violations if not _client_timed(v)]
            withheld = tuple(dict.fromkeys(str(v.code) for v in timed))
        codes = tuple(dict.fromkeys(str(getattr(v, "code", "invalid")) for v in violations))
        if not c.ok and not codes:
            codes = ("transport",)
        evidence = ""
        if violations:
            first = violations[0]
            evidence = first.format() if hasattr(first, "format") else str(first)
        elif not c.ok:
            evidence = f"{c.error or f'HTTP {c.status_code}'}\n    request: {c.request.describe()}"
        times = c.timings.chunk_times
        stats = c.stats
        out.append(
            LoadSample(
                point=point,
                tree_budget=raw.spec.tree_budget,
                start=wall0 + (raw.sent - perf0),
                e2e=raw.done - raw.sent,
                ttft=c.ttft,
                gaps=tuple(b - a for a, b in pairwise(times)),
                output_tokens=c.completion_tokens,
                valid=not codes,
                codes=codes,
                error=c.error,
                evidence=evidence,
                acceptance=stats.mean_acceptance_length if stats is not None else None,
                drafted=stats.num_draft_tokens if stats is not None else None,
                accepted=stats.num_accepted_draft_tokens if stats is not None else None,
                server_ttft=_server_ttft(c.raw) if isinstance(c.raw, list) else None,
                prompt_id=raw.spec.prompt_id,
                worker=worker,
                withheld=withheld,
            )
        )
    return out


def _client_timed(violation: Any) -> bool:
    """Whether a violation rests on the client's own timing (the decode-rate comparison)."""
    evidence = getattr(violation, "evidence", None) or {}
    return "client_decode_tokens_per_second" in evidence
