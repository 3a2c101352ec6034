"""Whether two answers can be compared: each arrived whole, and both saw the same prompt.

Losslessness, determinism, the streamed-versus-plain comparison and the baseline
diagnosis judge a *difference* between answers. A difference between an answer that
was cut short (a broken stream, an in-band error, the client's deadline) and a whole
one, or between two servers that rendered the request into different prompts, says
nothing about speculative decoding; those pairs are "not comparable" and no verdict
is drawn from them. This module is the one place that decides it.

No pytest here.
"""

from __future__ import annotations

from enum import Enum

from pytest_ddtree.wire.completion import Completion, ErrorKind, summarize_text

#: Finish reasons of an answer the model ended itself (``stop``, or ``tool_calls`` after
#: its calls) or the budget ended (``length``); anything else (none, ``error``,
#: ``abort``...) is an answer cut short.
WHOLE_FINISH_REASONS = frozenset({"stop", "length", "tool_calls"})

#: The violation code of a comparison that could not be made.
NOT_COMPARABLE = "not-comparable"

# ``Completion.error_kind`` of a request the stall guard did not send.
NOT_SENT_KIND = ErrorKind.NOT_SENT


def kind_name(kind: object) -> str:
    """The string value of an error kind (a plain string or a string-valued ``Enum``)."""
    return str(kind.value) if isinstance(kind, Enum) else str(kind)


def why_not_whole(completion: Completion) -> str | None:
    """Why ``completion`` did not arrive whole, as ``"kind: detail"``; None when it did.

    Whole means: the exchange completed with a 2xx and no error, the body is valid
    UTF-8, a streamed answer carried no unparseable chunk and no in-band error event,
    ended with ``[DONE]`` after exactly one finish chunk, and the finish reason is
    ``stop`` or ``length``.
    """
    c = completion
    if c.error is not None or not 200 <= c.status_code < 300:
        kind = kind_name(c.error_kind) if c.error_kind is not None else "http-error"
        return f"{kind}: {summarize_text(c.error or f'HTTP {c.status_code}', 160)}"
    if c.encoding_error is not None:
        return f"encoding: {summarize_text(c.encoding_error, 160)}"
    stream = c.stream
    if stream is not None:
        if stream.error_events:
            return "stream-error: an in-band error event inside the stream"
        if not stream.done_seen:
            cut = ", its last event unparseable" if stream.parse_errors else ""
            return f"stream-integrity: the stream ended without [DONE]{cut}"
        if stream.parse_errors:
            first = summarize_text(stream.parse_errors[0], 60)
            return f"stream-integrity: an unparseable stream event ({first})"
        if stream.finish_chunks != 1:
            return f"stream-integrity: {stream.finish_chunks} finish chunks instead of one"
    if c.finish_reason not in WHOLE_FINISH_REASONS:
        return (
            f"finish-reason: finish_reason {c.finish_reason!r}, not 'stop', 'length' "
            "or 'tool_calls'"
        )
    return None


def is_whole(completion: Completion) -> bool:
    """True when ``completion`` arrived whole (see ``why_not_whole``)."""
    return why_not_whole(completion) is None


def prompt_tokens(completion: Completion) -> int | None:
    """The server's ``usage.prompt_tokens``, None when it did not say."""
    return completion.usage.prompt_tokens if completion.usage is not None else None


def prompt_mismatch(completion: Completion, baseline: Completion) -> str | None:
    """Why the server and its baseline did not see the same prompt, or None.

    Both answered the same request; when their ``usage.prompt_tokens`` differ
    they rendered or tokenised it differently (another chat template, system
    prompt or tokenizer), so comparing their outputs cannot blame speculation.
    Unknown counts (no usage) compare as equal: nothing to go on.
    """
    ours, theirs = prompt_tokens(completion), prompt_tokens(baseline)
    if ours is None or theirs is None or ours == theirs:
        return None
    return (
        f"the server and its baseline do not see the same prompt: usage.prompt_tokens "
        f"{ours} vs {theirs} for the same request (different chat template or tokenizer)"
    )
