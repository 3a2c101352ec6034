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
)
from pytest_ddtree.core.settings import Lossless
from pytest_ddtree.wire.completion import Completion, TokenLogprob

WORDS = [" a", " b", " c", " d"]


def _answer(values: list[float], words: list[str] = WORDS) -> Completion:
    entries = tuple(TokenLogprob(w, v, w.encode()) for w, v in zip(words, values, strict=True))
    return dataclasses.replace(completion("".join(words), tokens=len(words)), logprobs=entries)


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
