"""The HTTP client: one pooled httpx client, SSE streaming, precise timings.

``DDTreeClient.chat`` and ``DDTreeClient.complete`` never raise for what the
server did wrong (HTTP errors, broken streams, timeouts): those end up in the
returned ``Completion`` (``error``, ``stream``) so the invariants can name
them. They raise only for misuse (bad arguments).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import httpx
from httpx_sse import EventSource

from pytest_ddtree import dialects
from pytest_ddtree.completion import (
    Api,
    Completion,
    RequestSpec,
    StreamInfo,
    Timings,
    Usage,
)
from pytest_ddtree.settings import Timeout

Messages = str | Sequence[Mapping[str, Any]]


class Counter(Protocol):
    """What the client needs from a token counter (see ``tokens.TokenCounter``)."""

    source: str
    exact: bool

    def count(self, text: str) -> int:
        """Number of tokens in ``text`` (no special tokens added)."""
        ...


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
        self._stalls: list[str] = []
        self.requests_sent = 0
        self.stats_seen = 0
        headers = {"Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(
                connect=self.timeout.connect,
                read=min(self.timeout.read, self.timeout.total),
                write=self.timeout.connect,
                pool=self.timeout.total,
            ),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
            transport=transport,
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
        try:
            resp = self._http.get(url)
        except httpx.TimeoutException:
            raise EndpointError(
                f"{url}: timed out after {self.timeout.connect:g}s; is the server up? "
                "(raise --ddtree-timeout if it is slow to answer)"
            ) from None
        except httpx.TransportError as exc:
            raise EndpointError(
                f"{url}: cannot connect ({type(exc).__name__}: {exc}); "
                f"check {option} and that the server is running"
            ) from None
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
            data = resp.json()["data"]
            ids = [str(m["id"]) for m in data]
        except (ValueError, KeyError, TypeError):
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
                error=(
                    f"not sent: the endpoint stalled on {len(self._stalls)} requests in a row "
                    f"({self._stalls[-1]}); later requests fail at once"
                ),
            )
        completion = self._stream(spec) if spec.stream else self._plain(spec)
        self.requests_sent += 1
        if completion.stats is not None:
            self.stats_seen += 1
        err = completion.error or ""
        if err.startswith(("read timeout", "deadline", "connect timeout", "pool timeout")):
            self._stalls.append(err)
        elif completion.status_code:
            self._stalls.clear()
        return completion

    # ------------------------------------------------------------ non-stream

    def _plain(self, spec: RequestSpec) -> Completion:
        sent = time.perf_counter()
        headers_at: float | None = None
        status = 0
        raw: Any = None
        error: str | None = None
        try:
            with self._http.stream("POST", spec.url, json=spec.body, headers=spec.headers) as resp:
                headers_at = time.perf_counter()
                status = resp.status_code
                content = resp.read()
            done = time.perf_counter()
            if done - sent > self.timeout.total:
                error = f"deadline: request took {done - sent:.1f}s > total {self.timeout.total:g}s"
            try:
                raw = json.loads(content)
            except ValueError:
                raw = None
                if status < 400:
                    error = error or f"response is not JSON: {content[:200]!r}"
            if status >= 400:
                error = _http_error(status, raw, content)
        except httpx.HTTPError as exc:
            done = time.perf_counter()
            error = _transport_error(exc, self.timeout)
        text, reasoning, finish = _plain_choice(raw, spec.api)
        objects = [raw] if isinstance(raw, Mapping) else []
        return self._finish(
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

    # ---------------------------------------------------------------- stream

    def _stream(self, spec: RequestSpec) -> Completion:
        sent = time.perf_counter()
        headers_at: float | None = None
        first: float | None = None
        status = 0
        error: str | None = None
        chunks: list[Any] = []
        stamps: list[float] = []
        pieces: list[str] = []
        text_parts: list[str] = []
        reasoning_parts: list[str] = []
        finish: str | None = None
        finish_chunks = 0
        done_seen = False
        usage_seen = False
        events = 0
        parse_errors: list[str] = []
        error_events: list[Mapping[str, Any]] = []
        deadline = sent + self.timeout.total
        headers = {**spec.headers, "Accept": "text/event-stream"}
        try:
            with self._http.stream("POST", spec.url, json=spec.body, headers=headers) as resp:
                headers_at = time.perf_counter()
                status = resp.status_code
                if status >= 400:
                    content = resp.read()
                    try:
                        payload = json.loads(content)
                    except ValueError:
                        payload = None
                    error = _http_error(status, payload, content)
                else:
                    for sse in EventSource(resp).iter_sse():
                        now = time.perf_counter()
                        events += 1
                        data = sse.data
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
                            if first is None:
                                first = now
                            stamps.append(now)
                            pieces.append(piece + rpiece)
                            if piece:
                                text_parts.append(piece)
                            if rpiece:
                                reasoning_parts.append(rpiece)
                        if fin is not None:
                            finish_chunks += 1
                            finish = fin
                        if now > deadline:
                            error = (
                                f"deadline: stream still running after {now - sent:.1f}s "
                                f"> total {self.timeout.total:g}s"
                            )
                            break
        except httpx.HTTPError as exc:
            error = _transport_error(exc, self.timeout)
        done = time.perf_counter()
        info = StreamInfo(
            events=events,
            done_seen=done_seen,
            finish_chunks=finish_chunks,
            parse_errors=tuple(parse_errors),
            error_events=tuple(error_events),
            usage_seen=usage_seen,
        )
        timings = Timings(
            sent=sent, headers=headers_at, first_content=first, done=done, chunk_times=tuple(stamps)
        )
        return self._finish(
            spec,
            status,
            "".join(text_parts),
            "".join(reasoning_parts),
            finish,
            chunks,
            chunks,
            timings,
            info,
            error,
            pieces,
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
        if self.counter is not None:
            # the server's usage is checked against a local count by the invariants, with
            # the same (caching) counter; counting here too would only slow the request
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


def _transport_error(exc: httpx.HTTPError, timeout: Timeout) -> str:
    if isinstance(exc, httpx.ReadTimeout):
        if timeout.total <= timeout.read:
            return f"deadline: no data before the total deadline of {timeout.total:g}s"
        return f"read timeout: no data for {timeout.read:g}s"
    if isinstance(exc, httpx.ConnectTimeout):
        return f"connect timeout after {timeout.connect:g}s"
    if isinstance(exc, httpx.PoolTimeout):
        return "pool timeout: too many concurrent requests for the connection pool"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"connection broken mid-response: {exc}"
    return f"{type(exc).__name__}: {exc}"
