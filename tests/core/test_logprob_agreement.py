"""The speculative side's log-probabilities against the target-only side's, where the
losslessness comparison already holds both answers (no extra round trip)."""

from __future__ import annotations

import dataclasses

import pytest
from invariants.factories import completion

from pytest_ddtree.checks.lossless import (
    LOGPROB_TOLERANCE,
    judge_lossless,
    logprob_agreement,
    logprob_violations,
    lossless_footer,
    lossless_header,
)
from pytest_ddtree.core.settings import Lossless
from pytest_ddtree.wire.completion import Completion, TokenLogprob

WORDS = [" a", " b", " c", " d"]


ASKED = {"model": "m", "max_tokens": 256, "logprobs": True, "top_logprobs": 2}


def _answer(
    values: list[float], words: list[str] = WORDS, *, entries: int | None = None
) -> Completion:
    """An answer of ``words`` that asked for log-probabilities and lists the first
    ``entries`` of them (default: every one), with ``len(words)`` tokens in its usage."""
    listed = tuple(TokenLogprob(w, v, w.encode()) for w, v in zip(words, values, strict=True))
    base = completion("".join(words), tokens=len(words))
    asked = dataclasses.replace(base.request, body=ASKED)
    return dataclasses.replace(base, request=asked, logprobs=listed[:entries])


def test_agreement_stops_at_the_first_token_that_differs() -> None:
    target = _answer([-0.1, -0.2, -0.3, -0.4])
    spec = _answer([-0.1, -0.25, -9.0, -9.0], [" a", " b", " x", " d"])
    agree = logprob_agreement(target, spec)
    assert agree is not None and agree.positions == 2
    assert agree.position == 1 and agree.delta == pytest.approx(0.05)
    assert logprob_agreement(target, dataclasses.replace(spec, logprobs=None)) is None


def test_a_gap_past_the_tolerance_is_a_logprobs_violation() -> None:
    target = _answer([-0.1, -2.2, -0.3, -0.4])
    near = _answer([-0.1, -2.2 - LOGPROB_TOLERANCE / 2, -0.3, -0.4])
    zero = _answer([0.0, 0.0, 0.0, 0.0])
    result = judge_lossless(target, {16: near, 256: zero}, Lossless())
    assert result.ok is False and list(result.logprob_gaps) == [256]
    (v,) = logprob_violations(result)
    assert v.code == "logprobs"
    assert v.message.startswith(
        "tree_budget 256's log-probabilities differ from the target-only baseline's by 2.2 "
        "nats at token 1 (' b'), where both chose that token"
    )


def test_values_written_exactly_the_tolerance_apart_agree() -> None:
    # -0.6 - -1.1 is 0.5000000000000001 in binary floating point: at the tolerance, not past
    assert abs(-0.6 - -1.1) > LOGPROB_TOLERANCE
    target = _answer([-0.1, -1.1, -0.3, -0.4])
    spec = _answer([-0.1, -0.6, -0.3, -0.4])
    assert judge_lossless(target, {16: spec}, Lossless()).ok


TWELVE = [f" w{i}" for i in range(12)]
VALUES = [-0.1 * (i + 1) for i in range(12)]


def test_a_budget_listing_fewer_entries_than_tokens_is_not_compared_but_a_logprobs_fault() -> None:
    # llama.cpp with a draft model streams one entry for a whole answer
    target = _answer(VALUES, TWELVE)
    short = _answer(VALUES, TWELVE, entries=1)
    result = judge_lossless(target, {16: target, 64: short}, Lossless())
    assert result.ok is False and list(result.logprob_faults) == [64]
    assert result.logprob_gaps == {} and result.divergences == {}
    (v,) = logprob_violations(result)
    assert v.code == "logprobs"
    assert v.message == (
        "tree_budget 64's log-probabilities not compared with the target-only baseline's: its "
        "answer has 1 log-probability entry for 12 generated tokens (or one less, an "
        "end-of-sequence token counted)"
    )
    assert v.evidence == {
        "this budget": "1 log-probability entry for 12 tokens (usage.completion_tokens)",
        "reference": "12 log-probability entries for 12 tokens (usage.completion_tokens)",
    }
    assert lossless_header(result) == (
        "log-probabilities not one per token: 1 of 2 budget(s) not compared with the "
        "target-only baseline's"
    )
    footer = lossless_footer(result, has_baseline=True)
    assert footer.startswith("diagnosis: serving stack - the server's answer does not list one")


def test_a_budget_listing_none_when_asked_is_a_logprobs_fault() -> None:
    target = _answer(VALUES, TWELVE)
    none = dataclasses.replace(target, logprobs=None)
    result = judge_lossless(target, {64: none}, Lossless())
    assert result.logprob_faults[64].side == "answer"
    assert "but the answer carries none" in result.logprob_faults[64].reason


def test_a_reference_listing_fewer_entries_compares_nothing_and_blames_no_one() -> None:
    short = _answer(VALUES, TWELVE, entries=3)
    result = judge_lossless(short, {64: _answer(VALUES, TWELVE)}, Lossless())
    (v,) = logprob_violations(result)
    assert v.code == "not-comparable"
    assert v.message.startswith(
        "tree_budget 64's log-probabilities not compared with the target-only baseline's: the "
        "target-only baseline's has 3 log-probability entries for 12 generated tokens"
    )
    assert lossless_footer(result, has_baseline=True).startswith("diagnosis: undetermined")


def test_without_a_count_the_two_answers_of_one_text_must_list_as_many() -> None:
    # no usage (a stream without include_usage): the other answer of the same text counts
    target = dataclasses.replace(_answer(VALUES, TWELVE), usage=None)
    short = dataclasses.replace(_answer(VALUES, TWELVE, entries=1), usage=None)
    result = judge_lossless(target, {64: short}, Lossless())
    assert result.logprob_faults[64].reason == (
        "1 log-probability entry where the reference's has 12, for the same text"
    )
    # an end-of-sequence entry more or less is no fault, and another text is not compared
    eos = dataclasses.replace(_answer(VALUES, TWELVE, entries=11), usage=None)
    assert judge_lossless(target, {64: eos}, Lossless()).ok
    other = dataclasses.replace(_answer(VALUES, [*TWELVE[:-1], " x"], entries=1), usage=None)
    assert judge_lossless(target, {64: other}, Lossless()).logprob_faults == {}


FIXTURE = """
def test_logprobs_agree(ddtree_lossless):
    ddtree_lossless("Write a detailed essay about harbours and ships.", max_tokens=48,
                    budgets=[64], logprobs=True, top_logprobs=2)
"""


def test_the_lossless_fixture_fails_apart_logprobs_on_speculation(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(FIXTURE)
    args = (
        "--ddtree-reference-latency=off",
        "--ddtree-budgets=64",
        "--ddtree-report=rep",
        "-p",
        "no:randomly",
    )
    # the healthy server passes: the bundled suite's test_logprobs (tests/example_suite)
    result = pytester.runpytest(*args, "--ddtree-reference-fault=logprobs-zero")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*log-probabilities apart: 1 of 1 budget(s) give the same tokens other "
            "log-probabilities than the target-only baseline",
            "*[[]logprobs[]] tree_budget 64's log-probabilities differ from the target-only "
            "baseline's by * nats at token *",
            "*diagnosis: speculative decoding - the text is the target's*",
        ]
    )
