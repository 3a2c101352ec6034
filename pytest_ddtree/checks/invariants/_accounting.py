"""Checks on how much came back and how it was accounted for: empty output,
early stop, finish reason, overrun and usage."""

from __future__ import annotations

from collections.abc import Iterator

from pytest_ddtree.checks.invariants._context import (
    STOP_EOS,
    STOP_STRING,
    STOP_TEMPLATE,
    STOP_TOKEN,
    Context,
    as_int,
    clip,
    excerpt,
)
from pytest_ddtree.checks.invariants._stops import request_stops, stop_allowance, stop_within
from pytest_ddtree.checks.invariants._structured import JSON_TRIM_TOKENS, json_asked, json_done
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.wire.completion import MAX_CHARS_PER_TOKEN


def check_empty(ctx: Context) -> Iterator[Violation]:
    """empty: a 2xx with neither content nor reasoning text nor a tool call."""
    if not ctx.text.strip() and not ctx.reasoning.strip() and not ctx.tool_calls:
        yield ctx.violation(
            "empty",
            f"HTTP {ctx.completion.status_code} with empty content"
            + (" (whitespace only)" if ctx.text else ""),
            finish_reason=ctx.finish,
            completion_tokens=ctx.reported,
        )


def check_early_stop(ctx: Context) -> Iterator[Violation]:
    """early-stop: ``stop`` after fewer content tokens than the test expects."""
    if ctx.finish != "stop" or not ctx.text.strip():
        return
    if json_done(ctx):
        return  # the JSON asked for closed: that is where the answer ends
    threshold = ctx.min_tokens()
    if threshold <= 0:
        return
    n, source = ctx.content_count()
    if n >= threshold:
        return
    yield ctx.violation(
        "early-stop",
        f"finished with 'stop' after {n} token(s), expected at least {threshold}",
        content=clip(ctx.text),
        tokens=n,
        min_tokens=threshold,
        counted_by=source,
        **ctx.stop_evidence(),
    )


def check_finish(ctx: Context) -> Iterator[Violation]:
    """finish-reason, finish-lie and overrun."""
    e = ctx.expect
    finish = ctx.finish
    streamed = ctx.completion.stream is not None
    if finish is None:
        # A stream without a finish chunk is reported by stream-integrity.
        if not streamed:
            yield ctx.violation("finish-reason", "the response has no finish_reason")
    elif finish == "tool_calls" and ctx.offers_tools:
        pass  # an answer with calls ends so: the tool-call check judges it
    elif finish not in e.allowed_finish_reasons:
        yield ctx.violation(
            "finish-reason",
            f"finish_reason {finish!r} is not one of {sorted(e.allowed_finish_reasons)}",
            finish_reason=finish,
            **ctx.stop_evidence(),
        )
    limit = ctx.max_tokens
    chars = len(ctx.text) + len(ctx.reasoning)
    if limit is not None and chars > limit * MAX_CHARS_PER_TOKEN:
        # no tokenizer decodes that much from max_tokens tokens, whatever usage says
        yield ctx.violation(
            "overrun",
            f"{chars:,} characters of text: more than max_tokens={limit} tokens can decode to "
            f"(at most {MAX_CHARS_PER_TOKEN} characters a token, "
            f"{limit * MAX_CHARS_PER_TOKEN:,})",
            characters=chars,
            max_tokens=limit,
            completion_tokens=ctx.reported,
            tail=clip(ctx.text[-80:]),
        )
        return
    n, slack = ctx.tokens_for_limits()
    counted = "usage.completion_tokens" if ctx.reported is not None else ctx.count_source
    if n is not None and limit is not None:
        if finish == "length" and n < limit - slack:
            yield ctx.violation(
                "finish-reason",
                f"finish_reason 'length' but only {n} of max_tokens={limit} tokens came back",
                completion_tokens=n,
                max_tokens=limit,
                counted_by=counted,
            )
        if finish == "stop" and n >= limit + slack:
            yield from _finish_lie(ctx, n, limit, slack, counted)
        if n > limit + slack:
            who = "the server reports" if str(counted).startswith("usage") else "counted"
            yield ctx.violation(
                "overrun",
                f"{n} completion tokens ({who}) exceed max_tokens={limit}",
                completion_tokens=n,
                max_tokens=limit,
                counted_by=counted,
            )
        elif ctx.reported is not None and ctx.count_exact:
            # the server's usage may hide a whole draft block: an exact local count
            # of the text it returned must stay within max_tokens too
            local = ctx.local_total()
            local_slack = ctx.local_slack()
            if local is not None and local > limit + local_slack:
                yield ctx.violation(
                    "overrun",
                    f"{local} completion tokens counted in the text exceed max_tokens={limit} "
                    f"(the server reports {n})",
                    completion_tokens=local,
                    reported_completion_tokens=n,
                    max_tokens=limit,
                    slack=local_slack,
                    counted_by=ctx.count_source,
                )
    eos = e.eos_token
    if eos and eos in ctx.text:
        at = ctx.text.find(eos)
        after = ctx.text[at + len(eos) :]
        if after.strip():
            yield ctx.violation(
                "overrun",
                f"{len(after)} characters of text after the end-of-sequence token {eos!r}",
                excerpt=excerpt(ctx.text, at, at + len(eos)),
                after_eos=clip(after, 80),
            )


#: the ``stop_kind`` values of a stop the engine names: it fired within the limit
_NAMED_STOPS = (STOP_STRING, STOP_TOKEN, STOP_TEMPLATE, STOP_EOS)


def _finish_lie(
    ctx: Context, n: int, limit: int, slack: int, counted: str | None
) -> Iterator[Violation]:
    """finish-lie: ``stop`` although ``n`` tokens reached ``max_tokens``, judged on evidence.

    Past the limit (more than ``limit + slack`` tokens) no stop explains it: a lie (and an
    overrun). Exactly at the limit a ``stop`` is true when

    - the engine names a stop that fired on the last token: a stop string, a stop token
      (SGLang's ``matched_stop`` names the end-of-sequence too), or vLLM's null
      ``stop_reason`` with finish ``stop``, which vLLM gives for the model's own
      end-of-sequence (its length stop is finish ``length``);
    - or an exact local count shows the text at least one token short of the limit: the
      engine counted its end-of-sequence (vLLM does, in ``completion_tokens``) or a stop
      string it trimmed from the text;
    - or a stop string of the request fits within the limit (``stop_within``): the text
      ends with it (left in the text it is ``stop-sequence``, once), or it still counts
      within the limit added back to the text it was trimmed from. That is the evidence
      of an engine that names no stop (llama.cpp, OpenAI).

    It is a lie when the evidence rules all out: no stop named (vLLM's null names none,
    it only implies the end-of-sequence), an exact count of the text alone reaching
    the limit, so no end-of-sequence fits within it, and no stop string that fits. A
    sampled answer's text may re-tokenize a few tokens off the tokens generated
    (:meth:`Context.drift`), so its count must reach the limit by that slack. Without a
    named stop and without an exact count nothing rules out a counted end-of-sequence: the
    check is withheld (vLLM's null is taken as its end-of-sequence), never a lie; false
    alarms are as bad as misses.
    """
    named = ctx.stop_evidence()
    stop = getattr(ctx.completion, "stop_reason", None)
    told = ctx.stop_evidence(trust_null=False)
    shown = told.get("stop", "none named")
    local = ctx.local_total() if ctx.count_exact else None
    reach = limit + (ctx.local_slack() if ctx.sampled else 0)
    if n <= limit + slack:
        kind = named.get("stop_kind")
        if kind in _NAMED_STOPS and stop is not None:
            return  # the engine names the stop that fired on the last token
        if stop_within(ctx, reach) is not None:
            return  # a stop string of the request fits: it may have fired on the last token
        if local is None:
            if kind == STOP_EOS:
                return  # vLLM's null: the model's own end, which nothing here rules out
            ctx.withhold(
                "finish-lie",
                f"finish_reason 'stop' at max_tokens={limit} ({n} tokens, {counted}) with "
                f"stop: {shown}, and no exact count of the text: an end-of-sequence "
                "counted within the limit cannot be ruled out",
            )
            return
        if local < reach:
            return  # the text is short of the limit: a counted end-of-sequence or stop
    text_tokens = None if local is None else f"{local} (exact count)"
    stops = request_stops(ctx)
    nor = f", nor a stop string of the request ({', '.join(map(repr, stops))})" if stops else ""
    why = (
        ""
        if local is None
        else f": the text alone counts {local} tokens, so no end-of-sequence fits within it{nor}"
    )
    yield ctx.violation(
        "finish-lie",
        f"finish_reason 'stop' although {n} tokens reached max_tokens={limit}{why}",
        completion_tokens=n,
        max_tokens=limit,
        counted_by=counted,
        text_tokens=text_tokens,
        text_counted_by=None if local is None else ctx.count_source,
        tail=clip(ctx.text[-80:]),
        **{**told, "stop": shown},
    )


def overrun_after_eos(ctx: Context) -> bool:
    """Whether the content continues past the end-of-sequence token."""
    eos = ctx.expect.eos_token
    if not eos or eos not in ctx.text:
        return False
    return bool(ctx.text[ctx.text.find(eos) + len(eos) :].strip())


def check_usage(ctx: Context) -> Iterator[Violation]:
    """usage-mismatch: the usage block against itself and against the text."""
    usage = ctx.completion.usage
    if usage is None:
        return
    e = ctx.expect
    prompt = as_int(usage.prompt_tokens)
    completion = as_int(usage.completion_tokens)
    total = as_int(usage.total_tokens)
    reasoning = as_int(usage.reasoning_tokens)
    if (
        prompt is not None
        and completion is not None
        and total is not None
        and total != prompt + completion
    ):
        yield ctx.violation(
            "usage-mismatch",
            f"total_tokens {total} != prompt_tokens {prompt} + completion_tokens {completion}",
            total_tokens=total,
            prompt_tokens=prompt,
            completion_tokens=completion,
        )
    if reasoning is not None and completion is not None and reasoning > completion:
        yield ctx.violation(
            "usage-mismatch",
            f"reasoning_tokens {reasoning} > completion_tokens {completion}",
            reasoning_tokens=reasoning,
            completion_tokens=completion,
        )
    for name, value in (
        ("prompt_tokens", prompt),
        ("completion_tokens", completion),
        ("total_tokens", total),
        ("reasoning_tokens", reasoning),
    ):
        if value is not None and value < 0:
            yield ctx.violation("usage-mismatch", f"{name} is negative ({value})")
    if completion is None:
        return
    local = ctx.local_total()
    if local is None:
        return
    has_reasoning = bool(ctx.reasoning)
    if ctx.count_exact:
        # think tags and the newlines around them are counted by the server but
        # are not part of reasoning_content ("<think>\n" ... "\n</think>\n\n": 6 tokens
        # on the reference tokenizer, 5 on Qwen-style vocabularies)
        allowed = ctx.drift(max(completion, local))
        allowed += 6 if has_reasoning else 0
        if completion > local and json_asked(ctx):
            # a server may trim what it generated around the JSON asked for: llama.cpp
            # returns bare JSON where SmolLM2 wrote "```json\n" ... "\n```" (6 tokens with
            # the end-of-sequence, all in completion_tokens)
            allowed += JSON_TRIM_TOKENS
        # an engine may count the matched stop sequence it trimmed from the text (vLLM does)
        stop_tokens, stop = stop_allowance(ctx)
        off = local - completion > allowed or completion - local > allowed + stop_tokens
        bound = f"±{allowed:.0f}" + (
            f", plus {stop_tokens} for the stop {stop!r}" if stop is not None else ""
        )
        if off and completion > local and stop is not None:
            past = completion - local - stop_tokens
            bound += f"; {past} token(s) counted past the stop"
    else:
        ratio = e.approx_usage_ratio
        off = (
            completion > local * ratio + e.usage_tolerance_abs
            or local > completion * ratio + e.usage_tolerance_abs
        )
        bound = f"within a factor {ratio:g}"
    if off:
        what = "content + reasoning" if has_reasoning else "content"
        yield ctx.violation(
            "usage-mismatch",
            f"usage.completion_tokens {completion} but the {what} counts {local} "
            f"tokens (expected {bound})",
            completion_tokens=completion,
            local_count=local,
            counted_by=ctx.count_source,
            content=clip(ctx.text, 80),
        )
