"""The streamed and the plain answer's token counts: compared only from one source."""

from __future__ import annotations

from pytest_ddtree.checks.counts import check_counts, counts_not_comparable
from pytest_ddtree.wire.completion import Completion
from tests.invariants.factories import completion, replace

TEXT = "Rivers carry water from the hills down to the sea."


def _usage(tokens: int, *, stream: bool, text: str = TEXT) -> Completion:
    return completion(text, tokens=tokens, stream=stream, token_count_source="usage")


def _local(tokens: int, *, stream: bool, text: str = TEXT) -> Completion:
    return completion(
        text, tokens=tokens, stream=stream, usage=None, local=tokens, token_count_source="tok"
    )


def test_a_stream_counted_locally_is_not_compared_with_the_servers_plain_count() -> None:
    # a stream without usage (stream_options ignored): the local count leaves out a matched
    # stop or a tool call's arguments that usage counts; 38 against 40 is no evidence
    streamed, plain = _local(38, stream=True), _usage(40, stream=False)
    assert check_counts(streamed, plain) == []
    why = counts_not_comparable(streamed, plain)
    assert why is not None and why.startswith(
        "not comparable: the streamed count is counted locally (tok), the plain one the "
        "server's usage"
    ), why


def test_usage_counts_that_differ_for_the_same_text_are_a_usage_mismatch() -> None:
    streamed, plain = _usage(38, stream=True), _usage(40, stream=False)
    assert counts_not_comparable(streamed, plain) is None
    found = check_counts(streamed, plain)
    assert [v.code for v in found] == ["usage-mismatch"]
    assert found[0].message == "the same answer counts 38 tokens streamed and 40 plain"
    assert found[0].evidence["counted_by"] == "the server's usage"


def test_equal_counts_from_one_source_pass() -> None:
    assert check_counts(_usage(40, stream=True), _usage(40, stream=False)) == []
    assert check_counts(_local(12, stream=True), _local(12, stream=False)) == []
    assert counts_not_comparable(_local(12, stream=True), _local(12, stream=False)) is None


def test_uncounted_answers_are_not_comparable() -> None:
    nothing = replace(_local(12, stream=True), local_completion_tokens=None)
    assert check_counts(nothing, _local(12, stream=False)) == []
    why = counts_not_comparable(nothing, _local(12, stream=False))
    assert why is not None and "the streamed count is not counted" in why


def test_counts_of_different_texts_are_left_to_the_determinism_check() -> None:
    other = _usage(40, stream=False, text=TEXT + " And back again.")
    assert check_counts(_usage(38, stream=True), other) == []


def test_an_answer_cut_short_is_not_judged() -> None:
    cut = replace(_usage(38, stream=True), finish_reason=None)
    assert check_counts(cut, _usage(40, stream=False)) == []
