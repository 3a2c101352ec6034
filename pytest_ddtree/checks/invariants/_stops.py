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


def _first_match(text: str, stops: tuple[str, ...]) -> tuple[int, str] | None:
    """(where, which) of the stop sequence that matches first in ``text`` (the longest of
    those starting at the same character)."""
    best: tuple[int, str] | None = None
    for s in stops:
        at = text.find(s)
        if at >= 0 and (best is None or at < best[0] or (at == best[0] and len(s) > len(best[1]))):
            best = (at, s)
    return best


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
    hit = _first_match(text, stops)
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
