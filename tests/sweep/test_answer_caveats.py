"""The run's answer carries every warning that qualifies it, restated short under it."""

from __future__ import annotations

import pytest

TIMED = """
def test_timed(ddtree_benchmark, tree_budget):
    ddtree_benchmark("Write a detailed essay about rivers.", max_tokens=32)
"""


def test_the_answer_restates_the_warnings_that_qualify_it(pytester: pytest.Pytester) -> None:
    # the vllm dialect reads none of the reference server's statistics: no speculative
    # statistics came back, as from a server with speculation off
    pytester.makepyfile(test_timed=TIMED)
    result = pytester.runpytest(
        "--ddtree-dialect=vllm",
        "--ddtree-budget-mode=none",
        "--ddtree-reference-latency=off",
        "-p",
        "no:randomly",
    )
    result.assert_outcomes(passed=1)
    lines = result.stdout.str().splitlines()
    start = next(i for i, ln in enumerate(lines) if "pytest-ddtree: the answer" in ln)
    answer = lines[start + 1 : start + 4]
    assert answer[0].startswith("Recommended tree_budget=server-default"), lines[start:]
    assert answer[1:] == [
        "caveat: no speculative statistics came back: is speculation on?",
        "caveat: --ddtree-dialect vllm found no statistics",
    ], lines[start:]
    # each is said whole above, where it was found
    above = "\n".join(lines[:start])
    assert "WARNING: no speculative statistics came back: is speculation on? 3 answer(s)" in above
    assert "ddtree: WARNING: --ddtree-dialect vllm (from option --ddtree-dialect)" in above


def test_a_clean_run_has_no_caveat(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_timed=TIMED)
    result = pytester.runpytest(
        "--ddtree-budgets=16", "--ddtree-reference-latency=off", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "pytest-ddtree: the answer" in out and "caveat:" not in out, out


def test_a_request_sent_again_on_a_fresh_connection_is_no_caveat() -> None:
    from pytest_ddtree.wire.client import DDTreeClient

    # llama.cpp closes idle keep-alive connections: the client's own retry qualifies nothing
    client = DDTreeClient("http://127.0.0.1:9/v1")
    try:
        client.reuse_retries, client.counter_failures = 11, 2
        client.counter_error = "boom"
        notes = client.transport_notes()
        assert len(notes) == 2 and "sent again on a fresh connection" in str(notes[0]), notes
        (kept,) = client.transport_notes(benign=False)
        assert kept.head.startswith("the token counter failed 2 time(s);"), kept
    finally:
        client.close()


def test_a_caveat_is_a_notes_head_and_the_whole_line_adds_its_detail() -> None:
    # the caveat is never cut out of the sentence: the note keeps its two parts apart
    from pytest_ddtree.measure.arm import SpeculationGap
    from pytest_ddtree.report.arm_text import gap_note
    from pytest_ddtree.wire.client import DDTreeClient

    client = DDTreeClient("http://127.0.0.1:9/v1")
    try:
        client.withheld = 1
        client.withheld_worst = "client stalled 0.08 s of a 0.11 s decode"
        client.counter_failures, client.counter_error = 2, "boom"
        withheld, counter = client.transport_notes(benign=False)
    finally:
        client.close()
    assert withheld.head == "the speed claim of 1 request(s) was not judged (withheld, not passed)"
    assert str(withheld) == (
        "the speed claim of 1 request(s) was not judged (withheld, not passed): the client "
        "itself stalled during the decode (worst: client stalled 0.08 s of a 0.11 s decode)"
    )
    assert counter.head == (
        "the token counter failed 2 time(s); the usage and length checks that needed those "
        "counts did not run"
    )
    assert str(counter) == f"{counter.head}; first failure: boom"
    idle = gap_note(SpeculationGap("never drafted", (64,), True, 9))
    assert idle.head == "speculation never drafted at every budget 64"
    assert str(idle).startswith(f"{idle.head}: 0 draft tokens in 9 request(s)"), idle


def test_skips_are_counted_by_their_kind_never_by_their_words(pytester: pytest.Pytester) -> None:
    # a user's own skips worded as the plugin's: counted under their own reasons, and no
    # feature is said to be refused
    pytester.makepyfile(
        test_timed=TIMED,
        test_own="""
import pytest

def test_a():
    pytest.skip("race decided after 3 requests: tree_budget=16 recommended")

def test_b():
    pytest.skip("ddtree: not run, tools: not served by this deployment (HTTP 400: no)")
""",
    )
    result = pytester.runpytest(
        "--ddtree-budgets=16", "--ddtree-reference-latency=off", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=1, skipped=2)
    out = result.stdout.str()
    (line,) = [ln for ln in out.splitlines() if "test(s) skipped:" in ln]
    assert "the race was decided before them" not in line, line
    assert "1 race decided after 3 requests: tree_budget=16 recommended" in line, line
    assert "1 ddtree: not run, tools: not served by this deployment" in line, line
    assert "--ddtree-require tools makes this a failure" not in out, out


PENALTY_WITHHELD = """
def test_penalty(ddtree_client, ddtree_check):
    c = ddtree_client.chat(
        "Write about rivers.", max_tokens=16, temperature=0, logprobs=True, top_logprobs=2,
        frequency_penalty=1.5,
    )
    from pytest_ddtree.checks.invariants import check
    assert [w.code for w in check(c, min_tokens=1).withheld] == ["logprobs"]
    ddtree_check(c, min_tokens=1)
"""


def test_a_check_withheld_for_the_request_is_not_told_as_a_client_stall(
    pytester: pytest.Pytester,
) -> None:
    # a penalty moves the choice off the argmax: the best-alternative check is withheld for
    # the request's sake, which says nothing of the client's timing (the speed-claim line
    # counts only the checks the client's own stall held)
    pytester.makepyfile(test_penalty=PENALTY_WITHHELD)
    result = pytester.runpytest("--ddtree-reference-latency=off", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "speed claim" not in out and "client itself stalled" not in out, out
