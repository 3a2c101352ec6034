"""A budget shown lossy is never timed, reported valid or recommended."""

from __future__ import annotations

import json

import pytest

TESTS = """
LOSSY = {"X-DDTree-Fault": "lossy"}
PROMPT = "Write a detailed essay about harbours and ships."

def test_1_lossless(ddtree_lossless):
    ddtree_lossless(PROMPT, max_tokens=64, headers=LOSSY)

def test_2_timed(ddtree_benchmark, tree_budget):
    ddtree_benchmark(PROMPT, max_tokens=64, rounds=2, warmup_rounds=0, headers=LOSSY)
"""


def test_lossy_budgets_are_not_timed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest(
        "--ddtree-reference-latency=off",
        "--ddtree-budgets=16,64,256",
        "--benchmark-json=bench.json",
        "--ddtree-report=rep",
        "-p",
        "no:randomly",
    )
    # the lossless test fails, and so does timing the lossy budget 256
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        ["*[[]not-lossless[]] tree_budget 256 changed the temperature-0 output earlier*"]
    )
    timed = json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
    assert sorted(b["extra_info"]["tree_budget"] for b in timed) == [16, 64]
    report = json.loads((pytester.path / "rep" / "sweep.json").read_text())
    assert {s["tree_budget"] for s in report["samples"] if s["valid"]} <= {16, 64}
    assert "Recommended tree_budget=256" not in result.stdout.str()
    # never timed, yet reported: excluded as not lossless, with its diagnosis
    (excluded,) = [s for s in report["samples"] if s["tree_budget"] == 256]
    assert excluded["valid"] is False and excluded["codes"] == ["not-lossless"]
    assert any(d["verdict"] == "speculation" for d in report["diagnoses"])
    result.stdout.fnmatch_lines(["*256 * 0/1 *"])


def test_lossiness_found_after_timing_still_voids_the_timings(pytester: pytest.Pytester) -> None:
    head = (
        'LOSSY = {"X-DDTree-Fault": "lossy"}\nPROMPT = "Write a detailed essay about harbours."\n'
    )
    pytester.makepyfile(
        test_a=head
        + """
def test_timed(ddtree_benchmark, tree_budget):
    ddtree_benchmark(PROMPT, max_tokens=64, rounds=2, warmup_rounds=0, headers=LOSSY)
""",
        test_b=head
        + """
def test_lossless(ddtree_lossless):
    ddtree_lossless(PROMPT, max_tokens=64, headers=LOSSY)
""",
    )
    result = pytester.runpytest(
        "--ddtree-reference-latency=off",
        "--ddtree-budgets=16,64,256",
        "--benchmark-json=bench.json",
        "--ddtree-report=rep",
    )
    result.assert_outcomes(passed=3, failed=1)
    timed = json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
    assert sorted(b["extra_info"]["tree_budget"] for b in timed) == [16, 64]
    report = json.loads((pytester.path / "rep" / "sweep.json").read_text())
    at_256 = [s for s in report["samples"] if s["tree_budget"] == 256]
    assert at_256 and all(not s["valid"] and "not-lossless" in s["codes"] for s in at_256)
