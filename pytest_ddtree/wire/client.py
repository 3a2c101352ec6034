"""The sync HTTP client: one pooled httpx client, SSE streaming, precise timings.

``DDTreeClient.chat`` and ``DDTreeClient.complete`` never raise for what the
server did wrong (HTTP errors, broken streams, timeouts): those end up in the
returned ``Completion`` (``error``, ``stream``) so the invariants can name
them. They raise only for misuse (bad arguments).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx

from pytest_ddtree.core.dialects import AUTO
from pytest_ddtree.core.settings import Timeout
from pytest_ddtree.core.wording import Note
from pytest_ddtree.wire import _net
from pytest_ddtree.wire.clock import WireClock, with_connect
from pytest_ddtree.wire.completion import Api, Completion, ErrorKind, RequestSpec
from pytest_ddtree.wire.health import TICKER
from pytest_ddtree.wire.protocol import (
    EVENT_STREAM,
    Attempts,
    EndpointConfig,
    Exchange,
    Messages,
    StallGuard,
    StreamDecoder,
    assemble,
    classify_transport,
    failed,
    one_line,
)

if TYPE_CHECKING:
    from pytest_ddtree.wire.tokens import TokenCounter

#: the keywords of ``chat``/``complete`` that shape the request (any other is a body field)
#: how long ``props`` waits for ``GET /props`` (a hint for an advice: never a whole deadline)
PROPS_SECONDS = 3.0

REQUEST_KEYWORDS = ("max_tokens", "temperature", "tree_budget", "stream", "prompt_id", "headers")


class WatchedCounter:
    """A token counter whose calls are bounded by the client's total deadline and whose
    failures the client counts; everything else is the wrapped counter's."""

    def __init__(self, inner: Any, client: DDTreeClient) -> None:
        self._inner = inner
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _call(self, method: str, text: str) -> Any:
        try:
            with _net.scope(self._client.timeout.total):
                return getattr(self._inner, method)(text)
        except Exception as exc:
            self._client.note_counter_failure(f"{type(exc).__name__}: {one_line(str(exc), 160)}")
            raise

    def count(self, text: str) -> int:
        """Tokens in ``text``."""
        result: int = self._call("count", text)
        return result

    def encode(self, text: str) -> list[int] | None:
        """Token ids of ``text`` (None when the counter only counts)."""
        result: list[int] | None = self._call("encode", text)
        return result


class EndpointError(RuntimeError):
    """The endpoint cannot be used at all; the message is one line saying what to try."""


def root_url(base_url: str) -> str:
    """``http://h:p/v1`` -> ``http://h:p`` (where /health and /tokenize live)."""
    base = base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


class DDTreeClient:
    """The sync client for one OpenAI-compatible speculative-decoding endpoint.

    A thin I/O shell over ``protocol``: it moves the bytes under the socket
    deadline backend (``_net``) and stamps the times; the request, the event
    decoding, the ``Completion``, the retry rules and the stall guard are the
    protocol core's, shared with the load runner. ``endpoint`` is an
    ``EndpointConfig`` or a base URL (then ``options`` are its fields).

    ``guard`` (default: a new ``StallGuard(stall_limit)``) refuses requests once
    the endpoint stalled, or sent runaway answers, ``stall_limit`` times in a row.
    """

    def __init__(
        self,
        endpoint: str | EndpointConfig,
        *,
        counter: TokenCounter | None = None,
        transport: httpx.BaseTransport | None = None,
        stall_limit: int = 2,
        guard: StallGuard | None = None,
        count_chunks: bool = False,
        **options: Any,
    ) -> None:
        options = {k: v for k, v in options.items() if v is not None}
        if isinstance(endpoint, EndpointConfig):
            self.config = replace(endpoint, **options) if options else endpoint
        else:
            self.config = EndpointConfig(endpoint, **options)
        # the configured dialect, or the one the first answer with statistics was read in;
        # None while nothing is detected (never the 'none' choice, which is configured)
        self.detected_dialect: str | None = (
            None if self.config.dialect == AUTO else self.config.dialect
        )
        self.counter = counter
        self.count_chunks = count_chunks
        self.guard = guard if guard is not None else StallGuard(stall_limit)
        #: where ``--ddtree-timeout`` came from, for the messages that name it
        self.timeout_source = "--ddtree-timeout"
        #: called with every answer once it is counted (the pytest layer's feature watch);
        #: whatever it raises reaches the caller
        self.on_answer: Callable[[Completion], None] | None = None
        self.requests_sent = 0
        self.not_sent = 0
        self.stats_seen = 0
        # counted, shown in the summary and the report, never hidden
        self.reuse_retries = 0
        self.rate_limited = 0
        self.retried_429 = 0
        self.counter_failures = 0
        self.counter_error: str | None = None
        # checks on the server's figures against the client's timings, not judged
        # because the client itself stalled during that request's decode
        self.withheld = 0
        self.withheld_worst: str | None = None
        self._withheld_share = -1.0
        self._headers = self.config.headers()
        self._timeouts = self.config.httpx_timeout()
        self._transport = transport
        if transport is None:
            limits = httpx.Limits(
                max_connections=64,
                max_keepalive_connections=32,
                keepalive_expiry=_net.KEEPALIVE_EXPIRY,
            )
            transport, self.socket_deadlines = _net.make_transport(limits)
        else:
            self.socket_deadlines = False
        self._http = httpx.Client(
            headers=self._headers, timeout=self._timeouts, transport=transport
        )

    # ------------------------------------------------------------------ admin

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> DDTreeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def base_url(self) -> str:
        """The endpoint's base URL (ends in /v1 for OpenAI-compatible servers)."""
        return self.config.base_url

    @property
    def model(self) -> str | None:
        """The model id sent with every request (None: the server's default)."""
        return self.config.model

    @property
    def timeout(self) -> Timeout:
        """The per-request time limits."""
        return self.config.timeout

    @property
    def api(self) -> Api:
        """The API requests go to by default (``chat`` or ``completions``)."""
        return self.config.api

    @property
    def root_url(self) -> str:
        """The server root (where /health and /tokenize live)."""
        return root_url(self.base_url)

    @property
    def http(self) -> httpx.Client:
        """The pooled httpx client (shared; do not close)."""
        return self._http

    def list_models(
        self, base_url: str | None = None, *, option: str = "--ddtree-endpoint"
    ) -> list[str]:
        """Model ids from ``GET /models``; ``EndpointError`` with a one-line reason otherwise.

        ``option`` names the setting to fix in the message.
        """
        url = f"{(base_url or self.base_url).rstrip('/')}/models"
        cap, t = self.config.max_response_bytes, self.timeout
        # a start-up probe must not take a whole request deadline
        limit = min(t.total, t.connect + t.read)
        with _net.scope(limit) as sc:
            try:
                with self._http.stream("GET", url) as resp:
                    content, over = _read_capped(resp, cap)
            except httpx.TimeoutException as exc:
                if isinstance(exc, httpx.ReadTimeout) and not sc.bytes_in and not sc.deadline_hit:
                    raise EndpointError(
                        f"{url}: {urlsplit(url).netloc} accepted the connection but sent no "
                        f"byte in {t.read:g}s (the read timeout); is the server healthy? (raise "
                        "--ddtree-timeout if it is slow to answer)"
                    ) from None
                if sc.deadline_hit:
                    raise EndpointError(
                        f"{url}: no complete answer within {limit:g}s (the bytes came too "
                        "slowly or not at all); is the server healthy? (raise --ddtree-timeout "
                        "if it is slow to answer)"
                    ) from None
                raise EndpointError(
                    f"{url}: timed out after {t.connect:g}s; is the server up? "
                    "(raise --ddtree-timeout if it is slow to answer)"
                ) from None
            except httpx.TransportError as exc:
                raise EndpointError(
                    f"{url}: cannot connect ({type(exc).__name__}: {one_line(str(exc))}); "
                    f"check {option} and that the server is running"
                ) from None
        if over:
            raise EndpointError(
                f"{url}: the model list is larger than --ddtree-max-response-bytes "
                f"{cap:,}; is this an OpenAI-compatible base URL?"
            )
        if resp.status_code in (401, 403):
            raise EndpointError(
                f"{url}: HTTP {resp.status_code} unauthorized; give a valid key with "
                "--ddtree-api-key or DDTREE_API_KEY (OPENAI_API_KEY is sent only to an "
                "endpoint from OPENAI_BASE_URL)"
            )
        if resp.status_code >= 400:
            raise EndpointError(
                f"{url}: HTTP {resp.status_code}; "
                "is this an OpenAI-compatible base URL ending in /v1?"
            )
        try:
            ids = [str(m["id"]) for m in json.loads(content)["data"]]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise EndpointError(
                f"{url}: the answer is not an OpenAI model list; is this the /v1 base URL?"
            ) from None
        return ids

    def props(self, seconds: float = PROPS_SECONDS) -> dict[str, Any] | None:
        """The server's ``GET /props`` (llama.cpp's: its chat template's capabilities), or
        None when it answers no JSON object within ``seconds``: a server without it, or
        one that fails, says nothing. Asked on a new connection: a pooled one the server
        closed after its last answer would fail it before any byte."""
        return self._json_object(f"{self.root_url}/props", seconds)

    def models_document(self, seconds: float = PROPS_SECONDS) -> dict[str, Any] | None:
        """The server's ``GET /models`` answer whole (its context length, where it states
        one), or None when it answers no JSON object within ``seconds``."""
        return self._json_object(f"{self.base_url.rstrip('/')}/models", seconds)

    def _json_object(self, url: str, seconds: float) -> dict[str, Any] | None:
        """A JSON object from ``GET url`` on a new connection, or None (see :meth:`props`)."""
        limit = httpx.Timeout(seconds)
        with _net.scope(seconds), self._fresh_client() as http:
            try:
                with http.stream("GET", url, timeout=limit) as resp:
                    content, over = _read_capped(resp, self.config.max_response_bytes)
            except httpx.HTTPError:
                return None
        if over or resp.status_code != 200:
            return None
        try:
            found = json.loads(content)
        except (ValueError, RecursionError):
            return None
        return found if isinstance(found, dict) else None

    # ---------------------------------------------------------------- requests

    def chat(self, messages: Messages, **kwargs: Any) -> Completion:
        """One chat completion; ``messages`` may be a plain user prompt string.

        Keywords: ``max_tokens``, ``temperature`` (0), ``tree_budget``, ``stream``
        (True), ``prompt_id``, ``headers``; any other keyword is a JSON body field.
        """
        return self._request(messages, "chat", **kwargs)

    def complete(self, prompt: str, **kwargs: Any) -> Completion:
        """One raw text completion (``/completions``); keywords as for ``chat``."""
        return self._request(prompt, "completions", **kwargs)

    def request(self, prompt: Messages, *, api: Api | None = None, **kwargs: Any) -> Completion:
        """``chat`` or ``complete`` according to ``api`` (default: the configured API)."""
        return self._request(prompt, api or self.api, **kwargs)

    def replay(self, spec: RequestSpec) -> Completion:
        """Send the request ``spec`` describes to this client's endpoint, without its budget.

        Used to re-run a failing request on a target-only baseline: same body,
        headers, streaming mode and prompt id; the budget field is removed.
        """
        return self._send(self.config.replay(spec))

    def _request(self, prompt: Messages, api: Api, **kwargs: Any) -> Completion:
        # the request's own keywords go to ``EndpointConfig.request``; the rest is body
        known = {k: kwargs.pop(k) for k in REQUEST_KEYWORDS if k in kwargs}
        known.setdefault("dialect", self.detected_dialect)
        return self._send(self.config.request(prompt, api=api, extra=kwargs, **known))

    def _send(self, spec: RequestSpec) -> Completion:
        blocked = self.guard.blocked()
        if blocked is not None:
            self.not_sent += 1
            return failed(spec, blocked, ErrorKind.NOT_SENT)
        try:
            completion = self._attempts(spec)
        except Exception as exc:  # RecursionError, MemoryError in a parser, a bug: named
            completion = failed(
                spec,
                f"client error while handling the response: {type(exc).__name__}: "
                f"{one_line(str(exc))}",
                ErrorKind.CLIENT,
            )
        self.requests_sent += 1
        if completion.stats is not None:
            self.stats_seen += 1
        self.guard.record(completion)
        if self.on_answer is not None:
            self.on_answer(completion)
        return completion

    def _attempts(self, spec: RequestSpec) -> Completion:
        """One request, sent again where ``protocol.Attempts`` says so, and assembled."""
        attempts = Attempts(self.config)
        fresh: httpx.Client | None = None
        # the ticker watches the client's own health while the answer streams in
        with TICKER.watching() as stalls:
            try:
                while True:
                    ex, decoder, sc, clock = self._once(spec, fresh or self._http)
                    reused = fresh is None and sc.connects == 0 and not sc.deadline_hit
                    step = attempts.after(ex, reused=reused)
                    if step is None:
                        break
                    if step.fresh:
                        fresh = self._fresh_client()
                    else:
                        time.sleep(step.wait)
            finally:
                if fresh is not None:
                    fresh.close()
            self.reuse_retries += attempts.fresh_retries
            self.rate_limited += attempts.rate_limited
            self.retried_429 += attempts.retried_429
            with _net.scope(self.timeout.total):  # a /tokenize count may not hang the run
                completion, found = assemble(
                    ex,
                    decoder,
                    dialect=self.detected_dialect or AUTO,
                    stats_map=self.config.stats_map,
                    counter=self.counter,
                    count_chunks=self.count_chunks,
                    stalls=stalls,
                )
        if self.detected_dialect is None and completion.error is None and found is not None:
            self.detected_dialect = found
        if completion.count_error and not isinstance(self.counter, WatchedCounter):
            self.note_counter_failure(completion.count_error)  # a watched one counted already
        if attempts.notes:
            completion = replace(completion, retries=tuple(attempts.notes))
        return with_connect(completion, clock.connected)

    def _once(
        self, spec: RequestSpec, http: httpx.Client
    ) -> tuple[Exchange, StreamDecoder | None, _net.Scope, WireClock]:
        """One attempt: the bytes in, under the total deadline; no decision made here."""
        cfg = self.config
        clock = WireClock()  # ``sent`` is the wire's; the deadline runs from the call's start
        ex = Exchange(spec, sent=clock.began)
        decoder = StreamDecoder(spec.api) if spec.stream else None
        headers = {**spec.headers, "Accept": EVENT_STREAM} if spec.stream else spec.headers
        with _net.scope(cfg.timeout.total) as sc:
            deadline = clock.began + cfg.timeout.total
            try:
                with http.stream(
                    "POST",
                    spec.url,
                    json=spec.body,
                    headers=headers,
                    extensions={"trace": clock.trace},
                ) as resp:
                    ex.headers_at = time.perf_counter()
                    h = resp.headers
                    action = ex.head(resp.status_code, h.get("content-type"), h.get("retry-after"))
                    if action == "stream" and decoder is not None:
                        self._read_stream(resp, ex, decoder, deadline)
                    else:
                        body, over = _read_capped(resp, cfg.max_response_bytes)
                        if over:
                            ex.fail(cfg.too_large(over), ErrorKind.TOO_LARGE)
                        elif action == "body":
                            ex.body = body
            except httpx.HTTPError as exc:
                ex.fail(
                    *classify_transport(
                        exc, cfg.timeout, deadline_hit=sc.deadline_hit, received=sc.bytes_in
                    )
                )
        ex.done = time.perf_counter()
        ex.sent = clock.sent_at
        if ex.done > deadline:  # without the socket backend, the checks between chunks
            ex.fail(cfg.deadline(sc.bytes_in), ErrorKind.DEADLINE)
        return ex, decoder, sc, clock

    def _read_stream(
        self, resp: httpx.Response, ex: Exchange, decoder: StreamDecoder, deadline: float
    ) -> None:
        cfg = self.config
        for chunk in resp.iter_bytes():
            now = time.perf_counter()
            decoder.feed(chunk, now)
            if decoder.received > cfg.max_response_bytes:
                ex.fail(cfg.too_large(decoder.received), ErrorKind.TOO_LARGE)
                return
            if now > deadline:
                ex.fail(cfg.deadline(decoder.received), ErrorKind.DEADLINE)
                return
        decoder.close()

    def _fresh_client(self) -> httpx.Client:
        """A one-request client with its own pool: its connection is certainly new."""
        transport = self._transport
        if transport is None:
            transport, _ = _net.make_transport(httpx.Limits(max_connections=1))
        return httpx.Client(headers=self._headers, timeout=self._timeouts, transport=transport)

    # ---------------------------------------------------------------- counts

    def note_counter_failure(self, error: str) -> None:
        """Count one failure of the token counter (named once in the summary)."""
        self.counter_failures += 1
        if self.counter_error is None:
            self.counter_error = error

    def note_withheld(self, completion: Completion, reason: str) -> None:
        """Count one check withheld because the client stalled (the worst ``reason`` is
        named)."""
        self.withheld += 1
        stall = completion.client_stall
        share = stall.share if stall is not None else 0.0
        if share > self._withheld_share:
            self._withheld_share = share
            self.withheld_worst = reason

    def watch_counter(self, counter: Any) -> Any:
        """``counter`` with every call bounded by the request deadline and every failure
        counted here, whoever calls it (the client or the checks); None stays None."""
        if counter is None or isinstance(counter, WatchedCounter):
            return counter
        return WatchedCounter(counter, self)

    def transport_notes(self, *, benign: bool = True) -> list[Note]:
        """One note per kind of retry, rate limit or counter failure seen (empty when none);
        ``benign=False`` leaves out what qualifies no result (a request sent again on a fresh
        connection: the client's own doing, never a verdict)."""
        notes: list[Note] = []
        if self.reuse_retries and benign:
            notes.append(
                Note(
                    f"{self.reuse_retries} request(s) sent again on a fresh connection after a "
                    "reused keep-alive connection closed before any response byte"
                )
            )
        if self.rate_limited:
            notes.append(
                Note(
                    f"{self.rate_limited} HTTP 429 (rate-limited) answer(s)",
                    f"{self.retried_429} retried after Retry-After "
                    f"(--ddtree-retry-429={self.config.retry_429})",
                    "; ",
                )
            )
        if self.guard.dead:
            notes.append(
                Note(
                    "stopped early, the endpoint is down",
                    f"{self.guard.reason}; every later test that needs it was skipped (-rs "
                    "lists them)",
                )
            )
        elif self.guard.stopped:
            notes.append(
                Note(
                    "stopped early",
                    f"{self.guard.reason}; --ddtree-timeout {self.timeout.spec()} (from "
                    f"{self.timeout_source}) sets the limits, raise it if the server is only "
                    "slow; every later test that needs the endpoint was skipped (-rs lists "
                    "them)",
                )
            )
        elif self.guard.reason is not None:
            # a load test's stopped requests are its own (its failure counts them): this
            # client's count is only said when it has some, never as "0 not sent"
            unsent = (
                f"; {self.not_sent} request(s) of this client were not sent"
                if self.not_sent
                else ""
            )
            notes.append(Note("the stall guard stopped sending", f"{self.guard.reason}{unsent}"))
        if self.withheld:
            notes.append(
                Note(
                    f"the speed claim of {self.withheld} request(s) was not judged (withheld, "
                    "not passed)",
                    f"the client itself stalled during the decode (worst: {self.withheld_worst})",
                )
            )
        if self.counter_failures:
            notes.append(
                Note(
                    f"the token counter failed {self.counter_failures} time(s); the usage and "
                    "length checks that needed those counts did not run",
                    f"{self.counter_error}",
                    "; first failure: ",
                )
            )
        return notes

    def transport_counts(self) -> dict[str, int]:
        """The retry, rate-limit and counter-failure counts, for reports."""
        return {
            "requests": self.requests_sent,
            "reuse_retries": self.reuse_retries,
            "rate_limited": self.rate_limited,
            "retried_429": self.retried_429,
            "counter_failures": self.counter_failures,
            "client_stall_withheld": self.withheld,
        }


def _read_capped(resp: httpx.Response, cap: int) -> tuple[bytes, int]:
    """The body, or (nothing, its size so far) once it passes ``cap`` bytes (0: within)."""
    parts: list[bytes] = []
    size = 0
    for chunk in resp.iter_bytes():
        size += len(chunk)
        if size > cap:
            return b"", size
        parts.append(chunk)
    return b"".join(parts), 0
