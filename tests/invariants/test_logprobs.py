"""The ``logprobs`` check, rule by rule, each with the healthy case beside it."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from pytest_ddtree.checks.invariants import check
from pytest_ddtree.wire.completion import Completion, Usage
from pytest_ddtree.wire.dialects import logprobs_of

from .factories import assembled, chat_body, chunk, completion, request, usage_chunk

ASKED = {"model": "m", "max_tokens": 256, "logprobs": True, "top_logprobs": 2}


def _entry(token: str, lp: Any, top: list[tuple[str, float]] | None = None) -> dict[str, Any]:
    alts = top if top is not None else [(token, lp), ("~", -3.0)]
    return {
        "token": token,
        "logprob": lp,
        "bytes": list(token.encode()),
        "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in alts],
    }


def answer(
    values: list[Any],
    *,
    tokens: int | None = None,
    finish: str = "stop",
    body: dict[str, Any] | None = None,
    api: str = "chat",
    top: list[tuple[str, float]] | None = None,
) -> Completion:
    """An answer of ``len(values)`` one-word tokens whose log-probabilities are ``values``,
    with ``tokens`` (default: one per value) in usage.completion_tokens."""
    words = [f" w{i}" for i in range(len(values))]
    text = "".join(words)
    entries = [_entry(w, v, top) for w, v in zip(words, values, strict=True)]
    n = len(values) if tokens is None else tokens
    raw = chat_body(
        text,
        finish=finish,
        usage={"prompt_tokens": 20, "completion_tokens": n, "total_tokens": 20 + n},
    )
    choice = raw["choices"][0]
    choice["logprobs"] = {"content": entries}
    base = completion(text, finish=finish, tokens=n, raw=raw, stats=None, max_tokens=256)
    sent = dict(ASKED if body is None else body)
    return dataclasses.replace(
        base,
        request=dataclasses.replace(request(max_tokens=256, api=api), body=sent),
        usage=Usage(20, n, 20 + n),
        logprobs=tuple(logprobs_of(choice) or ()),
    )


def streamed(
    values: list[Any],
    *,
    tokens: int | None = None,
    body: dict[str, Any] | None = None,
    top: list[tuple[str, float]] | None = None,
    listed: int | None = None,
) -> Completion:
    """``answer``'s tokens streamed one a chunk, each chunk with its token's entry (only the
    first ``listed`` chunks carry one: default every chunk), assembled by the client's own
    stream decoder; ``tokens`` in the closing usage chunk."""
    words = [f" w{i}" for i in range(len(values))]
    chunks = [chunk({"role": "assistant"})]
    for i, (w, v) in enumerate(zip(words, values, strict=True)):
        carries = listed is None or i < listed
        extra = {"logprobs": {"content": [_entry(w, v, top)]}} if carries else {}
        chunks.append(chunk({"content": w}, **extra))
    chunks += [chunk({}, finish="stop"), usage_chunk(len(values) if tokens is None else tokens)]
    return assembled(chunks, dict(ASKED if body is None else body))


def codes(c: Completion) -> list[str]:
    return [v.code for v in check(c, min_tokens=0)]


def messages(c: Completion) -> list[str]:
    return [v.message for v in check(c, min_tokens=0) if v.code == "logprobs"]


HEALTHY = [-0.2, -1.5, -0.01, -2.7] * 8


def test_healthy_answer_passes() -> None:
    assert codes(answer(HEALTHY)) == []


def test_a_healthy_streamed_answer_passes() -> None:
    c = streamed(HEALTHY)
    assert c.stream is not None and c.logprobs is not None and len(c.logprobs) == len(HEALTHY)
    assert codes(c) == []


def test_a_streamed_answer_listing_one_entry_for_its_tokens_fails() -> None:
    # llama.cpp with a draft model streams one entry for a whole answer
    assert messages(streamed(HEALTHY, listed=1)) == [
        "1 log-probability entry for 32 generated tokens (or one less, an end-of-sequence "
        "token counted)"
    ]


def test_a_streamed_answer_without_entries_fails() -> None:
    (msg,) = messages(streamed(HEALTHY, listed=0))
    assert msg.startswith("log-probabilities asked for (logprobs=true, top_logprobs=2) but")


def test_a_streamed_value_above_zero_is_judged_as_sent() -> None:
    values = list(HEALTHY)
    values[9] = 0.5
    (msg,) = messages(streamed(values))
    assert msg.startswith("1 log-probability not a finite number at most 0; the first, at token 9")


def test_a_streamed_choice_below_the_best_alternative_fails_at_temperature_zero() -> None:
    off = streamed([-1.7] * 24, body=GREEDY, top=[(" x", -0.2), ("~", -3.0)])
    (msg,) = messages(off)
    assert msg.startswith("at temperature 0 the chosen token is not the best alternative")


def test_not_asked_is_not_judged() -> None:
    plain = dataclasses.replace(answer(HEALTHY), logprobs=None)
    assert codes(dataclasses.replace(plain, request=request(max_tokens=256))) == []


def test_missing_when_asked_fails() -> None:
    missing = dataclasses.replace(answer(HEALTHY), logprobs=None)
    assert messages(missing) == [
        "log-probabilities asked for (logprobs=true, top_logprobs=2) but the answer carries "
        "none (choices[0].logprobs)"
    ]


def test_text_completions_ask_with_a_count() -> None:
    body = {"model": "m", "prompt": "x", "logprobs": 0}
    missing = dataclasses.replace(answer(HEALTHY, body=body, api="completions"), logprobs=None)
    assert len(messages(missing)) == 1
    chat_false = {**ASKED, "logprobs": False}
    assert codes(dataclasses.replace(answer(HEALTHY, body=chat_false), logprobs=None)) == []


def test_one_entry_per_generated_token() -> None:
    assert codes(answer(HEALTHY, tokens=len(HEALTHY) + 1)) == []  # an end-of-sequence counted
    assert messages(answer(HEALTHY, tokens=len(HEALTHY) + 2)) == [
        "32 log-probability entries for 34 generated tokens (or one less, an end-of-sequence "
        "token counted)"
    ]
    # cut by max_tokens: no end-of-sequence was generated, so none may be missing
    cut = answer(HEALTHY, tokens=len(HEALTHY) + 1, finish="length")
    assert messages(cut) == ["32 log-probability entries for 33 generated tokens"]


def test_a_stop_string_leaves_the_count_unjudged() -> None:
    c = answer(HEALTHY, tokens=len(HEALTHY) + 3, body={**ASKED, "stop": ["\n\n"]})
    found = check(c, min_tokens=0)
    assert [v.code for v in found] == []
    assert any("stop string" in w.reason for w in found.withheld)


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (0.5, "0.5 is above 0 (a probability above 1)"),
        (math.nan, "nan is not finite"),
        (None, "None is not a number"),
        (-9999.0, "-9999.0 is minus infinity"),
    ],
)
def test_values_are_finite_and_at_most_zero(bad: Any, why: str) -> None:
    values = list(HEALTHY)
    values[5] = bad
    (msg,) = messages(answer(values))
    assert msg.startswith("1 log-probability not a finite number at most 0; the first, at token 5")
    assert why in msg


def test_rounding_above_zero_is_no_lie() -> None:
    values = list(HEALTHY)
    values[3] = 1e-7  # float32 rounding of a certain token
    assert codes(answer(values)) == []


def test_all_zero_over_a_long_answer_fails() -> None:
    zeros = answer([0.0] * 32, top=[(" w", 0.0), ("~", 0.0)])
    (msg,) = messages(zeros)
    assert msg.startswith("all 32 log-probabilities are 0.0 (every token certain)")
    # no alternatives listed: nothing shows the model was that sure
    assert codes(answer([0.0] * 32, top=[])) == ["logprobs"]


def test_all_zero_is_judged_from_sixteen_tokens_on() -> None:
    assert codes(answer([0.0] * 16, top=[])) == ["logprobs"]
    assert codes(answer([0.0] * 15, top=[])) == []


def test_certain_tokens_are_no_false_alarm() -> None:
    # a few certain tokens among others
    some = list(HEALTHY)
    some[:6] = [0.0] * 6
    assert codes(answer(some)) == []
    # a short answer all certain
    assert codes(answer([0.0] * 8, top=[])) == []
    # a long answer all certain, every alternative listed far below: the model was sure
    assert codes(answer([0.0] * 32, top=[("~", -23.5), ("!", -25.0)])) == []


GREEDY = {**ASKED, "temperature": 0}


def test_at_temperature_zero_the_chosen_token_is_the_best_alternative() -> None:
    # the chosen token listed first (the default alternatives): greedy, no finding
    assert codes(answer(HEALTHY, body=GREEDY)) == []
    # a value from another distribution: the token chosen is not the one the list prefers
    off = answer([-0.2, -1.7, -0.3] * 8, body=GREEDY, top=[(" x", -0.6), ("~", -3.0)])
    (v,) = [v for v in check(off, min_tokens=0) if v.code == "logprobs"]
    assert v.message == (
        "at temperature 0 the chosen token is not the best alternative (8 of 24 positions): "
        "at token 1 the server chose ' w1' at -1.7 and lists ' x' at -0.6, 1.1 nats likelier "
        "(near-tie margin 0.5); greedy decoding takes the argmax, so the log-probabilities "
        "are not those of the distribution the token was chosen from"
    )
    assert v.evidence["position"] == 1 and v.evidence["gap_nats"] == pytest.approx(1.1)
    assert v.evidence["chosen"] == "' w1' -1.7" and v.evidence["best"] == "' x' -0.6"
    assert v.evidence["positions_off"] == 8 and v.evidence["positions_judged"] == 24


def test_a_near_tie_at_temperature_zero_is_numerics() -> None:
    # the chosen token up to the near-tie margin below the best listed: no finding
    tied = answer([-0.9] * 24, body=GREEDY, top=[(" x", -0.45), ("~", -3.0)])
    assert codes(tied) == []
    assert codes(answer([-0.96] * 24, body=GREEDY, top=[(" x", -0.45), ("~", -3.0)])) == [
        "logprobs"
    ]


def test_a_gap_written_exactly_at_the_near_tie_margin_is_within_it() -> None:
    # -0.6 - -1.1 is 0.5000000000000001 in binary floating point: written 0.5 apart, the
    # chosen token is at the margin, not beyond it
    assert -0.6 - -1.1 > 0.5 and -1.7 - -2.2 > 0.5
    assert codes(answer([-1.1] * 24, body=GREEDY, top=[(" x", -0.6), ("~", -3.0)])) == []
    assert codes(answer([-2.2] * 24, body=GREEDY, top=[(" x", -1.7), ("~", -3.0)])) == []


def test_a_gap_past_the_near_tie_margin_is_shown_past_it() -> None:
    # a hair beyond the margin is flagged, and the message shows the hair
    off = answer([-1.2] * 24, body=GREEDY, top=[(" x", -0.699999), ("~", -3.0)])
    (msg,) = messages(off)
    assert "0.500001 nats likelier (near-tie margin 0.5)" in msg


def test_the_best_alternative_is_judged_at_temperature_zero_only() -> None:
    values = [-1.7] * 24
    top = [(" x", -0.2), ("~", -3.0)]
    assert codes(answer(values, body=GREEDY, top=top)) == ["logprobs"]
    assert codes(answer(values, body={**ASKED, "temperature": 0.7}, top=top)) == []
    assert codes(answer(values, body=ASKED, top=top)) == []  # the server's default: sampled


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"presence_penalty": 0.5}, "presence_penalty=0.5"),
        ({"frequency_penalty": 1}, "frequency_penalty=1"),
        ({"repetition_penalty": 1.1}, "repetition_penalty=1.1"),
        ({"repeat_penalty": 1.3}, "repeat_penalty=1.3"),
        ({"logit_bias": {"42": -100}}, "logit_bias={'42': -100}"),
        ({"min_tokens": 16}, "min_tokens=16"),
        ({"ignore_eos": True}, "ignore_eos=True"),
        ({"response_format": {"type": "json_object"}}, "response_format 'json_object'"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools offered"),
        ({"guided_regex": "[a-z]+"}, "guided_regex='[a-z]+'"),
        ({"xtc_probability": 0.5}, "xtc_probability=0.5"),
    ],
)
def test_a_request_that_steers_the_choice_withholds_the_best_alternative(
    fields: dict[str, Any], named: str
) -> None:
    found = check(
        answer([-1.7] * 24, body={**GREEDY, **fields}, top=[(" x", -0.2), ("~", -3.0)]),
        min_tokens=0,
    )
    assert [v.code for v in found if v.code == "logprobs"] == []
    (line,) = [w for w in found.withheld if w.code == "logprobs"]
    assert named in line.reason and "moves the choice away from the model's argmax" in line.reason


def test_neutral_sampling_fields_leave_the_best_alternative_judged() -> None:
    neutral = {
        "presence_penalty": 0,
        "frequency_penalty": 0.0,
        "repetition_penalty": 1.0,
        "logit_bias": {},
        "min_tokens": 0,
        "response_format": {"type": "text"},
        "top_p": 0.9,
        "top_k": 20,
        "seed": 7,
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "tool_choice": "none",
    }
    top = [(" x", -0.2), ("~", -3.0)]
    assert codes(answer([-1.7] * 24, body={**GREEDY, **neutral}, top=top)) == ["logprobs"]


def test_no_alternatives_listed_withholds_the_best_alternative() -> None:
    found = check(answer(HEALTHY, body={**GREEDY, "top_logprobs": 0}, top=[]), min_tokens=0)
    assert [v.code for v in found] == []
    assert any("no alternatives listed" in w.reason for w in found.withheld)
