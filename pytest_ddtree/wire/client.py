"""The HTTP client: one pooled httpx client, SSE streaming, precise timings.

``DDTreeClient.chat`` and ``DDTreeClient.complete`` never raise for what the
server did wrong (HTTP errors, broken streams, timeouts): those end up in the
returned ``Completion`` (``error``, ``stream``) so the invariants can name
them. They raise only for misuse (bad arguments).
"""

from __future__ import annotations

import codecs
import email.utils
import json
import math
import re
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

import httpx

from pytest_ddtree.settings import DEFAULT_MAX_RESPONSE_BYTES, Timeout
from pytest_ddtree.wire import _net, dialects
from pytest_ddtree.wire.completion import (
    MAX_CHARS_PER_TOKEN,
    Api,
    Completion,
    RequestSpec,
    StreamInfo,
    Timings,
    Usage,
)

Messages = str | Sequence[Mapping[str, Any]]


class Counter(Protocol):
    """What the client needs from a token counter (see ``tokens.TokenCounter``)."""

    source: str
    exact: bool

    def count(self, text: str) -> int:
        """Number of tokens in ``text`` (no special tokens added)."""
        ...


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
            self._client.note_counter_failure(f"{type(exc).__name__}: {_one_line(str(exc), 160)}")
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
    """Client for one OpenAI-compatible speculative-decoding endpoint.

    ``budget_mode`` decides how ``tree_budget`` reaches the server: ``field``
    puts it in the JSON body at ``budget_field`` (dotted paths nest),
    ``endpoints`` sends the request to ``budget_endpoints[tree_budget]``,
    ``none`` does not send it.

    After ``stall_limit`` consecutive requests that timed out, later requests
    are not sent: they come back at once with an ``error`` naming the stalls,
    so a hanging endpoint fails a session in seconds instead of one timeout
    per test.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        budget_mode: str = "field",
        budget_field: str = "tree_budget",
        budget_endpoints: Mapping[int, str] | None = None,
        dialect: str = "auto",
        stats_map: Mapping[str, str] | None = None,
        timeout: Timeout | None = None,
        counter: Counter | None = None,
        max_tokens: int = 128,
        enable_thinking: bool = False,
        api: Api = "chat",
        transport: httpx.BaseTransport | None = None,
        stall_limit: int = 2,
        count_chunks: bool = False,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        retry_429: int = 0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.budget_mode = budget_mode
        self.budget_field = budget_field
        self.budget_endpoints = {int(k): v.rstrip("/") for k, v in (budget_endpoints or {}).items()}
        self.dialect = dialect
        self.detected_dialect: str | None = None if dialect == "auto" else dialect
        self.stats_map = dict(stats_map or {})
        self.timeout = timeout or Timeout()
        self.counter = counter
        self.max_tokens = max_tokens
        self.enable_thinking = enable_thinking
        self.api: Api = api
        self.stall_limit = stall_limit
        self.count_chunks = count_chunks
        self.max_response_bytes = max_response_bytes
        self.retry_429 = retry_429
        self._stalls: list[str] = []
        self.requests_sent = 0
        self.stats_seen = 0
        # counted, shown in the summary and the report, never hidden
        self.reuse_retries = 0
        self.rate_limited = 0
        self.retried_429 = 0
        self.counter_failures = 0
        self.counter_error: str | None = None
        headers = {"Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._headers = headers
        self._timeouts = httpx.Timeout(
            connect=self.timeout.connect,
            read=min(self.timeout.read, self.timeout.total),
            write=self.timeout.connect,
            pool=self.timeout.total,
        )
        limits = httpx.Limits(
            max_connections=64, max_keepalive_connections=32, keepalive_expiry=_net.KEEPALIVE_EXPIRY
        )
        self._own_transport = transport is None
        self._transport = transport
        if transport is None:
            transport, self.socket_deadlines = _net.make_transport(limits)
        else:
            self.socket_deadlines = False
        self._http = httpx.Client(headers=headers, timeout=self._timeouts, transport=transport)

    # ------------------------------------------------------------------ admin

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> DDTreeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        # a start-up probe must not take a whole request deadline
        limit = min(self.timeout.total, self.timeout.connect + self.timeout.read)
        with _net.scope(limit) as sc:
            try:
                with self._http.stream("GET", url) as resp:
                    content, over = _read_capped(resp, self.max_response_bytes, sc)
            except httpx.TimeoutException:
                if sc.deadline_hit:
                    raise EndpointError(
                        f"{url}: no complete answer within {limit:g}s (the bytes came too "
                        "slowly or not at all); is the server healthy? (raise --ddtree-timeout "
                        "if it is slow to answer)"
                    ) from None
                raise EndpointError(
                    f"{url}: timed out after {self.timeout.connect:g}s; is the server up? "
                    "(raise --ddtree-timeout if it is slow to answer)"
                ) from None
            except httpx.TransportError as exc:
                raise EndpointError(
                    f"{url}: cannot connect ({type(exc).__name__}: {_one_line(str(exc))}); "
                    f"check {option} and that the server is running"
                ) from None
        if over:
            raise EndpointError(
                f"{url}: the model list is larger than --ddtree-max-response-bytes "
                f"{self.max_response_bytes:,}; is this an OpenAI-compatible base URL?"
            )
        if resp.status_code in (401, 403):
            raise EndpointError(
                f"{url}: HTTP {resp.status_code} unauthorized; give a valid key with "
                "--ddtree-api-key or DDTREE_API_KEY / OPENAI_API_KEY"
            )
        if resp.status_code >= 400:
            raise EndpointError(
                f"{url}: HTTP {resp.status_code}; "
                "is this an OpenAI-compatible base URL ending in /v1?"
            )
        try:
            data = json.loads(content)["data"]
            ids = [str(m["id"]) for m in data]
        except (ValueError, KeyError, TypeError, RecursionError):
            raise EndpointError(
                f"{url}: the answer is not an OpenAI model list; is this the /v1 base URL?"
            ) from None
        return ids

    # ---------------------------------------------------------------- requests

    def chat(
        self,
        messages: Messages,
        *,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        tree_budget: int | None = None,
        stream: bool = True,
        prompt_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> Completion:
        """One chat completion; ``messages`` may be a plain user prompt string."""
        if isinstance(messages, str):
            msgs: list[Mapping[str, Any]] = [{"role": "user", "content": messages}]
        else:
            msgs = list(messages)
        body: dict[str, Any] = {"messages": msgs}
        if "chat_template_kwargs" not in extra:
            body["chat_template_kwargs"] = {"enable_thinking": self.enable_thinking}
        return self._request(
            "chat", body, max_tokens, temperature, tree_budget, stream, prompt_id, headers, extra
        )

    def complete(
        self,
        prompt: str,
        *,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        tree_budget: int | None = None,
        stream: bool = True,
        prompt_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        **extra: Any,
    ) -> Completion:
        """One raw text completion (``/completions``)."""
        body: dict[str, Any] = {"prompt": prompt}
        return self._request(
            "completions",
            body,
            max_tokens,
            temperature,
            tree_budget,
            stream,
            prompt_id,
            headers,
            extra,
        )

    def request(
        self,
        prompt: Messages,
        *,
        api: Api | None = None,
        **kwargs: Any,
    ) -> Completion:
        """``chat`` or ``complete`` according to ``api`` (default: the configured API)."""
        if (api or self.api) == "completions":
            if not isinstance(prompt, str):
                raise TypeError("the completions API takes a prompt string, not messages")
            return self.complete(prompt, **kwargs)
        return self.chat(prompt, **kwargs)

    def replay(self, spec: RequestSpec) -> Completion:
        """Send the request ``spec`` describes to this client's endpoint, without its budget.

        Used to re-run a failing request on a target-only baseline: same body,
        headers, streaming mode and prompt id; the budget field is removed.
        """
        body = dialects.drop_path(dict(spec.body), self.budget_field)
        if self.model:
            body["model"] = self.model
        path = "/chat/completions" if spec.api == "chat" else "/completions"
        new = RequestSpec(
            api=spec.api,
            url=self.base_url + path,
            body=body,
            tree_budget=None,
            stream=spec.stream,
            max_tokens=spec.max_tokens,
            temperature=spec.temperature,
            prompt_id=spec.prompt_id,
            headers=dict(spec.headers),
        )
        return self._send(new)

    def _request(
        self,
        api: Api,
        body: dict[str, Any],
        max_tokens: int | None,
        temperature: float,
        tree_budget: int | None,
        stream: bool,
        prompt_id: str | None,
        headers: Mapping[str, str] | None,
        extra: Mapping[str, Any],
    ) -> Completion:
        mt = self.max_tokens if max_tokens is None else max_tokens
        if isinstance(mt, bool) or not isinstance(mt, int) or mt < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        if self.model:
            body["model"] = self.model
        body["max_tokens"] = mt
        body["temperature"] = temperature
        body["stream"] = stream
        if stream:
            body["stream_options"] = {"include_usage": True}
        body.update(extra)
        base = self.base_url
        if tree_budget is not None:
            if self.budget_mode == "field":
                body = dialects.put_budget(body, self.budget_field, tree_budget)
            elif self.budget_mode == "endpoints":
                if tree_budget not in self.budget_endpoints:
                    raise ValueError(
                        f"no endpoint for tree_budget {tree_budget}; known: "
                        f"{sorted(self.budget_endpoints)}"
                    )
                base = self.budget_endpoints[tree_budget]
        path = "/chat/completions" if api == "chat" else "/completions"
        spec = RequestSpec(
            api=api,
            url=base + path,
            body=body,
            tree_budget=tree_budget,
            stream=stream,
            max_tokens=mt,
            temperature=temperature,
            prompt_id=prompt_id,
            headers=dict(headers or {}),
        )
        return self._send(spec)

    def _send(self, spec: RequestSpec) -> Completion:
        if self.stall_limit and len(self._stalls) >= self.stall_limit:
            return _failed(
                spec,
                f"not sent: the endpoint stalled on {len(self._stalls)} requests in a row "
                f"({self._stalls[-1]}); later requests fail at once",
                "not-sent",
            )
        try:
            completion = self._attempts(spec)
        except Exception as exc:  # RecursionError, MemoryError in a parser, a bug: named
            completion = _failed(
                spec,
                f"client error while handling the response: {type(exc).__name__}: "
                f"{_one_line(str(exc))}",
                "client",
            )
        self.requests_sent += 1
        if completion.stats is not None:
            self.stats_seen += 1
        err = completion.error or ""
        if err.startswith(("read timeout", "deadline", "connect timeout", "pool timeout")):
            self._stalls.append(err)
        elif completion.status_code:
            self._stalls.clear()
        return completion

    def _attempts(self, spec: RequestSpec) -> Completion:
        """One request, sent again only where that is safe and always recorded.

        A reused keep-alive connection the server closed before sending any byte of
        the response is retried once on a fresh connection (the request never
        reached the model); HTTP 429 is retried up to ``retry_429`` times after
        its ``Retry-After`` when asked for.
        """
        retries: list[str] = []
        rate_limited = 0
        while True:
            completion, sc, retry_after = self._once(spec, self._http)
            if (
                completion.error_kind == "transport"
                and sc is not None
                and sc.connects == 0
                and sc.bytes_in == 0
                and not sc.deadline_hit
            ):
                self.reuse_retries += 1
                retries.append(
                    "a reused keep-alive connection was closed before any byte of the response "
                    f"({completion.error}); sent again once on a fresh connection"
                )
                with self._fresh_client() as fresh:
                    completion, sc, retry_after = self._once(spec, fresh)
            if completion.status_code != 429:
                break
            rate_limited += 1
            self.rate_limited += 1
            if rate_limited > self.retry_429:
                break
            wait = _retry_after(retry_after)
            self.retried_429 += 1
            retries.append(f"HTTP 429: waited {wait:g}s (Retry-After) and sent again")
            time.sleep(wait)
        if retries:
            completion = replace(completion, retries=tuple(retries))
        return completion

    def _once(
        self, spec: RequestSpec, http: httpx.Client
    ) -> tuple[Completion, _net.Scope, str | None]:
        return self._stream(spec, http) if spec.stream else self._plain(spec, http)

    def _fresh_client(self) -> httpx.Client:
        """A one-request client with its own pool: its connection is certainly new."""
        transport: httpx.BaseTransport | None = None
        if self._own_transport:
            transport, _ = _net.make_transport(httpx.Limits(max_connections=1))
        else:
            transport = self._transport
        return httpx.Client(headers=self._headers, timeout=self._timeouts, transport=transport)

    def note_counter_failure(self, error: str) -> None:
        """Count one failure of the token counter (named once in the summary)."""
        self.counter_failures += 1
        if self.counter_error is None:
            self.counter_error = error

    def watch_counter(self, counter: Any) -> Any:
        """``counter`` with every call bounded by the request deadline and every failure
        counted here, whoever calls it (the client or the checks); None stays None."""
        if counter is None or isinstance(counter, WatchedCounter):
            return counter
        return WatchedCounter(counter, self)

    def transport_notes(self) -> list[str]:
        """One line per kind of retry, rate limit or counter failure seen (empty when none)."""
        notes: list[str] = []
        if self.reuse_retries:
            notes.append(
                f"{self.reuse_retries} request(s) sent again on a fresh connection after a "
                "reused keep-alive connection closed before any response byte"
            )
        if self.rate_limited:
            notes.append(
                f"{self.rate_limited} HTTP 429 (rate-limited) answer(s); {self.retried_429} "
                f"retried after Retry-After (--ddtree-retry-429={self.retry_429})"
            )
        if self.counter_failures:
            notes.append(
                f"the token counter failed {self.counter_failures} time(s) (first: "
                f"{self.counter_error}); the usage and length checks that needed those counts "
                "did not run"
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
        }

    # ------------------------------------------------------------ non-stream

    def _plain(
        self, spec: RequestSpec, http: httpx.Client
    ) -> tuple[Completion, _net.Scope, str | None]:
        sent = time.perf_counter()
        headers_at: float | None = None
        status = 0
        raw: Any = None
        error: str | None = None
        kind: str | None = None
        bad_utf8: str | None = None
        retry_after: str | None = None
        with _net.scope(self.timeout.total) as sc:
            try:
                with http.stream("POST", spec.url, json=spec.body, headers=spec.headers) as resp:
                    headers_at = time.perf_counter()
                    status = resp.status_code
                    retry_after = resp.headers.get("retry-after") if status == 429 else None
                    content, over = _read_capped(resp, self.max_response_bytes, sc)
                done = time.perf_counter()
                if over:
                    error, kind = self._too_large(over), "too-large"
                elif done - sent > self.timeout.total:
                    error = (
                        f"deadline: request took {done - sent:.1f}s > total {self.timeout.total:g}s"
                    )
                    kind = "deadline"
                else:
                    text, bad_utf8 = _decode(content, "the response body")
                    raw, problem = _parse_json(text)
                    if status >= 400:
                        error, kind = _http_error(status, raw, content), "http"
                    elif problem is not None:
                        error, kind = problem, "protocol"
            except httpx.HTTPError as exc:
                done = time.perf_counter()
                error, kind = _transport_failure(exc, self.timeout, sc)
        text, reasoning, finish = _plain_choice(raw, spec.api)
        objects = [raw] if isinstance(raw, Mapping) else []
        c = self._finish(
            spec,
            status,
            text,
            reasoning,
            finish,
            objects,
            raw,
            Timings(sent=sent, headers=headers_at, first_content=None, done=done),
            None,
            error,
            [],
        )
        return replace(c, error_kind=kind, encoding_error=bad_utf8), sc, retry_after

    # ---------------------------------------------------------------- stream

    def _stream(
        self, spec: RequestSpec, http: httpx.Client
    ) -> tuple[Completion, _net.Scope, str | None]:
        sent = time.perf_counter()
        headers_at: float | None = None
        status = 0
        error: str | None = None
        kind: str | None = None
        content_type: str | None = None
        retry_after: str | None = None
        reader = _StreamReader(spec.api)
        headers = {**spec.headers, "Accept": "text/event-stream"}
        with _net.scope(self.timeout.total) as sc:
            deadline = sent + self.timeout.total
            try:
                with http.stream("POST", spec.url, json=spec.body, headers=headers) as resp:
                    headers_at = time.perf_counter()
                    status = resp.status_code
                    retry_after = resp.headers.get("retry-after") if status == 429 else None
                    content_type = resp.headers.get("content-type", "")
                    if status >= 400:
                        content, _ = _read_capped(resp, self.max_response_bytes, sc)
                        payload, _ = _parse_json(_decode(content, "the error body")[0])
                        error, kind = _http_error(status, payload, content), "http"
                    elif "text/event-stream" not in content_type.partition(";")[0].lower():
                        _read_capped(resp, self.max_response_bytes, sc)
                        error = (
                            "the server answered a streamed request with Content-Type "
                            f"{content_type or 'none'!r}, not text/event-stream"
                        )
                        kind = "protocol"
                    else:
                        for chunk in resp.iter_bytes():
                            reader.feed(chunk)
                            if reader.received > self.max_response_bytes:
                                error = self._too_large(reader.received)
                                kind = "too-large"
                                break
                            now = time.perf_counter()
                            if now > deadline:
                                error = (
                                    f"deadline: stream still running after {now - sent:.1f}s "
                                    f"> total {self.timeout.total:g}s"
                                )
                                kind = "deadline"
                                break
                        else:
                            reader.close()
            except httpx.HTTPError as exc:
                error, kind = _transport_failure(exc, self.timeout, sc)
        done = time.perf_counter()
        info = reader.info(content_type)
        timings = Timings(
            sent=sent,
            headers=headers_at,
            first_content=reader.first,
            done=done,
            chunk_times=tuple(reader.stamps),
        )
        c = self._finish(
            spec,
            status,
            "".join(reader.text_parts),
            "".join(reader.reasoning_parts),
            reader.finish,
            reader.kept(),
            reader.kept(),
            timings,
            info,
            error,
            reader.pieces,
        )
        return replace(c, error_kind=kind, encoding_error=reader.bad_utf8), sc, retry_after

    def _too_large(self, size: int) -> str:
        return (
            f"response too large: more than {size:,} bytes > --ddtree-max-response-bytes "
            f"{self.max_response_bytes:,}; the rest was not read"
        )

    # ---------------------------------------------------------------- common

    def _finish(
        self,
        spec: RequestSpec,
        status: int,
        text: str,
        reasoning: str,
        finish: str | None,
        objects: Sequence[Any],
        raw: Any,
        timings: Timings,
        stream: StreamInfo | None,
        error: str | None,
        pieces: Sequence[str],
    ) -> Completion:
        if self.detected_dialect is None and objects and error is None:
            found = dialects.detect(objects)
            if found != "none":
                self.detected_dialect = found
        dialect = self.detected_dialect or "none"
        stats = dialects.extract_stats(dialect, objects, self.stats_map)
        usage: Usage | None = dialects.extract_usage(objects)
        local: int | None = None
        source = "none"
        has_usage = usage is not None and usage.completion_tokens is not None
        count_error: str | None = None
        # far past any tokenizer's reach for max_tokens: an overrun counting cannot change,
        # and not worth sending megabytes to a /tokenize
        countable = len(text) + len(reasoning) <= spec.max_tokens * MAX_CHARS_PER_TOKEN
        if self.counter is not None and countable:
            try:
                with _net.scope(self.timeout.total):
                    # the server's usage is checked against a local count by the invariants,
                    # with the same (caching) counter; counting here too would only slow it
                    if not has_usage:
                        local = self.counter.count(text) + (
                            self.counter.count(reasoning) if reasoning else 0
                        )
                    if pieces:
                        remote = getattr(self.counter, "remote", False)
                        every = self.count_chunks and not remote
                        timings = Timings(
                            sent=timings.sent,
                            headers=timings.headers,
                            first_content=timings.first_content,
                            done=timings.done,
                            chunk_times=timings.chunk_times,
                            chunk_tokens=tuple(max(1, self.counter.count(p)) for p in pieces)
                            if every
                            else (),
                            first_chunk_tokens=max(1, self.counter.count(pieces[0])),
                        )
            except Exception as exc:  # a failing /tokenize is the counter's problem, named
                local = None
                count_error = f"{type(exc).__name__}: {_one_line(str(exc), 160)}"
                if not isinstance(self.counter, WatchedCounter):  # it counted already
                    self.note_counter_failure(count_error)
        local_source = self.counter.source if self.counter is not None else "none"
        if usage is not None and usage.completion_tokens is not None:
            source = "usage"
        elif local is not None:
            source = local_source
        model = raw.get("model") if isinstance(raw, Mapping) else None
        rid = raw.get("id") if isinstance(raw, Mapping) else None
        if isinstance(raw, list) and raw and isinstance(raw[0], Mapping):
            model = raw[0].get("model")
            rid = raw[0].get("id")
        return Completion(
            request=spec,
            status_code=status,
            text=text,
            reasoning_text=reasoning,
            finish_reason=finish,
            usage=usage,
            stats=stats,
            timings=timings,
            raw=raw,
            stream=stream,
            error=error,
            local_completion_tokens=local,
            token_count_source=source,
            local_count_source=local_source if local is not None else "none",
            chunk_texts=tuple(pieces),
            model=model if isinstance(model, str) else None,
            response_id=rid if isinstance(rid, str) else None,
            count_error=count_error,
        )


def _first_choice(obj: Any) -> Mapping[str, Any] | None:
    if not isinstance(obj, Mapping):
        return None
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        return choices[0]
    return None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _plain_choice(raw: Any, api: Api) -> tuple[str, str, str | None]:
    choice = _first_choice(raw)
    if choice is None:
        return "", "", None
    fin = choice.get("finish_reason")
    if api == "completions":
        return _str(choice.get("text")), "", fin if isinstance(fin, str) else None
    msg = choice.get("message")
    if not isinstance(msg, Mapping):
        return "", "", fin if isinstance(fin, str) else None
    reasoning = _str(msg.get("reasoning_content")) or _str(msg.get("reasoning"))
    return _str(msg.get("content")), reasoning, fin if isinstance(fin, str) else None


def _chunk_choice(obj: Mapping[str, Any], api: Api) -> tuple[str, str, str | None]:
    # hot path (once per stream event): plain dict checks, no ABC isinstance
    choices = obj.get("choices")
    if type(choices) is not list or not choices or type(choices[0]) is not dict:
        return "", "", None
    choice = choices[0]
    fin = choice.get("finish_reason")
    fin_s = fin if isinstance(fin, str) else None
    if api == "completions":
        return _str(choice.get("text")), "", fin_s
    delta = choice.get("delta")
    if type(delta) is not dict:
        return "", "", fin_s
    content = delta.get("content")
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    return (
        content if type(content) is str else "",
        reasoning if type(reasoning) is str else "",
        fin_s,
    )


def _http_error(status: int, payload: Any, content: bytes) -> str:
    message = ""
    if isinstance(payload, Mapping):
        err = payload.get("error")
        if isinstance(err, Mapping):
            message = str(err.get("message", ""))
        elif isinstance(err, str):
            message = err
    if not message:
        message = content[:200].decode("utf-8", "replace")
    return f"HTTP {status}: {message}".strip()


def _transport_error(exc: httpx.HTTPError, timeout: Timeout, sc: _net.Scope | None = None) -> str:
    """A one-line message for a transport exception (see ``_transport_failure``)."""
    return _transport_failure(exc, timeout, sc)[0]


def _transport_failure(
    exc: httpx.HTTPError, timeout: Timeout, sc: _net.Scope | None = None
) -> tuple[str, str]:
    """A one-line message and the ``Completion.error_kind`` of a transport exception."""
    if isinstance(exc, httpx.TimeoutException) and (
        (sc is not None and sc.deadline_hit)
        or (isinstance(exc, httpx.ReadTimeout) and timeout.total <= timeout.read)
    ):
        got = "" if sc is None or not sc.bytes_in else f" ({sc.bytes_in:,} bytes received)"
        return (
            f"deadline: no complete response within the total deadline of {timeout.total:g}s{got}",
            "deadline",
        )
    if isinstance(exc, httpx.ReadTimeout):
        return f"read timeout: no data for {timeout.read:g}s", "read-timeout"
    if isinstance(exc, httpx.ConnectTimeout):
        return f"connect timeout after {timeout.connect:g}s", "transport"
    if isinstance(exc, httpx.PoolTimeout):
        return "pool timeout: too many concurrent requests for the connection pool", "transport"
    before = sc is not None and sc.bytes_in == 0
    if isinstance(exc, httpx.RemoteProtocolError):
        if before:
            return f"connection closed before any byte of the response: {exc}", "transport"
        return f"connection broken mid-response: {exc}", "broken"
    kind = "transport" if before or isinstance(exc, httpx.ConnectError) else "broken"
    return f"{type(exc).__name__}: {_one_line(str(exc)) or 'no detail'}", kind


# ------------------------------------------------------------ pure helpers
# (module level, usable without the sync client, e.g. by an async runner)

# Stream chunk objects kept whole: the first few hundred (every normal answer), then the
# first, the last few and every chunk carrying statistics or usage, so a stream of any
# length holds a bounded number of objects and the dialects still find what they read.
KEEP_ALL_CHUNKS = 512
KEEP_LAST_CHUNKS = 8
KEEP_STATS_CHUNKS = 64
STATS_KEYS = ("usage", "timings", "ddtree_stats", "metrics", "meta_info", "error")

_NEWLINES = re.compile(r"\r\n|\r|\n")


class _StreamReader:
    """Incremental SSE reader over raw bytes: bounded state, strict UTF-8 with offsets.

    Lines are split on CR, LF and CRLF only (the SSE rule); the bytes are decoded
    as UTF-8 and the first invalid byte is recorded with its offset (then
    replaced, so the rest of the stream is still read).
    """

    def __init__(self, api: Api) -> None:
        self.api: Api = api
        self.received = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.bad_utf8: str | None = None
        self._partial: list[str] = []
        self._cr = False
        self._data: list[str] = []
        self.events = 0
        self.done_seen = False
        self.finish: str | None = None
        self.finish_chunks = 0
        self.usage_seen = False
        self.first: float | None = None
        self.stamps: list[float] = []
        self.pieces: list[str] = []
        self.text_parts: list[str] = []
        self.reasoning_parts: list[str] = []
        self.parse_errors: list[str] = []
        self.error_events: list[Mapping[str, Any]] = []
        self._chunks: list[tuple[int, dict[str, Any]]] = []
        self._last: deque[tuple[int, dict[str, Any]]] = deque(maxlen=KEEP_LAST_CHUNKS)
        self._stats: deque[tuple[int, dict[str, Any]]] = deque(maxlen=KEEP_STATS_CHUNKS)
        self._seen_chunks = 0
        self._bad = 0

    # -- bytes -> lines

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the body."""
        self._text(self._decode(chunk, False))
        self.received += len(chunk)

    def _decode(self, chunk: bytes, final: bool) -> str:
        try:
            return self._decoder.decode(chunk, final)
        except UnicodeDecodeError as exc:
            pending = len(exc.object) - len(chunk)
            offset = self.received - pending + exc.start
            self.bad_utf8 = (
                f"invalid UTF-8 at byte {offset} of the stream: "
                f"{bytes(exc.object[exc.start : exc.end])!r}"
            )
            self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
            return self._decoder.decode(bytes(exc.object), final)

    def close(self) -> None:
        """The body ended: flush what is left."""
        self._text(self._decode(b"", True))
        if self._cr:
            self._cr = False
            self._line("".join(self._partial))
            self._partial = []
        elif self._partial:
            self._line("".join(self._partial))
            self._partial = []
        self._line("")

    def _text(self, text: str) -> None:
        if not text:
            return
        if self._cr:
            text = "\r" + text
            self._cr = False
        if text.endswith("\r"):
            self._cr = True
            text = text[:-1]
            if not text:
                return
        has_cr = "\r" in text
        if not has_cr and "\n" not in text:
            self._partial.append(text)
            return
        lines = _NEWLINES.split(text) if has_cr else text.split("\n")
        rest = lines.pop()
        if self._partial:
            lines[0] = "".join(self._partial) + lines[0]
            self._partial = []
        if rest:
            self._partial.append(rest)
        line_of = self._line
        for line in lines:
            line_of(line)

    # -- lines -> events

    def _line(self, line: str) -> None:
        if line[:6] == "data: ":  # the common case first
            self._data.append(line[6:])
            return
        if not line:
            if self._data:
                data = "\n".join(self._data)
                self._data = []
                self._event(data)
            return
        if line[0] == ":":
            return
        name, _, value = line.partition(":")
        if name == "data":
            self._data.append(value[1:] if value[:1] == " " else value)

    def _event(self, data: str) -> None:
        now = time.perf_counter()
        self.events += 1
        if self.done_seen:
            if len(self.parse_errors) < 16:
                self.parse_errors.append(f"event after [DONE]: {data[:120]!r}")
            return
        if data.strip() == "[DONE]":
            self.done_seen = True
            return
        try:
            obj = json.loads(data)
        except RecursionError:
            self._parse_error(f"nested too deep to parse: {data[:120]}")
            return
        except ValueError:
            self._parse_error(data[:200])
            return
        if not isinstance(obj, dict):
            self._parse_error(data[:200])
            return
        self._keep(obj)
        if "error" in obj:
            err = obj["error"]
            if len(self.error_events) < 16:
                self.error_events.append(err if isinstance(err, dict) else {"error": err})
        if type(obj.get("usage")) is dict:
            self.usage_seen = True
        piece, rpiece, fin = _chunk_choice(obj, self.api)
        if piece or rpiece:
            if self.first is None:
                self.first = now
            self.stamps.append(now)
            self.pieces.append(piece + rpiece)
            if piece:
                self.text_parts.append(piece)
            if rpiece:
                self.reasoning_parts.append(rpiece)
        if fin is not None:
            self.finish_chunks += 1
            self.finish = fin

    def _parse_error(self, what: str) -> None:
        # the count matters, not a thousand copies of the same garbage
        self._bad += 1
        if len(self.parse_errors) < 16:
            self.parse_errors.append(what)

    def _keep(self, obj: dict[str, Any]) -> None:
        index = self._seen_chunks
        self._seen_chunks += 1
        if index < KEEP_ALL_CHUNKS:
            self._chunks.append((index, obj))
            return
        self._last.append((index, obj))
        if any(k in obj for k in STATS_KEYS):
            self._stats.append((index, obj))

    def kept(self) -> list[dict[str, Any]]:
        """The chunk objects kept, in stream order."""
        if self._seen_chunks <= KEEP_ALL_CHUNKS:
            return [obj for _, obj in self._chunks]
        merged = {i: obj for i, obj in (*self._chunks, *self._stats, *self._last)}
        return [merged[i] for i in sorted(merged)]

    def info(self, content_type: str | None) -> StreamInfo:
        """What the stream looked like."""
        bad = self._bad
        errors = list(self.parse_errors)
        if bad > 16:
            errors.append(f"... {bad - 16} more unparseable events")
        kept = len(self.kept())
        return StreamInfo(
            events=self.events,
            done_seen=self.done_seen,
            finish_chunks=self.finish_chunks,
            parse_errors=tuple(errors),
            error_events=tuple(self.error_events),
            usage_seen=self.usage_seen,
            content_type=content_type,
            chunks_dropped=self._seen_chunks - kept,
        )


def _read_capped(resp: httpx.Response, cap: int, sc: _net.Scope | None = None) -> tuple[bytes, int]:
    """The body, or (what was read, its size) once it passes ``cap`` bytes (0: within)."""
    parts: list[bytes] = []
    size = 0
    for chunk in resp.iter_bytes():
        size += len(chunk)
        if size > cap:
            return b"", size
        parts.append(chunk)
    return b"".join(parts), 0


def _decode(content: bytes, where: str) -> tuple[str, str | None]:
    """``content`` as text, and where it is not valid UTF-8 (byte offset), if anywhere."""
    try:
        return content.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        bad = content[exc.start : exc.end]
        return (
            content.decode("utf-8", "replace"),
            f"invalid UTF-8 at byte {exc.start} of {where}: {bad!r}",
        )


def _parse_json(text: str) -> tuple[Any, str | None]:
    """Parsed JSON, or None and why not."""
    try:
        return json.loads(text), None
    except RecursionError:
        return None, "response JSON nested too deep to parse"
    except ValueError:
        return None, f"response is not JSON: {text[:200]!r}"


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _failed(spec: RequestSpec, error: str, kind: str) -> Completion:
    """A completion for a request that produced nothing usable."""
    now = time.perf_counter()
    return Completion(
        request=spec,
        status_code=0,
        text="",
        reasoning_text="",
        finish_reason=None,
        usage=None,
        stats=None,
        timings=Timings(sent=now, headers=None, first_content=None, done=now),
        raw=None,
        error=error,
        error_kind=kind,
    )


RETRY_AFTER_MAX = 60.0


def _retry_after(value: str | None) -> float:
    """Seconds to wait from a ``Retry-After`` header (seconds or HTTP date), 1 s to 60 s."""
    if not value:
        return 1.0
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return 1.0
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return 1.0
    return min(max(seconds, 0.0), RETRY_AFTER_MAX)
