"""Checks on the exchange itself: HTTP status, transport errors, the event stream."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pytest_ddtree.checks.invariants._context import Context, as_int, clip
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.wire.completion import ErrorKind


def _error_message(event: Any) -> str:
    if isinstance(event, Mapping):
        err = event.get("error", event)
        if isinstance(err, Mapping):
            msg = err.get("message")
            kind = err.get("type") or err.get("code")
            if msg is not None:
                return clip(f"{msg} ({kind})" if kind else str(msg), 200)
        return clip(repr(dict(event)), 200)
    return clip(repr(event), 200)


def check_stream(ctx: Context) -> Iterator[Violation]:
    """stream-integrity and stream-error from the completion's StreamInfo."""
    info = ctx.completion.stream
    status = as_int(ctx.completion.status_code)
    # a non-2xx never started a stream: http-error says all there is to say
    if info is None or status is None or not 200 <= status < 300:
        return
    # cut short by the client's size cap: too-large says why, not a missing [DONE]
    if getattr(ctx.completion, "error_kind", None) == ErrorKind.TOO_LARGE:
        return
    errors = tuple(info.error_events or ())
    if errors:
        yield ctx.violation(
            "stream-error",
            f"in-band error event in the stream: {_error_message(errors[0])}",
            error_events=len(errors),
            first_error=_error_message(errors[0]),
        )
    parse_errors = tuple(info.parse_errors or ())
    if parse_errors:
        yield ctx.violation(
            "stream-integrity",
            f"{len(parse_errors)} stream event(s) did not parse as JSON",
            first=clip(str(parse_errors[0]), 200),
        )
    events = as_int(info.events)
    if events == 0:
        # the transport error the client already has is the news, when there is one
        error = ctx.completion.error
        yield ctx.violation(
            "stream-integrity",
            "the stream carried no events" + (f" ({clip(str(error), 200)})" if error else ""),
            error=error,
            content_type=getattr(info, "content_type", None),
        )
        return
    if not info.done_seen:
        yield ctx.violation(
            "stream-integrity",
            "the stream ended without 'data: [DONE]'"
            + (f" ({clip(str(ctx.completion.error), 120)})" if ctx.completion.error else ""),
            events=events,
            finish_chunks=info.finish_chunks,
            received=clip(ctx.text[-80:]),
        )
    finish_chunks = as_int(info.finish_chunks)
    # An aborted stream has no finish chunk for a reason already reported.
    if finish_chunks is not None and finish_chunks != 1 and not (errors and finish_chunks == 0):
        yield ctx.violation(
            "stream-integrity",
            f"{finish_chunks} chunks carried a finish_reason, expected exactly 1",
            finish_chunks=finish_chunks,
            events=events,
        )


def check_encoding(ctx: Context) -> Iterator[Violation]:
    """encoding: invalid UTF-8 in the body or the stream, with the byte offset."""
    bad = getattr(ctx.completion, "encoding_error", None)
    if bad:
        yield ctx.violation(
            "encoding",
            str(bad),
            note="the text was decoded with U+FFFD replacements; the usage check did not run",
        )


def check_http(ctx: Context, stream_explained: bool) -> Iterator[Violation]:
    """http-error (too-large past the size cap): non-2xx, or a failure the stream checks
    did not already explain."""
    c = ctx.completion
    if getattr(c, "error_kind", None) == ErrorKind.TOO_LARGE:
        yield ctx.violation(
            "too-large",
            clip(str(c.error), 200),
            status=as_int(c.status_code),
            received=clip(ctx.text, 80) if ctx.text else None,
        )
        return
    status = as_int(c.status_code)
    body = c.raw
    detail = _error_message(body) if isinstance(body, Mapping) and "error" in body else None
    if status is None or not 200 <= status < 300:
        head = "no HTTP response" if not status else f"HTTP {status}"
        yield ctx.violation(
            "http-error",
            head
            + (f": {detail}" if detail else "")
            + (f" ({clip(str(c.error), 200)})" if c.error else ""),
            status=status,
            error=c.error,
            body=clip(repr(body), 200) if body is not None and not detail else detail,
        )
    elif c.error is not None and not stream_explained:
        yield ctx.violation(
            "http-error",
            f"request failed: {clip(str(c.error), 200)}",
            status=status,
            error=str(c.error),
            received=clip(ctx.text, 80),
        )
