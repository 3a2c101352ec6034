"""The ``Completion`` an exchange amounts to (``assemble``), or a failed one (``failed``).

Every failure is classified into an ``ErrorKind`` here; the statistics are read
in the detected dialect and the answer is counted where the server gave no
usage. No I/O.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ddtree.core import dialects as registry
from pytest_ddtree.core.settings import Settings
from pytest_ddtree.wire import dialects
from pytest_ddtree.wire.completion import (
    MAX_CHARS_PER_TOKEN,
    Completion,
    ErrorKind,
    RequestSpec,
    StreamInfo,
    Timings,
    TokenLogprob,
    ToolCall,
    Usage,
)
from pytest_ddtree.wire.health import StallLog
from pytest_ddtree.wire.protocol.exchange import Exchange
from pytest_ddtree.wire.protocol.parse import (
    _first_choice,
    decode_text,
    http_error,
    one_line,
    parse_json,
    plain_choice,
    plain_tool_calls,
    server_message,
)
from pytest_ddtree.wire.protocol.sse import StreamDecoder


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
    tool_calls: tuple[ToolCall, ...] = ()


def _answer(ex: Exchange, stream: StreamDecoder | None) -> _Answer:
    """What the body amounts to; sets the HTTP and parse failures on ``ex``."""
    spec = ex.spec
    if spec.stream:
        dec = stream or StreamDecoder(spec.api)
        if ex.status >= 400:
            payload, _ = parse_json(decode_text(ex.body, "the error body")[0])
            ex.server_message = server_message(payload, ex.body)
            ex.fail(http_error(ex.status, ex.server_message), _status_kind(ex.status))
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
            dec.tool_calls.calls(),
        )
    text, bad = decode_text(ex.body, "the response body")
    raw: Any = None
    if ex.error is None:
        raw, problem = parse_json(text)
        if ex.status >= 400:
            ex.server_message = server_message(raw, ex.body)
            ex.fail(http_error(ex.status, ex.server_message), _status_kind(ex.status))
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
        tool_calls=plain_tool_calls(raw) if spec.api == "chat" else (),
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
    dialect: str = Settings.dialect,
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
        server_message=ex.server_message,
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
        tool_calls=ans.tool_calls,
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
