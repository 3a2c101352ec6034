"""The log-probabilities an answer carries when its request asked for them.

Asked for means chat completions' ``logprobs: true`` (with ``top_logprobs`` alternatives)
or text completions' ``logprobs: N``. Then, over the content's tokens:

* they are there (SGLang #10660: missing with lookahead decoding);
* one entry per generated token, or per token less the end-of-sequence token the server
  counted, judged only against the server's own count (``usage.completion_tokens``) and
  only when no stop string ended the answer (a stop string's tokens may or may not be
  listed) and no reasoning shares the count;
* every value is a finite number at most 0, and a long answer is not all 0.0 while the
  alternatives listed beside it say the tokens were not certain (llama.cpp #27972,
  vLLM #17876: every log-probability 0.0 under speculation).
* at temperature 0, where alternatives are listed, the chosen token is the best of them,
  or within the near-tie margin of it (``DEFAULT_NEAR_TIE``, the margin losslessness and
  the diagnosis use): greedy decoding takes the argmax, and a log-probability from another
  distribution than the one the token was chosen from (the drafter's, a stale or shifted
  position's) says otherwise. Withheld when the request moves the choice away from the
  model's argmax: penalties, a logit bias, a grammar (``response_format``, tools, guided
  decoding), a suppressed end-of-sequence (``min_tokens``, ``ignore_eos``), samplers that
  may drop the best token (XTC, typical, Mirostat), beam search.

The speculative server's log-probabilities against the target-only server's, position by
position, are compared where the two answers are: ``checks.lossless``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pytest_ddtree.checks.invariants._context import (
    STOP_STRING,
    Context,
    as_float,
    as_int,
    clip,
)
from pytest_ddtree.core.expectation import DEFAULT_EXPECTATION
from pytest_ddtree.core.settings import DEFAULT_NEAR_TIE, nats, nats_text
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.wire.completion import Completion, TokenLogprob

CODE = "logprobs"

#: an all-0.0 answer shorter than this may be a model that was sure of a few tokens
ALL_ZERO_MIN = 16
#: a listed alternative likelier than this (nats) beside a chosen token at 0.0 says the
#: choice was not certain: a token at probability 1 leaves every other token below e**-16
#: (float32's rounding of 1), so an alternative at -10 or above contradicts it
CERTAIN_BELOW = -10.0
#: positive log-probabilities smaller than this are rounding, not a lie
POSITIVE_SLACK = 1e-4
#: below this a value is an engine's spelling of minus infinity (vLLM's -9999.0)
MINUS_INFINITY = -9000.0

#: how far (nats) below the best listed alternative a chosen token may lie at temperature 0:
#: the near-tie margin (numerics: a batched or speculative pass may compute the logits in
#: another order, and the chosen token and the reported values come from different passes)
GREEDY_MARGIN = DEFAULT_NEAR_TIE

#: request fields that move a temperature-0 choice away from the model's argmax, each with
#: the values that leave it alone (vLLM, SGLang, llama.cpp and OpenAI names)
_STEERING: dict[str, tuple[Any, ...]] = {
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "repetition_penalty": (None, 1),
    "repeat_penalty": (None, 1),
    "dry_multiplier": (None, 0),
    "logit_bias": (None, {}, []),
    "min_tokens": (None, 0),
    "ignore_eos": (None, False),
    "bad_words": (None, []),
    "allowed_token_ids": (None, []),
    "guided_json": (None,),
    "guided_regex": (None,),
    "guided_choice": (None, []),
    "guided_grammar": (None,),
    "structured_outputs": (None, {}),
    "grammar": (None, ""),
    "json_schema": (None, {}),
    "regex": (None, ""),
    "ebnf": (None, ""),
    "use_beam_search": (None, False),
    "xtc_probability": (None, 0),
    "typical_p": (None, 1),
    "mirostat": (None, 0),
}


def asked(body: Mapping[str, Any], api: str) -> tuple[bool, int]:
    """Whether the request asked for log-probabilities, and how many alternatives."""
    lp = body.get("logprobs")
    if api == "completions":
        n = as_int(lp)
        return (n is not None and n >= 0), max(n or 0, 0)
    if lp is not True:
        return False, 0
    top = as_int(body.get("top_logprobs"))
    return True, max(top or 0, 0)


def _asked_text(body: Mapping[str, Any], api: str) -> str:
    if api == "completions":
        return f"logprobs={body.get('logprobs')!r}"
    return f"logprobs=true, top_logprobs={body.get('top_logprobs', 0)!r}"


def _raw_values(raw: Any) -> Iterator[tuple[int, Any]]:
    """(position, value) of every chosen token's log-probability the kept response objects
    state as sent (the parsed entries clamp and replace what this rule judges)."""
    objects: Sequence[Any] = raw if isinstance(raw, list) else [raw]
    at = 0
    for obj in objects:
        choices = obj.get("choices") if isinstance(obj, Mapping) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            continue
        lp = choices[0].get("logprobs")
        if not isinstance(lp, Mapping):
            continue
        content = lp.get("content")
        if isinstance(content, list):
            values = [
                item.get("logprob") if isinstance(item, Mapping) else None for item in content
            ]
        elif isinstance(lp.get("token_logprobs"), list):
            values = list(lp["token_logprobs"])
        else:
            continue
        for value in values:
            yield at, value
            at += 1


def _bad_value(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{value!r} is not a number"
    f = float(value)
    if math.isnan(f) or math.isinf(f):
        return f"{value!r} is not finite"
    if f > POSITIVE_SLACK:
        return f"{value!r} is above 0 (a probability above 1)"
    if f <= MINUS_INFINITY:
        return f"{value!r} is minus infinity: the server gives its own token no probability"
    return None


def _wanted(ctx: Context) -> tuple[Mapping[str, Any], str] | None:
    """(the request body, what it asked for) when it asked for log-probabilities of an answer
    with content; None when there is nothing to judge."""
    req = ctx.completion.request
    body = getattr(req, "body", None)
    if not isinstance(body, Mapping):
        return None
    api = str(getattr(req, "api", "chat"))
    wanted, _top = asked(body, api)
    if not wanted or not ctx.text:
        return None
    return body, _asked_text(body, api)


def check_logprobs(ctx: Context) -> Iterator[Violation]:
    """logprobs: present when asked, one per token, finite and at most 0, not all zero."""
    wanted = _wanted(ctx)
    if wanted is None:
        return
    body, what = wanted
    entries = ctx.completion.logprobs
    if not entries:
        yield ctx.violation(CODE, _none(what), content=clip(ctx.text))
        return
    yield from _count(ctx, entries, what)
    bad = list(_values(ctx, entries))
    yield from bad
    if not bad:
        yield from _greedy(ctx, entries, body)


def _none(what: str) -> str:
    return f"log-probabilities asked for ({what}) but the answer carries none (choices[0].logprobs)"


def count_fault(completion: Completion) -> str | None:
    """Why ``completion``'s log-probabilities, asked for, are not one per token (none at all,
    or a count the server's own ``usage.completion_tokens`` contradicts), by the rule of
    ``check_logprobs``; None when they are, or when the count cannot be judged."""
    ctx = Context(completion, DEFAULT_EXPECTATION, None)
    wanted = _wanted(ctx)
    if wanted is None:
        return None
    entries = completion.logprobs
    if not entries:
        return _none(wanted[1])
    found = next(_count(ctx, entries, wanted[1]), None)
    return None if found is None else found.message


def _count(ctx: Context, entries: Sequence[TokenLogprob], what: str) -> Iterator[Violation]:
    n = len(entries)
    reported = ctx.reported
    if ctx.reasoning:
        ctx.withhold(CODE, "entries per token: reasoning shares usage.completion_tokens")
        return
    if reported is None:
        ctx.withhold(CODE, "entries per token: no usage.completion_tokens to count against")
        return
    if ctx.stop_evidence().get("stop_kind") == STOP_STRING or (
        ctx.finish == "stop" and ctx.completion.request.body.get("stop")
    ):
        ctx.withhold(CODE, "entries per token: a stop string's tokens may or may not be listed")
        return
    allowed = {reported, reported - 1} if ctx.finish == "stop" else {reported}
    if n in allowed:
        return
    eos = " (or one less, an end-of-sequence token counted)" if ctx.finish == "stop" else ""
    entry = "entry" if n == 1 else "entries"
    yield ctx.violation(
        CODE,
        f"{n} log-probability {entry} for {reported} generated tokens{eos}",
        asked=what,
        entries=n,
        completion_tokens=reported,
        finish_reason=ctx.finish,
    )


def _values(ctx: Context, entries: Sequence[TokenLogprob]) -> Iterator[Violation]:
    bad = [(i, why) for i, v in _raw_values(ctx.completion.raw) if (why := _bad_value(v))]
    if bad:
        i, why = bad[0]
        token = entries[i].token if i < len(entries) else None
        yield ctx.violation(
            CODE,
            f"{len(bad)} log-probabilit{'y' if len(bad) == 1 else 'ies'} not a finite "
            f"number at most 0; the first, at token {i}: {why}",
            token=repr(token) if token is not None else None,
        )
        return
    n = len(entries)
    if n < ALL_ZERO_MIN or any(e.logprob != 0.0 for e in entries):
        return
    listed = [e for e in entries if e.top]
    doubt = [
        (i, alt)
        for i, e in enumerate(entries)
        for alt in e.top
        if alt[2] != e.data and alt[1] >= CERTAIN_BELOW
    ]
    if listed and not doubt:
        return  # every listed alternative agrees: the model was sure of every token
    why = (
        f"at token {doubt[0][0]} the server lists {doubt[0][1][0]!r} at {doubt[0][1][1]:.4g} "
        "beside it, which a certain token leaves no room for"
        if doubt
        else "no alternatives listed to show the model was that sure"
    )
    yield ctx.violation(
        CODE,
        f"all {n} log-probabilities are 0.0 (every token certain): {why}",
        entries=n,
    )


def _steered(body: Mapping[str, Any]) -> str | None:
    """What in the request moves a temperature-0 choice away from the model's argmax."""
    for name, neutral in _STEERING.items():
        value = body.get(name)
        if not any(value == n for n in neutral):
            return f"{name}={clip(repr(value), 60)}"
    fmt = body.get("response_format")
    if fmt is not None and not (isinstance(fmt, Mapping) and fmt.get("type") == "text"):
        kind = fmt.get("type") if isinstance(fmt, Mapping) else fmt
        return f"response_format {kind!r} (a grammar constrains the choice)"
    tools = body.get("tools")
    if isinstance(tools, list) and tools and body.get("tool_choice") != "none":
        return "tools offered (a tool-call grammar may constrain the choice)"
    return None


def _greedy(
    ctx: Context, entries: Sequence[TokenLogprob], body: Mapping[str, Any]
) -> Iterator[Violation]:
    """At temperature 0 the chosen token is the best listed alternative (near-tie margin)."""
    if as_float(body.get("temperature")) != 0.0:
        return
    listed = [(i, e) for i, e in enumerate(entries) if e.top]
    if not listed:
        ctx.withhold(CODE, "chosen token against the best alternative: no alternatives listed")
        return
    steered = _steered(body)
    if steered is not None:
        ctx.withhold(
            CODE,
            f"chosen token against the best alternative at temperature 0: the request sets "
            f"{steered}, which moves the choice away from the model's argmax",
        )
        return
    off = []
    margin = f"near-tie margin {GREEDY_MARGIN:g}"
    for i, e in listed:
        best = max(e.top, key=lambda alt: alt[1])
        gap = nats(best[1] - e.logprob)
        if gap > GREEDY_MARGIN:
            off.append((i, e, best, gap))
    if not off:
        return
    i, e, best, gap = off[0]
    many = f" ({len(off)} of {len(listed)} positions)" if len(off) > 1 else ""
    yield ctx.violation(
        CODE,
        f"at temperature 0 the chosen token is not the best alternative{many}: at token {i} "
        f"the server chose {e.token!r} at {e.logprob:.4g} and lists {best[0]!r} at "
        f"{best[1]:.4g}, {nats_text(gap, GREEDY_MARGIN)} nats likelier ({margin}); greedy "
        "decoding takes the argmax, so the log-probabilities are not those of the "
        "distribution the token was chosen from",
        position=i,
        chosen=f"{e.token!r} {e.logprob:.6g}",
        best=f"{best[0]!r} {best[1]:.6g}",
        gap_nats=round(gap, 6),
        positions_off=len(off),
        positions_judged=len(listed),
    )
