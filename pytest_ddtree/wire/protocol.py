"""The wire protocol without I/O: what both clients (sync and load) share.

Everything that does not touch a socket lives here, once: the endpoint's
configuration (``EndpointConfig``), request building, the incremental event
decoder over raw bytes (``StreamDecoder``: exact byte offsets of invalid
UTF-8, the byte cap counted in bytes), the assembly of a ``Completion`` from
what arrived (``Exchange`` + ``assemble``), the classification of every
failure into an ``ErrorKind``, the retry rules (``Attempts``) and the stall
guard (``StallGuard``). The sync ``DDTreeClient`` and the async load runner
are thin shells that move bytes and stamp times; they make no decision of
their own, so the same bytes give the same ``Completion`` on both paths.

No pytest here, and no socket: httpx appears only to classify its exceptions.
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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from pytest_ddtree.core import dialects as registry
from pytest_ddtree.core.settings import DEFAULT_MAX_RESPONSE_BYTES, Timeout
from pytest_ddtree.wire import dialects
from pytest_ddtree.wire.completion import (
    MAX_CHARS_PER_TOKEN,
    STALL_KINDS,
    Api,
    Completion,
    ErrorKind,
    RequestSpec,
    StreamInfo,
    Timings,
    TokenLogprob,
    Usage,
)
from pytest_ddtree.wire.health import StallLog

if TYPE_CHECKING:
    from pytest_ddtree.core.settings import Settings

__all__ = [
    "Attempts",
    "EndpointConfig",
    "ErrorKind",
    "Exchange",
    "Prompt",
    "StallGuard",
    "StreamDecoder",
    "assemble",
    "classify_transport",
    "failed",
]

Prompt = str | Sequence[Mapping[str, Any]]

EVENT_STREAM = "text/event-stream"

# Below the idle timeout of llama.cpp's server and of uvicorn (5 s, as is httpx's own
# default): the client drops an idle connection before the server can, so a reused
# connection is rarely one the server is closing at that very moment.
KEEPALIVE_EXPIRY = 2.0


# ------------------------------------------------------------------ config


@dataclass(frozen=True)
class EndpointConfig:
    """Where and how requests go, built once from ``Settings`` (no secret in ``repr``).

    ``budget_mode`` decides how ``tree_budget`` reaches the server: ``field``
    puts it in the JSON body at ``budget_field`` (dotted paths nest),
    ``endpoints`` sends the request to ``budget_endpoints[tree_budget]``,
    ``none`` does not send it. ``max_response_bytes`` caps every answer in
    bytes; ``retry_429`` is how many times an HTTP 429 is sent again after its
    ``Retry-After``; ``retry_stale`` sends a request again, once, on a fresh
    connection when a reused keep-alive connection closed before any byte.
    """

    base_url: str
    model: str | None = None
    api: Api = "chat"
    api_key: str | None = field(default=None, repr=False)
    budget_mode: str = "field"
    budget_field: str = "tree_budget"
    budget_endpoints: Mapping[int, str] = field(default_factory=dict)
    dialect: str = "auto"
    stats_map: Mapping[str, str] = field(default_factory=dict)
    timeout: Timeout = field(default_factory=Timeout)
    max_tokens: int = 128
    enable_thinking: bool = False
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    retry_429: int = 0
    retry_stale: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        ends = {int(k): str(v).rstrip("/") for k, v in (self.budget_endpoints or {}).items()}
        object.__setattr__(self, "budget_endpoints", ends)
        object.__setattr__(self, "stats_map", dict(self.stats_map or {}))

    @classmethod
    def from_settings(
        cls, settings: Settings, base_url: str, model: str | None = None
    ) -> EndpointConfig:
        """The configuration of ``base_url`` (the endpoint or its baseline) from ``settings``."""
        return cls(
            base_url,
            model=model,
            api=settings.api,
            api_key=settings.api_key,
            budget_mode=settings.budget_mode,
            budget_field=settings.budget_field,
            budget_endpoints=settings.budget_endpoints,
            dialect=settings.dialect,
            stats_map=settings.stats_map,
            timeout=settings.timeout,
            max_tokens=settings.max_tokens,
            enable_thinking=settings.enable_thinking,
            max_response_bytes=settings.max_response_bytes,
            retry_429=settings.retry_429,
        )

    def headers(self, accept: str = "application/json") -> dict[str, str]:
        """The session headers (the key, if any, goes here and nowhere else)."""
        out = {"Accept": accept}
        if self.api_key:
            out["Authorization"] = f"Bearer {self.api_key}"
        return out

    def httpx_timeout(self) -> httpx.Timeout:
        """httpx's per-operation timeouts (the total deadline is the shells' own)."""
        t = self.timeout
        return httpx.Timeout(
            connect=t.connect, read=min(t.read, t.total), write=t.connect, pool=t.total
        )

    def request(
        self,
        prompt: Prompt,
        *,
        api: Api | None = None,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        tree_budget: int | None = None,
        stream: bool = True,
        prompt_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
        dialect: str | None = None,
    ) -> RequestSpec:
        """The request for ``prompt`` (a string, or chat messages for the chat API).

        ``dialect`` (default: the configured one) is the statistics dialect the server
        speaks, once detected: SGLang reports statistics only when asked.
        """
        api = api or self.api
        mt = self.max_tokens if max_tokens is None else max_tokens
        if isinstance(mt, bool) or not isinstance(mt, int) or mt < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        extra = dict(extra or {})
        body: dict[str, Any]
        if api == "completions":
            if not isinstance(prompt, str):
                raise TypeError("the completions API takes a prompt string, not messages")
            body = {"prompt": prompt}
        else:
            msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
            body = {"messages": list(msgs)}
            if "chat_template_kwargs" not in extra:
                body["chat_template_kwargs"] = {"enable_thinking": self.enable_thinking}
        if self.model:
            body["model"] = self.model
        body.update(max_tokens=mt, temperature=temperature, stream=stream)
        if stream:
            body["stream_options"] = {"include_usage": True}
        body.update(dialects.request_fields(dialect or self.dialect))
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
        return RequestSpec(
            api=api,
            url=base + _path(api),
            body=body,
            tree_budget=tree_budget,
            stream=stream,
            max_tokens=mt,
            temperature=temperature,
            prompt_id=prompt_id,
            headers=dict(headers or {}),
        )

    def spec(
        self,
        prompt: Prompt,
        *,
        tree_budget: int | None,
        max_tokens: int,
        temperature: float = 0.0,
        prompt_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
        dialect: str | None = None,
    ) -> RequestSpec:
        """The streamed request for ``prompt`` at ``tree_budget`` (what the load runner sends)."""
        return self.request(
            prompt,
            tree_budget=tree_budget,
            max_tokens=max_tokens,
            temperature=temperature,
            prompt_id=prompt_id,
            extra=extra,
            dialect=dialect,
        )

    def replay(self, spec: RequestSpec) -> RequestSpec:
        """``spec`` for this endpoint, without its budget (a target-only baseline replay)."""
        body = dialects.drop_path(dict(spec.body), self.budget_field)
        # the baseline may be another engine: ask it for statistics only in its own dialect
        for key in registry.all_request_fields():
            body.pop(key, None)
        body.update(dialects.request_fields(self.dialect))
        if self.model:
            body["model"] = self.model
        return RequestSpec(
            api=spec.api,
            url=self.base_url + _path(spec.api),
            body=body,
            tree_budget=None,
            stream=spec.stream,
            max_tokens=spec.max_tokens,
            temperature=spec.temperature,
            prompt_id=spec.prompt_id,
            headers=dict(spec.headers),
        )

    # -- the messages of the client's own limits, one wording on both paths

    def too_large(self, size: int) -> str:
        """The error of an answer cut at the byte cap."""
        return (
            f"response too large: more than {size:,} bytes > --ddtree-max-response-bytes "
            f"{self.max_response_bytes:,}; the rest was not read"
        )

    def deadline(self, received: int = 0) -> str:
        """The error of an exchange that passed the total deadline."""
        got = f" ({received:,} bytes received)" if received else ""
        return (
            f"deadline: no complete response within the total deadline of "
            f"{self.timeout.total:g}s{got}"
        )


def _path(api: Api) -> str:
    return "/chat/completions" if api == "chat" else "/completions"


# ---------------------------------------------------------------- exchange


@dataclass
class Exchange:
    """What one attempt of a request did on the wire, filled in by a shell.

    ``sent``, ``headers_at`` and ``done`` are ``perf_counter`` stamps; ``body`` is
    a plain (or error) answer, at most the byte cap; ``error``/``kind`` are set by
    the shell only for what happened below HTTP (transport, deadline, size cap).
    """

    spec: RequestSpec
    sent: float = 0.0
    headers_at: float | None = None
    done: float = 0.0
    status: int = 0
    content_type: str | None = None
    retry_after: str | None = None
    body: bytes = b""
    received: int = 0
    error: str | None = None
    kind: ErrorKind | None = None

    def head(self, status: int, content_type: str | None, retry_after: str | None) -> str:
        """Record the response head; returns what to do with the body: ``stream``
        (decode events), ``body`` (keep, capped) or ``drain`` (read and drop)."""
        self.status = status
        self.content_type = content_type or ""
        self.retry_after = retry_after if status == 429 else None
        if status >= 400 or not self.spec.stream:
            return "body"
        return "stream" if self.event_stream else "drain"

    @property
    def event_stream(self) -> bool:
        """Whether the answer's Content-Type is an event stream."""
        return EVENT_STREAM in (self.content_type or "").partition(";")[0].lower()

    def fail(self, error: str, kind: ErrorKind) -> None:
        """Record the first failure (a later one does not replace it)."""
        if self.error is None:
            self.error, self.kind = error, kind

    @property
    def nothing_received(self) -> bool:
        """No byte of a response arrived (a stale keep-alive connection, if reused)."""
        return self.kind is ErrorKind.TRANSPORT and self.headers_at is None


def classify_transport(
    exc: Exception, timeout: Timeout, *, deadline_hit: bool = False, received: int = 0
) -> tuple[str, ErrorKind]:
    """A one-line message and the kind of a transport exception (by type, never text)."""
    if isinstance(exc, httpx.TimeoutException) and (
        deadline_hit or (isinstance(exc, httpx.ReadTimeout) and timeout.total <= timeout.read)
    ):
        got = f" ({received:,} bytes received)" if received else ""
        return (
            f"deadline: no complete response within the total deadline of {timeout.total:g}s{got}",
            ErrorKind.DEADLINE,
        )
    if isinstance(exc, httpx.ReadTimeout):
        return f"read timeout: no data for {timeout.read:g}s", ErrorKind.READ_TIMEOUT
    if isinstance(exc, httpx.ConnectTimeout):
        return f"connect timeout after {timeout.connect:g}s", ErrorKind.CONNECT_TIMEOUT
    if isinstance(exc, httpx.PoolTimeout):
        return (
            "pool timeout: too many concurrent requests for the connection pool",
            ErrorKind.CONNECT_TIMEOUT,
        )
    if isinstance(exc, httpx.TimeoutException):  # a write timeout
        return f"{type(exc).__name__}: {one_line(str(exc))}", ErrorKind.READ_TIMEOUT
    before = received == 0
    if isinstance(exc, httpx.RemoteProtocolError):
        if before:
            return f"connection closed before any byte of the response: {exc}", ErrorKind.TRANSPORT
        return f"connection broken mid-response: {exc}", ErrorKind.BROKEN
    kind = (
        ErrorKind.TRANSPORT if before or isinstance(exc, httpx.ConnectError) else ErrorKind.BROKEN
    )
    return f"{type(exc).__name__}: {one_line(str(exc)) or 'no detail'}", kind


# ------------------------------------------------------------ event decoder

# Stream chunk objects kept whole: the first few hundred (every normal answer), then the
# first, the last few and every chunk carrying statistics or usage, so a stream of any
# length holds a bounded number of objects and the dialects still find what they read.
KEEP_ALL_CHUNKS = 512
KEEP_LAST_CHUNKS = 8
KEEP_STATS_CHUNKS = 64
STATS_KEYS = ("usage", "timings", "ddtree_stats", "metrics", "meta_info", "sglext", "error")
MAX_NOTES = 16

_NEWLINES = re.compile(r"\r\n|\r|\n")
_json_decode = json.JSONDecoder().decode


class StreamDecoder:
    """Incremental Server-Sent Events decoder over raw bytes, with bounded state.

    ``feed(bytes, stamp)`` takes the body as it arrives (``stamp``: when those
    bytes arrived). Lines are split on CR, LF and CRLF (the SSE rule); the bytes
    are decoded as strict UTF-8 and the first invalid byte is recorded with its
    exact offset in the stream (then replaced, so the rest is still read).
    ``received`` counts bytes, which is what the byte cap is compared with.
    Each event's JSON goes to the chunk accumulator (``_event``).
    """

    def __init__(self, api: Api) -> None:
        self.api: Api = api
        self.received = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.bad_utf8: str | None = None
        self._partial: list[str] = []
        self._cr = False
        self._data: list[str] = []
        self._now = 0.0
        self.events = 0
        self.done_seen = False
        self.finish: str | None = None
        self.stop: str | int | None = None
        self.stop_field: str | None = None
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
        #: per-token log-probabilities, when the chunks carry them (None: none seen)
        self.logprobs: list[TokenLogprob] | None = None

    # -- bytes -> lines

    def feed(self, chunk: bytes, stamp: float | None = None) -> None:
        """Take the next bytes of the body, which arrived at ``stamp`` (default: now)."""
        self._now = time.perf_counter() if stamp is None else stamp
        self._text(self._decode(chunk, False))
        self.received += len(chunk)

    def feed_many(self, chunks: Sequence[bytes], stamps: Sequence[float]) -> None:
        """``feed`` each of ``chunks`` with its stamp (the same result, fewer calls: the
        load runner decodes a whole point's recorded bytes after it ran)."""
        decode = self._decoder.decode
        for i, chunk in enumerate(chunks):
            self._now = stamps[i]
            try:
                text = decode(chunk, False)
            except UnicodeDecodeError:
                # the decoder kept its state: the slow path decodes again, names the
                # byte and goes on replacing
                text = self._decode(chunk, False)
                decode = self._decoder.decode
            self._text(text)
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
        # the common read: whole ``data: ...`` events, LF-terminated, nothing pending
        if text[-2:] == "\n\n" and not (self._partial or self._data or self._cr):
            body = text[:-2]
            blocks = body.split("\n\n")
            # no other newline, so each block is one line; every one a ``data: `` line
            if (
                text.count("\n") == 2 * len(blocks)
                and "\r" not in text
                and ("\n\n" + body).count("\n\ndata: ") == len(blocks)
            ):
                event = self._event
                for block in blocks:
                    event(block[6:])
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

    # -- events -> the answer (the chunk accumulator)

    def _event(self, data: str) -> None:
        self.events += 1
        if self.done_seen:
            self._note(f"event after [DONE]: {data[:120]!r}")
            return
        if data[:1] != "{" and data.strip() == "[DONE]":
            self.done_seen = True
            return
        try:
            obj = _json_decode(data)
        except RecursionError:
            self._note(f"nested too deep to parse: {data[:120]}")
            return
        except ValueError:
            self._note(data[:200])
            return
        if not isinstance(obj, dict):
            self._note(data[:200])
            return
        if self._seen_chunks < KEEP_ALL_CHUNKS:  # inline: once per event
            self._chunks.append((self._seen_chunks, obj))
            self._seen_chunks += 1
        else:
            self._keep(obj)
        if "error" in obj:
            err = obj["error"]
            if len(self.error_events) < MAX_NOTES:
                self.error_events.append(err if isinstance(err, dict) else {"error": err})
        if type(obj.get("usage")) is dict:
            self.usage_seen = True
        piece, rpiece, fin = chunk_choice(obj, self.api)
        choices = obj.get("choices")
        if (
            type(choices) is list
            and choices
            and type(choices[0]) is dict
            and choices[0].get("logprobs") is not None
        ):
            found = dialects.logprobs_of(choices[0])
            if found is not None:
                if self.logprobs is None:
                    self.logprobs = found
                else:
                    self.logprobs.extend(found)
        if piece or rpiece:
            now = self._now
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
            # vLLM and SGLang name the stop on the chunk that carries the finish
            self.stop, self.stop_field = dialects.stop_of(obj["choices"][0])

    def _note(self, what: str) -> None:
        # the count matters, not a thousand copies of the same garbage
        self._bad += 1
        if len(self.parse_errors) < MAX_NOTES:
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
        errors = list(self.parse_errors)
        if self._bad > MAX_NOTES:
            errors.append(f"... {self._bad - MAX_NOTES} more unparseable events")
        return StreamInfo(
            events=self.events,
            done_seen=self.done_seen,
            finish_chunks=self.finish_chunks,
            parse_errors=tuple(errors),
            error_events=tuple(self.error_events),
            usage_seen=self.usage_seen,
            content_type=content_type,
            chunks_dropped=self._seen_chunks - len(self.kept()),
        )


# ------------------------------------------------------------ the answer


def chunk_choice(obj: Mapping[str, Any], api: Api) -> tuple[str, str, str | None]:
    """(content, reasoning, finish_reason) of one stream chunk (hot: plain dict checks)."""
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


def plain_choice(raw: Any, api: Api) -> tuple[str, str, str | None]:
    """(content, reasoning, finish_reason) of a plain (non-streamed) answer."""
    choice = _first_choice(raw)
    if choice is None:
        return "", "", None
    fin = choice.get("finish_reason")
    fin_s = fin if isinstance(fin, str) else None
    if api == "completions":
        return _str(choice.get("text")), "", fin_s
    msg = choice.get("message")
    if not isinstance(msg, Mapping):
        return "", "", fin_s
    reasoning = _str(msg.get("reasoning_content")) or _str(msg.get("reasoning"))
    return _str(msg.get("content")), reasoning, fin_s


def _first_choice(obj: Any) -> Mapping[str, Any] | None:
    if not isinstance(obj, Mapping):
        return None
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        return choices[0]
    return None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def http_error(status: int, payload: Any, content: bytes) -> str:
    """The one-line error of a non-2xx answer (the server's own message, if it gave one)."""
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


def decode_text(content: bytes, where: str) -> tuple[str, str | None]:
    """``content`` as text, and where it is not valid UTF-8 (byte offset), if anywhere."""
    try:
        return content.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        bad = content[exc.start : exc.end]
        return (
            content.decode("utf-8", "replace"),
            f"invalid UTF-8 at byte {exc.start} of {where}: {bad!r}",
        )


def parse_json(text: str) -> tuple[Any, str | None]:
    """Parsed JSON, or None and why not."""
    try:
        return json.loads(text), None
    except RecursionError:
        return None, "response JSON nested too deep to parse"
    except ValueError:
        return None, f"response is not JSON: {text[:200]!r}"


def one_line(text: str, limit: int = 200) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


@dataclass
class _Answer:
    text: str = ""
    reasoning: str = ""
    finish: str | None = None
    objects: Sequence[Any] = ()
    raw: Any = None
    info: StreamInfo | None = None
    bad_utf8: str | None = None
    pieces: Sequence[str] = ()
    stamps: Sequence[float] = ()
    first: float | None = None
    stop: str | int | None = None
    stop_field: str | None = None
    logprobs: Sequence[TokenLogprob] | None = None


def _answer(ex: Exchange, stream: StreamDecoder | None) -> _Answer:
    """What the body amounts to; sets the HTTP and parse failures on ``ex``."""
    spec = ex.spec
    if spec.stream:
        dec = stream or StreamDecoder(spec.api)
        if ex.status >= 400:
            payload, _ = parse_json(decode_text(ex.body, "the error body")[0])
            ex.fail(http_error(ex.status, payload, ex.body), _status_kind(ex.status))
        elif ex.status and not ex.event_stream:
            ex.fail(
                "the server answered a streamed request with Content-Type "
                f"{ex.content_type or 'none'!r}, not text/event-stream",
                ErrorKind.PROTOCOL,
            )
        kept = dec.kept()
        return _Answer(
            "".join(dec.text_parts),
            "".join(dec.reasoning_parts),
            dec.finish,
            kept,
            kept,
            dec.info(ex.content_type),
            dec.bad_utf8,
            dec.pieces,
            dec.stamps,
            dec.first,
            dec.stop,
            dec.stop_field,
            dec.logprobs,
        )
    text, bad = decode_text(ex.body, "the response body")
    raw: Any = None
    if ex.error is None:
        raw, problem = parse_json(text)
        if ex.status >= 400:
            ex.fail(http_error(ex.status, raw, ex.body), _status_kind(ex.status))
        elif problem is not None:
            ex.fail(problem, ErrorKind.PARSE)
    content, reasoning, finish = plain_choice(raw, spec.api)
    objects = [raw] if isinstance(raw, Mapping) else []
    choice = _first_choice(raw)
    stop, stop_field = dialects.stop_of(choice)
    return _Answer(
        content,
        reasoning,
        finish,
        objects,
        raw,
        None,
        bad,
        stop=stop,
        stop_field=stop_field,
        logprobs=dialects.logprobs_of(choice),
    )


def _status_kind(status: int) -> ErrorKind:
    return ErrorKind.RATE_LIMITED if status == 429 else ErrorKind.HTTP


def _stream_kind(info: StreamInfo | None, bad_utf8: str | None) -> ErrorKind | None:
    """Why a 2xx answer without a transport error is still not whole, if it is not."""
    if info is not None:
        if info.error_events:
            return ErrorKind.STREAM_ERROR
        if info.parse_errors or not info.done_seen or info.finish_chunks != 1:
            return ErrorKind.STREAM_INTEGRITY
    return ErrorKind.ENCODING if bad_utf8 else None


def assemble(
    ex: Exchange,
    stream: StreamDecoder | None = None,
    *,
    dialect: str = "auto",
    stats_map: Mapping[str, str] | None = None,
    counter: Any = None,
    count_chunks: bool = False,
    stalls: StallLog | None = None,
) -> tuple[Completion, str | None]:
    """The ``Completion`` an exchange amounts to, and the name of the dialect its statistics
    were read in (None when ``auto`` detected no dialect's statistics).

    ``dialect`` ``auto`` detects it from the chunks. ``counter`` (optional) counts the
    answer where the server gave no usage, and the first chunk's tokens; a counter that
    fails leaves ``count_error`` set, never an exception. ``stalls`` is the I/O shell's
    ticker log: the client's own stalls over the decode window become
    ``Completion.client_stall``.
    """
    spec = ex.spec
    ans = _answer(ex, stream)
    # None: auto-detection found no dialect's statistics (not the ``none`` choice)
    reader = registry.resolve(dialect, ans.objects)
    stats = reader.parse(ans.objects, stats_map or {}) if reader is not None else None
    usage: Usage | None = dialects.extract_usage(ans.objects)
    has_usage = usage is not None and usage.completion_tokens is not None
    local, first_tokens, chunk_tokens, count_error = _count(
        counter, spec, ans, has_usage, count_chunks
    )
    source = "usage" if has_usage else "none"
    local_source = counter.source if counter is not None else "none"
    if not has_usage and local is not None:
        source = local_source
    kind = ex.kind
    if ex.error is None and 200 <= ex.status < 300:
        kind = _stream_kind(ans.info, ans.bad_utf8)
    raw, model, rid = ans.raw, None, None
    head = raw[0] if isinstance(raw, list) and raw else raw
    if isinstance(head, Mapping):
        model, rid = head.get("model"), head.get("id")
    client_stall = None
    if stalls is not None and len(ans.stamps) >= 2:
        client_stall = stalls.stall(ans.stamps[0], ans.stamps[-1], now=time.perf_counter())
    completion = Completion(
        request=spec,
        status_code=ex.status,
        text=ans.text,
        reasoning_text=ans.reasoning,
        finish_reason=ans.finish,
        usage=usage,
        stats=stats,
        stats_asked=registry.asks_statistics(dialect),
        timings=Timings(
            sent=ex.sent,
            headers=ex.headers_at,
            first_content=ans.first,
            done=ex.done,
            chunk_times=tuple(ans.stamps),
            chunk_tokens=chunk_tokens,
            first_chunk_tokens=first_tokens,
        ),
        raw=raw,
        stream=ans.info,
        error=ex.error,
        local_completion_tokens=local,
        token_count_source=source,
        local_count_source=local_source if local is not None else "none",
        chunk_texts=tuple(ans.pieces),
        model=model if isinstance(model, str) else None,
        response_id=rid if isinstance(rid, str) else None,
        error_kind=kind,
        encoding_error=ans.bad_utf8,
        count_error=count_error,
        stop_reason=ans.stop,
        stop_field=ans.stop_field,
        client_stall=client_stall,
        logprobs=None if ans.logprobs is None else tuple(ans.logprobs),
    )
    return completion, reader.name if reader is not None else None


def _count(
    counter: Any, spec: RequestSpec, ans: _Answer, has_usage: bool, count_chunks: bool
) -> tuple[int | None, int | None, tuple[int, ...], str | None]:
    """(local count, first chunk's tokens, every chunk's tokens, why counting failed)."""
    # far past any tokenizer's reach for max_tokens: an overrun counting cannot change,
    # and not worth sending megabytes to a /tokenize
    countable = len(ans.text) + len(ans.reasoning) <= spec.max_tokens * MAX_CHARS_PER_TOKEN
    if counter is None or not countable:
        return None, None, (), None
    local = first = None
    every: tuple[int, ...] = ()
    try:
        # the invariants check the server's usage with the same (caching) counter;
        # counting it here too would only slow the request down
        if not has_usage:
            local = counter.count(ans.text) + (counter.count(ans.reasoning) if ans.reasoning else 0)
        if ans.pieces:
            if count_chunks and not getattr(counter, "remote", False):
                every = tuple(max(1, counter.count(p)) for p in ans.pieces)
            first = max(1, counter.count(ans.pieces[0]))
    except Exception as exc:  # a failing /tokenize is the counter's problem, named
        return None, None, (), f"{type(exc).__name__}: {one_line(str(exc), 160)}"
    return local, first, every, None


def failed(spec: RequestSpec, error: str, kind: ErrorKind) -> Completion:
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


# ------------------------------------------------------------ retry rules

RETRY_AFTER_MAX = 60.0


def retry_after(value: str | None) -> float:
    """Seconds to wait from a ``Retry-After`` header (seconds or HTTP date), 0 s to 60 s."""
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


@dataclass
class Retry:
    """Send the request again: on a fresh connection, or after ``wait`` seconds."""

    fresh: bool = False
    wait: float = 0.0


@dataclass
class Attempts:
    """The retry rules of one request, the same for both shells.

    A reused keep-alive connection the server closed before sending any byte of
    the response is retried once on a fresh connection (the request never
    reached the model); HTTP 429 is retried up to ``retry_429`` times after its
    ``Retry-After``. Every retry is recorded in ``notes`` (``Completion.retries``).
    """

    config: EndpointConfig
    notes: list[str] = field(default_factory=list)
    fresh_retries: int = 0
    rate_limited: int = 0
    retried_429: int = 0

    def after(self, ex: Exchange, *, reused: bool) -> Retry | None:
        """What to do after attempt ``ex`` (``reused``: it went over a pooled connection)."""
        if (
            ex.nothing_received
            and reused
            and self.config.retry_stale
            and not self.fresh_retries
            and ex.status == 0
        ):
            self.fresh_retries += 1
            self.notes.append(
                "a reused keep-alive connection was closed before any byte of the response "
                f"({ex.error}); sent again once on a fresh connection"
            )
            return Retry(fresh=True)
        if ex.status != 429:
            return None
        self.rate_limited += 1
        if self.rate_limited > self.config.retry_429:
            return None
        wait = retry_after(ex.retry_after)
        self.retried_429 += 1
        self.notes.append(f"HTTP 429: waited {wait:g}s (Retry-After) and sent again")
        return Retry(wait=wait)


# ------------------------------------------------------------ stall guard


class StallGuard:
    """Stop sending to an endpoint that stalls, or that streams without end.

    After ``limit`` requests in a row that got no complete answer in time
    (``STALL_KINDS``), or ``limit`` answers in a row cut at the byte cap, later
    requests are not sent: they fail at once with a ``not-sent`` error that says
    why, so a hanging or runaway endpoint fails a session in seconds instead of
    one deadline (or one byte cap) per request. Any other answer resets the count.
    ``limit`` 0 turns the guard off.
    """

    def __init__(self, limit: int = 2) -> None:
        self.limit = limit
        self._stalls: list[str] = []
        self._cuts: list[str] = []
        self._reason: str | None = None
        self._runaway = False

    def blocked(self) -> str | None:
        """The error of a request that must not be sent, or None to send it."""
        if not self.limit:
            return None
        if self._reason is None:
            if len(self._stalls) >= self.limit:
                self._reason = (
                    f"the endpoint stalled on {len(self._stalls)} requests in a row "
                    f"({self._stalls[-1]})"
                )
            elif len(self._cuts) >= self.limit:
                self._runaway = True
                self._reason = (
                    f"the endpoint sent {len(self._cuts)} answers in a row past the byte cap "
                    f"({self._cuts[-1]})"
                )
        if self._reason is None:
            return None
        return f"not sent: {self._reason}; later requests fail at once"

    @property
    def tripped(self) -> bool:
        """Whether later requests are refused."""
        return self.blocked() is not None

    def trip(self, reason: str) -> None:
        """Refuse every later request, for ``reason`` (a load point that found a dead server)."""
        if self._reason is None:
            self._reason = reason

    @property
    def reason(self) -> str | None:
        """Why later requests are refused (None while they are sent)."""
        self.blocked()
        return self._reason

    @property
    def runaway(self) -> bool:
        """Whether the guard tripped on answers cut at the byte cap."""
        return self.tripped and self._runaway

    def record(self, completion: Completion) -> None:
        """Count one answer (or its absence)."""
        self.note(completion.error_kind, completion.error, completion.status_code)

    def note(self, kind: ErrorKind | None, error: str | None, status: int) -> None:
        """Count one answer from its kind, its error and its HTTP status."""
        if self._reason is not None:  # tripped for good: what follows changes nothing
            return
        if kind in STALL_KINDS:
            self._stalls.append(error or str(kind))
            self._cuts.clear()
        elif kind == ErrorKind.TOO_LARGE:
            self._cuts.append(error or str(kind))
            self._stalls.clear()
        elif kind != ErrorKind.NOT_SENT and status:
            self._stalls.clear()
            self._cuts.clear()
