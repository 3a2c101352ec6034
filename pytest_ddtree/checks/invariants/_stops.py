"""Stop sequences: what a request's ``stop`` promises about the answer.

A request that carries ``stop`` (a string or a list of strings) is promised that the answer
ends where one of them first appears: the text holds no stop sequence (OpenAI, vLLM,
llama.cpp and SGLang trim it), nothing comes after the point where one matched, and the
finish reason is ``stop`` when one matched. A stop that never matched promises nothing, so
an answer cut by ``max_tokens`` or ended by the model's own end-of-sequence before any stop
is fine. Only the content is judged: a stop string inside ``reasoning_content`` is not the
answer's text. Tokens counted past the stop are ``usage-mismatch`` (``check_usage``, which
allows the matched sequence's own tokens, as vLLM counts them).
"""

from __future__ import annotations

from collections.abc import Iterator

from pytest_ddtree.checks.invariants._context import Context, clip, excerpt
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.wire.completion import MAX_CHARS_PER_TOKEN

#: request fields with which an engine keeps the matched stop string in the text
#: (vLLM ``include_stop_str_in_output``, SGLang ``no_stop_trim``)
KEEP_STOP_FIELDS = ("include_stop_str_in_output", "no_stop_trim")


def request_stops(ctx: Context) -> tuple[str, ...]:
    """The non-empty stop strings the request body carried (``stop``: a string or a list)."""
    body = getattr(ctx.completion.request, "body", None)
    stop = body.get("stop") if isinstance(body, dict) else None
    if isinstance(stop, str):
        return (stop,) if stop else ()
    if isinstance(stop, (list, tuple)):
        return tuple(s for s in stop if isinstance(s, str) and s)
    return ()


def keeps_stop(ctx: Context) -> bool:
    """Whether the request asked the engine to keep the matched stop string in the text."""
    body = getattr(ctx.completion.request, "body", None)
    return isinstance(body, dict) and any(body.get(k) is True for k in KEEP_STOP_FIELDS)


def fired_stop(ctx: Context, stops: tuple[str, ...]) -> str | None:
    """The stop string the engine names as the one that ended the answer, or None."""
    named = getattr(ctx.completion, "stop_reason", None)
    return named if isinstance(named, str) and named in stops else None


def stop_allowance(ctx: Context) -> tuple[int, str | None]:
    """(how many tokens usage may count beyond the text for the stop that ended the answer,
    which stop): an engine may count the matched sequence's own tokens and trim them from the
    text (vLLM does). The stop the engine names, else the longest of the request's (none may
    have matched: the model's own end counts too); 0 when no stop string can have fired."""
    stops = request_stops(ctx)
    if not stops or ctx.finish != "stop" or keeps_stop(ctx):
        return 0, None
    named = fired_stop(ctx, stops)
    candidates = (named,) if named is not None else stops
    best, which = 0, None
    for s in candidates:
        n = ctx.count_text(s)
        if n > best:
            best, which = n, s
    return best, which


def stop_within(ctx: Context, reach: int) -> str | None:
    """The request's stop string that can have ended the answer within ``reach`` tokens, or
    None: one the text ends with (it fired on the last token, and was not trimmed), or one
    that, added back to the text it was trimmed from, still counts at most ``reach`` tokens
    by an exact count (a stop string's tokens may merge with the text's last ones: SmolLM2's
    "of a " + "river" counts as many tokens as "of a ")."""
    stops = request_stops(ctx)
    text = ctx.text
    for s in stops:
        if text.endswith(s):
            return s
    local = ctx.local_total()
    alone = ctx.exact_count(text)
    if local is None or alone is None:
        return None
    for s in stops:
        whole = ctx.exact_count(text + s)
        if whole is not None and local - alone + whole <= reach:
            return s
    return None


#: request fields below which an engine does not look for stops (vLLM ``min_tokens``,
#: SGLang ``min_new_tokens``: no stop string or token ends the answer before them)
MIN_TOKENS_FIELDS = ("min_tokens", "min_new_tokens")


def _floor(ctx: Context) -> int:
    """The tokens the request asked for before any stop may end the answer (0: none)."""
    body = getattr(ctx.completion.request, "body", None)
    if not isinstance(body, dict):
        return 0
    values = [body.get(k) for k in MIN_TOKENS_FIELDS]
    return max([v for v in values if isinstance(v, int) and not isinstance(v, bool)] + [0])


def _matches(text: str, stops: tuple[str, ...]) -> list[tuple[int, str]]:
    """(where, which) of every stop sequence in ``text`` (the first 64 of each), in order of
    place, the longest first among those starting at the same character."""
    found: list[tuple[int, str]] = []
    for s in stops:
        at = text.find(s)
        while at >= 0 and len(found) < 64 * len(stops):
            found.append((at, s))
            at = text.find(s, at + 1)
    return sorted(found, key=lambda m: (m[0], -len(m[1])))


def _past_floor(ctx: Context, prefix: str, floor: int) -> bool:
    """Whether ``prefix`` (the text up to a stop's end) surely holds more than ``floor``
    tokens: by an exact count with its slack, else by the fewest tokens its characters can
    be (never a false alarm)."""
    n = ctx.exact_count(prefix)
    if n is None:
        return len(prefix) // MAX_CHARS_PER_TOKEN > floor
    return n >= floor + ctx.expect.usage_tolerance_abs


def _first_match(ctx: Context, text: str, stops: tuple[str, ...]) -> tuple[int, str] | None:
    """(where, which) of the stop sequence that must have ended the answer: the first one in
    ``text`` past the request's ``min_tokens`` (before it the engine looks for none)."""
    floor = _floor(ctx)
    for at, stop in _matches(text, stops):
        if floor <= 0 or _past_floor(ctx, text[: at + len(stop)], floor):
            return at, stop
    return None


def check_stop_sequences(ctx: Context) -> Iterator[Violation]:
    """stop-sequence: no stop sequence in the content, nothing after one, and ``stop`` when
    the engine says one matched."""
    stops = request_stops(ctx)
    if not stops:
        return
    text = ctx.text
    finish = ctx.finish
    named = fired_stop(ctx, stops)
    where = getattr(ctx.completion, "stop_field", None) or "the stop field"
    body = getattr(ctx.completion.request, "body", None)
    if isinstance(body, dict) and body.get("echo") is True:
        # the text starts with the prompt, which may hold a stop sequence of its own
        ctx.withhold("stop-sequence", "the request asked for echo: the text starts with the prompt")
        hit = None
    else:
        hit = _first_match(ctx, text, stops)
    if hit is not None:
        at, stop = hit
        end = at + len(stop)
        after = text[end:]
        if not after and keeps_stop(ctx):
            pass  # asked for: the engine keeps the matched stop at the end of the text
        else:
            said = f"finish_reason {finish!r}" + (
                f", {where} names {named!r}" if named is not None else ""
            )
            what = (
                f"and {len(after)} character(s) after it: the answer went on past the stop"
                if after
                else "at its end: the matched stop sequence was not trimmed"
            )
            yield ctx.violation(
                "stop-sequence",
                f"the content holds the stop sequence {stop!r} at character {at} {what} ({said})",
                stop=stop,
                stops=list(stops),
                at=at,
                after=clip(after, 80) if after else None,
                excerpt=excerpt(text, at, end),
                finish_reason=finish,
                stop_reason=named,
            )
            return
    if named is not None and finish != "stop":
        yield ctx.violation(
            "stop-sequence",
            f"{where} names the stop sequence {named!r} that matched, but finish_reason is "
            f"{finish!r}, not 'stop'",
            stop=named,
            stops=list(stops),
            finish_reason=finish,
            tail=clip(text[-80:]),
        )
