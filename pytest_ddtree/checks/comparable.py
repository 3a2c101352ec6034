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

from collections.abc import Iterable, Mapping, Sequence
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


#: Statuses of a request the server understood and refused as asked (a bad or unsupported
#: field): no transient trouble, no credentials, no rate limit.
REFUSED_STATUSES = frozenset({400, 422, 501})

#: Request fields that ask for more than prose, in the order a refusal advice names them.
FEATURE_FIELDS = (
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "logprobs",
    "top_logprobs",
    "stop",
    "stop_token_ids",
    "logit_bias",
    "min_tokens",
    "ignore_eos",
    "n",
    "seed",
    "structured_outputs",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
    "reasoning_effort",
)


#: What a refused request should be checked for first, whatever it asked for.
SHAPING_OPTIONS = (
    "check the options that shape it (for example a tree budget outside the server's range, "
    "the model id or max_tokens)"
)


def _tool_name(tool: object) -> str:
    fn = tool.get("function") if isinstance(tool, Mapping) else None
    name = fn.get("name") if isinstance(fn, Mapping) else None
    return str(name) if name is not None else "?"


def requested_features(completion: Completion, *, injected: Iterable[str] = ()) -> list[str]:
    """The fields of the request beyond plain chat, each as ``name=value`` (shortened), but
    the ``injected`` ones (a check's own, such as the distribution test's ``seed``)."""
    body = completion.request.body  # a Mapping: the JSON object that was sent
    left_out = set(injected)
    out = []
    for name in FEATURE_FIELDS:
        value = body.get(name)
        if name in left_out or value is None or value is False:
            continue
        if name == "tools" and isinstance(value, list):
            out.append(f"tools=[{', '.join(_tool_name(t) for t in value)}]")
            continue
        out.append(f"{name}={summarize_text(repr(value), 60)}")
    return out


def feature_advice(features: Sequence[str], *, who: str = "server") -> str:
    """The sentence a refusal by ``who`` adds about the fields beyond plain chat ("" without
    any)."""
    if not features:
        return ""
    return (
        f"; it also asks for {'; '.join(features)}: check that the {who} serves each of them "
        "(a tool-call parser, structured outputs, log-probabilities: its options and version), "
        "or take the field out of the prompt set"
    )


def refused(completion: Completion) -> bool:
    """True for an answer the server refused as asked (HTTP 400, 422 or 501)."""
    return (
        completion.error_kind in (None, ErrorKind.HTTP)
        and completion.status_code in REFUSED_STATUSES
    )


def refusal(
    completion: Completion, *, who: str = "server", injected: Iterable[str] = ()
) -> str | None:
    """What to do about an answer ``who`` refused as asked (HTTP 400, 422 or 501): the
    options that shape a request, then the fields it asked for beyond plain chat; None for
    any other answer, whole or not."""
    if not refused(completion):
        return None
    features = requested_features(completion, injected=injected)
    return (
        f"the {who} refused the request (HTTP {completion.status_code}), so there is no "
        f"answer to compare: {SHAPING_OPTIONS}{feature_advice(features, who=who)}"
    )


def not_whole_advice(
    answer: Completion, *, default: str, who: str = "server", injected: Iterable[str] = ()
) -> str:
    """``default`` (what to do about an answer cut short), or, for an answer ``who`` refused
    as asked, the refusal advice: a 4xx names what to check, not a cut stream."""
    return refusal(answer, who=who, injected=injected) or default


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
