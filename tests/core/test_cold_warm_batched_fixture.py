"""``ddtree_cold_warm_batched`` through pytest, on the embedded server."""

from __future__ import annotations

import pytest

TESTS = """
PROMPT = "Write a detailed essay about harbours and ships."

def test_healthy(ddtree_cold_warm_batched):
    found = ddtree_cold_warm_batched(PROMPT, max_tokens=48, concurrency=3)
    assert found.ok
    assert found.batch.others == 2 and found.batch.batched
    assert found.cold.text == found.warm.text == found.batched.text

def test_cold_garble(ddtree_cold_warm_batched):
    ddtree_cold_warm_batched(PROMPT, max_tokens=48, headers={"X-DDTree-Fault": "cold-garble"})

def test_cut_short(ddtree_cold_warm_batched):
    ddtree_cold_warm_batched(PROMPT, max_tokens=48, headers={"X-DDTree-Fault": "stream-no-done"})
"""


def test_the_fixture_passes_a_healthy_server_and_names_a_cold_garble(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest("--ddtree-budgets=16,256", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*not the same answer cold, warm and batched at temperature 0: the cold answer "
            "differs from the warm and the batched one (which agree)",
            "*[[]cold-warm-batched[]] the warm answer differs from the cold answer at token * "
            "the target was sure (it gives the speculative token no probability*",
            "*session line: *",
            "*diagnosis: speculative decoding - * the target-only baseline gives one answer "
            "cold, warm and batched",
        ]
    )
    # an answer cut short is judged by the invariants first: no comparison is drawn from it
    result.stdout.fnmatch_lines(["*the cold answer breaks 1 output-quality invariant(s): stream*"])
