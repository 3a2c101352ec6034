"""The record of one request: what was sent, what came back, and when.

Everything here is immutable and free of pytest, so the invariants, the sweep
statistics and the reports can all work from the same value.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal

# the speculation statistics record lives beside the dialects that parse it (core); it is
# re-exported here, where it has always been imported from
from pytest_ddtree.core.dialects.stats import SpecStats as SpecStats
from pytest_ddtree.core.dialects.stats import conditional_acceptance as conditional_acceptance
from pytest_ddtree.core.dialects.stats import rounds_reaching as rounds_reaching
from pytest_ddtree.wire.health import ClientStall

Api = Literal["chat", "completions"]

# No tokenizer decodes one token into more characters than this (the longest tokens of
# common vocabularies are runs of spaces or punctuation well under 256 characters), so
# more than ``max_tokens * MAX_CHARS_PER_TOKEN`` characters is an overrun, counted or not.
MAX_CHARS_PER_TOKEN = 256


class ErrorKind(str, enum.Enum):
    """Why a ``Completion`` is not a whole, clean answer (``Completion.error_kind``).

    Every consumer (the stall guard, the invariants, the diagnosis, the summary, the
    load report) reads this, never the message text. The values are plain strings, so
    a kind compares equal to its value and lands in JSON as that value.
    """

    #: no response at all: connection refused, closed before any byte
    TRANSPORT = "transport"
    #: no connection within the connect timeout, or no free connection in the pool
    CONNECT_TIMEOUT = "connect-timeout"
    #: the connection broke mid-response
    BROKEN = "broken"
    #: no byte for the read timeout
    READ_TIMEOUT = "read-timeout"
    #: the whole exchange passed the total deadline
    DEADLINE = "deadline"
    #: the answer passed ``--ddtree-max-response-bytes`` and was cut
    TOO_LARGE = "too-large"
    #: a non-2xx answer (other than 429)
    HTTP = "http"
    #: HTTP 429
    RATE_LIMITED = "rate-limited"
    #: a streamed request answered with something that is not an event stream
    PROTOCOL = "protocol"
    #: a plain answer that is not JSON (or nested too deep to parse)
    PARSE = "parse"
    #: the client's own failure while handling the answer
    CLIENT = "client"
    #: not sent: the stall guard had tripped
    NOT_SENT = "not-sent"
    #: cut mid-answer by the stall guard, which tripped on the requests beside it
    STOPPED = "stopped"
    #: a 2xx stream that arrived incomplete or garbled (no [DONE], unparseable events)
    STREAM_INTEGRITY = "stream-integrity"
    #: a 2xx stream carrying an in-band error event
    STREAM_ERROR = "stream-error"
    #: invalid UTF-8 in an otherwise complete answer
    ENCODING = "encoding"

    def __str__(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:  # shown in evidence and reports as the plain value
        return repr(self.value)

    def __format__(self, spec: str) -> str:
        return str.__format__(str(self), spec)


#: kinds that describe the client's own side of the exchange (its connection, its
#: timeouts, its size limit, its own failure): never a verdict about the server, its
#: speculation or its template
CLIENT_SIDE_KINDS = frozenset(
    {
        ErrorKind.TRANSPORT,
        ErrorKind.CONNECT_TIMEOUT,
        ErrorKind.DEADLINE,
        ErrorKind.READ_TIMEOUT,
        ErrorKind.TOO_LARGE,
        ErrorKind.CLIENT,
        ErrorKind.NOT_SENT,
        ErrorKind.STOPPED,
    }
)
#: kinds that mean the endpoint did not answer in time (the stall guard counts them)
STALL_KINDS = frozenset({ErrorKind.CONNECT_TIMEOUT, ErrorKind.READ_TIMEOUT, ErrorKind.DEADLINE})


@dataclass(frozen=True)
class RequestSpec:
    """What was asked for, without secrets (the API key never lands here).

    ``body`` is the JSON body exactly as sent (budget field included when the
    budget mode put one there); ``url`` is the full URL the request went to.
    """

    api: Api
    url: str
    body: Mapping[str, Any]
    tree_budget: int | None
    stream: bool
    max_tokens: int
    temperature: float
    prompt_id: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """One line naming the request, for failure messages."""
        budget = "server-default" if self.tree_budget is None else str(self.tree_budget)
        pid = f", prompt={self.prompt_id}" if self.prompt_id else ""
        mode = "stream" if self.stream else "no-stream"
        return (
            f"POST {self.url} ({mode}, tree_budget={budget}, max_tokens={self.max_tokens}, "
            f"temperature={self.temperature}{pid})"
        )


@dataclass(frozen=True)
class Usage:
    """The server's ``usage`` block, as reported."""

    prompt_tokens: int | None
    completion_tokens: int | None
    total_tokens: int | None
    reasoning_tokens: int | None = None
    #: prompt tokens the server's prefix cache held (``prompt_tokens_details.cached_tokens``:
    #: vLLM with ``--enable-prompt-tokens-details``, SGLang with ``--enable-cache-report``,
    #: llama.cpp); None where the server does not say
    cached_tokens: int | None = None


@dataclass(frozen=True)
class Timings:
    """``time.perf_counter`` stamps of one request.

    ``sent`` is the request's first byte on the wire (its headers starting to go out), the
    same event in the sync client and the load runner (``wire.clock``): TTFT and end to end
    run from there (docs/writing-tests.md, "The clock"). A new connection's setup, when the
    request needed one, is ``connect_start``..``connect_end`` (before ``sent``, never inside
    TTFT); both are None when a kept-alive connection was reused.
    ``chunk_times`` holds one stamp per content-carrying stream event (empty
    for a non-streamed request). ``first_chunk_tokens`` is the number of
    tokens the first of those events carried: the decode rate leaves them out
    (their time is TTFT), so several tokens in one chunk (normal with
    speculative decoding) do not distort per-token figures.
    ``chunk_tokens`` holds the count of every event when the client was asked
    for it (``DDTreeClient(count_chunks=True)``); counting every piece costs
    about as much as the request itself on a fast server, so it is off by
    default (``Completion.chunk_texts`` keeps the pieces to count later).
    """

    sent: float
    headers: float | None
    first_content: float | None
    done: float
    chunk_times: tuple[float, ...] = ()
    chunk_tokens: tuple[int, ...] = ()
    first_chunk_tokens: int | None = None
    connect_start: float | None = None
    connect_end: float | None = None

    @property
    def end_to_end(self) -> float:
        """Seconds from the request being sent to the last byte."""
        return self.done - self.sent

    @property
    def connect(self) -> float | None:
        """Seconds the request's new connection took to set up (TCP, and TLS for
        ``https://``); None when a kept-alive connection was reused."""
        if self.connect_start is None or self.connect_end is None:
            return None
        return self.connect_end - self.connect_start

    @property
    def ttft(self) -> float | None:
        """Time to first content token (not the role-only first chunk)."""
        if self.first_content is None:
            return None
        return self.first_content - self.sent

    @property
    def inter_chunk(self) -> tuple[float, ...]:
        """Gaps between consecutive content-carrying events."""
        return tuple(b - a for a, b in pairwise(self.chunk_times))

    @property
    def first_event_tokens(self) -> int:
        """Tokens the first content event carried: counted when a counter was there, else 1."""
        if self.first_chunk_tokens is not None:
            return self.first_chunk_tokens
        return self.chunk_tokens[0] if self.chunk_tokens else 1

    @property
    def decode_seconds(self) -> float | None:
        """Seconds from the first content event to the last byte (None: fewer than two
        content events, so no decoding was seen; see ``decode_rate``)."""
        if len(self.chunk_times) < 2 or self.first_content is None:
            return None
        return self.done - self.first_content

    def decode_tokens_per_second(self, completion_tokens: int | None) -> float | None:
        """The decode rate of this stream (``decode_rate``); None without one."""
        return decode_rate(completion_tokens, self.first_event_tokens, self.decode_seconds)


def decode_rate(
    tokens: int | None, first_event_tokens: int | None, decode_seconds: float | None
) -> float | None:
    """The one decode-rate formula (tokens per second), for the sweep and the load alike.

    ``(tokens - first_event_tokens) / decode_seconds``: the tokens generated after the first
    content event, over the seconds from that event to the last byte (``Timings.
    decode_seconds``). The first event's tokens are left out, counted rather than assumed to
    be one (a speculative server may send several in it), because their time is TTFT. The
    time runs to the last byte, not to the last content event, because ``tokens`` (the
    server's usage) includes a stop token that carries no text: it is decoded after the last
    content event, and leaving its time out while counting it inflates the rate of a short
    answer by one token in n (docs/sweep.md, "The decode rate"). The load's TPOT is its
    inverse. None when a figure is missing or nothing was decoded after the first event.
    """
    if tokens is None or decode_seconds is None:
        return None
    later = tokens - (1 if first_event_tokens is None else first_event_tokens)
    if later <= 0 or decode_seconds <= 0:
        return None
    return later / decode_seconds


@dataclass(frozen=True)
class StreamInfo:
    """What the event stream itself looked like, for stream-integrity checks."""

    events: int
    done_seen: bool
    finish_chunks: int
    parse_errors: tuple[str, ...] = ()
    error_events: tuple[Mapping[str, Any], ...] = ()
    usage_seen: bool = False
    content_type: str | None = None
    chunks_dropped: int = 0


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's log-probability and the server's best alternatives there.

    ``token`` is the token's text as the server names it; ``data`` its bytes when the
    server sends them (``bytes``), else the UTF-8 of ``token``. ``top`` holds the
    alternatives the server listed (``top_logprobs``), best first, each
    ``(token, logprob, bytes)``; a log-probability the server could not state
    (vLLM's ``-9999.0`` for minus infinity, a null) is ``-inf``.
    """

    token: str
    logprob: float
    data: bytes
    top: tuple[tuple[str, float, bytes], ...] = ()


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a chat answer, in the OpenAI shape.

    Plain answers carry them whole in ``choices[0].message.tool_calls``; a stream sends
    ``choices[0].delta.tool_calls`` fragments keyed by ``index``, assembled here: the
    first ``id``, ``type`` and ``function.name`` a call's deltas carry (a later delta
    repeating the same value adds nothing; a different one is appended, as OpenAI's own
    client does, so a conflict shows in the name) and every ``function.arguments``
    fragment in order. ``arguments`` is the JSON text as sent (None: the server sent no
    ``arguments`` at all); ``id`` None when the server gave none.
    """

    index: int
    id: str | None
    name: str | None
    arguments: str | None
    type: str | None = "function"


@dataclass(frozen=True)
class Completion:
    """Everything one request produced.

    ``text`` is the answer content; ``reasoning_text`` what the server put in
    ``reasoning_content`` (kept apart). ``raw`` is the response JSON for a
    plain request, or the list of parsed chunk objects for a streamed one.
    ``error`` is set when the request did not complete (transport failure,
    non-2xx, deadline); the other fields then hold whatever arrived.
    ``completion_tokens`` is the best count available: the server's usage,
    else the local count (``token_count_source`` says which);
    ``local_count_source`` names the counter behind ``local_completion_tokens``
    (a tokenizer.json, the server's /tokenize, an approximation, or none).
    ``local_completion_tokens`` is the client-side count of ``text`` plus
    ``reasoning_text`` (None when no tokenizer was available).
    ``error_kind`` (an ``ErrorKind``) says why the answer is not whole and clean: the
    failure behind ``error``, or for a 2xx answer without ``error`` a stream that is
    incomplete (``stream-integrity``), carries an error event (``stream-error``) or
    holds invalid UTF-8 (``encoding``); None for a clean answer.
    ``encoding_error`` names invalid UTF-8 in the body (with its byte offset);
    ``retries`` says why the request was sent again (a stale keep-alive
    connection, HTTP 429); ``count_error`` why the local token count failed.
    ``stop_reason`` is the stop the server says ended the answer (a stop string or
    a token id), read from the field ``stop_field`` names (vLLM's
    ``choices[0].stop_reason``, SGLang's ``choices[0].matched_stop``); None when
    the server does not say.
    ``logprobs`` holds the per-token log-probabilities when the request asked for them
    (``logprobs``/``top_logprobs``) and the server sent them, in generation order;
    None otherwise. ``stats_asked`` is True when the answer was read for
    speculative statistics (a statistics dialect other than ``none``).
    ``tool_calls`` holds the answer's tool calls (``ToolCall``, in index order; a
    stream's deltas assembled), empty when it made none.
    """

    request: RequestSpec
    status_code: int
    text: str
    reasoning_text: str
    finish_reason: str | None
    usage: Usage | None
    stats: SpecStats | None
    timings: Timings
    raw: Any
    stream: StreamInfo | None = None
    error: str | None = None
    local_completion_tokens: int | None = None
    token_count_source: str = "none"
    local_count_source: str = "none"
    chunk_texts: tuple[str, ...] = ()
    model: str | None = None
    response_id: str | None = None
    error_kind: ErrorKind | None = None
    encoding_error: str | None = None
    retries: tuple[str, ...] = ()
    count_error: str | None = None
    stop_reason: str | int | None = None
    stop_field: str | None = None
    client_stall: ClientStall | None = None
    logprobs: tuple[TokenLogprob, ...] | None = None
    #: the server's own message of a non-2xx answer (``error`` says it with the status)
    server_message: str | None = None
    stats_asked: bool = False
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def speculation_reported(self) -> bool | None:
        """Whether the speculative statistics asked for came back (None: none were asked
        for, or the request failed, so their absence says nothing)."""
        if not self.stats_asked or not self.ok:
            return None
        return self.stats is not None and self.stats.speculative

    @property
    def client_side_failure(self) -> bool:
        """True when the request failed on the client's side (see ``CLIENT_SIDE_KINDS``)."""
        return self.error_kind in CLIENT_SIDE_KINDS

    @property
    def ok(self) -> bool:
        """True when the HTTP exchange completed with a 2xx and no error."""
        return self.error is None and 200 <= self.status_code < 300

    @property
    def completion_tokens(self) -> int | None:
        """Server-reported completion tokens, else the local count."""
        if self.usage is not None and self.usage.completion_tokens is not None:
            return self.usage.completion_tokens
        return self.local_completion_tokens

    @property
    def ttft(self) -> float | None:
        """Time to first content token, seconds."""
        return self.timings.ttft

    @property
    def connect(self) -> float | None:
        """Seconds a new connection took to set up before the request went out; None when
        a kept-alive one was reused (reported apart: never inside ``ttft``)."""
        return self.timings.connect

    @property
    def end_to_end(self) -> float:
        """Wall time of the whole request, seconds."""
        return self.timings.end_to_end

    @property
    def decode_tokens_per_second(self) -> float | None:
        """Client-measured decode rate (streamed requests only)."""
        return self.timings.decode_tokens_per_second(self.completion_tokens)


def summarize_text(text: str, limit: int = 120) -> str:
    """A one-line excerpt of ``text`` for messages (newlines shown as ``\\n``)."""
    flat = text.replace("\n", "\\n")
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
