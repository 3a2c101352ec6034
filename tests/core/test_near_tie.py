"""Losslessness that tells a near-tie from a bug, end to end against the reference server.

The reference server's ``near-tie`` fault flips, once, the target's token for its runner-up
within 0.15 nats (what batched verification does to a bf16 near-tie); its ``lossy``
fault commits a drafter token the target gives no probability. Both sides return their
log-probabilities, so the plugin reads the target's margin at the divergence.
"""

from __future__ import annotations

import json

import pytest

TESTS = """
import pytest

PROMPT = "Write a detailed essay about harbours and ships."
FAULT = {"X-DDTree-Fault": "near-tie"}

def test_1_lossless(ddtree_lossless):
    ddtree_lossless(PROMPT, max_tokens=64, headers=FAULT)

def test_2_timed(ddtree_benchmark, tree_budget):
    ddtree_benchmark(PROMPT, max_tokens=64, rounds=2, warmup_rounds=0, headers=FAULT)
"""

LOSSY = """
def test_lossless(ddtree_lossless):
    ddtree_lossless("Write a detailed essay about harbours and ships.", max_tokens=64,
                    headers={"X-DDTree-Fault": "lossy"})
"""

ARGS = (
    "--ddtree-reference-latency=off",
    "--ddtree-budgets=16,256",
    "--benchmark-json=bench.json",
    "--ddtree-report=rep",
    "-p",
    "no:randomly",
)


# pytest-benchmark must time the budgets, which it refuses to do inside an xdist worker
@pytest.mark.serial
def test_near_tie_mode_warns_of_a_near_tie_and_keeps_the_budget_timed(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest(*ARGS, "-W", "always::UserWarning")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*UserWarning: pytest-ddtree: tree_budget 16 diverges from the target-only baseline "
            "at token * (character *): the target-only server's top two were 0.* nats apart (*; a "
            "numerical near-tie; batched verification can flip it); tolerated by "
            "--ddtree-lossless near-tie:0.5, the budget stays timed*",
        ]
    )
    # both budgets diverged at the tie, and both stay timed
    timed = json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
    assert sorted(b["extra_info"]["tree_budget"] for b in timed) == [16, 256]
    report = json.loads((pytester.path / "rep" / "sweep.json").read_text())
    assert {s["tree_budget"] for s in report["samples"] if s["valid"]} == {16, 256}
    near = report["diagnoses"]
    assert {d["tree_budget"] for d in near} == {16, 256}
    assert {d["verdict"] for d in near} == {"near-tie"}
    assert all(d["margin"]["kind"] == "near-tie" for d in near)
    # the fault flips the target's runner-up within 0.15 nats of its best token
    assert all(0 < d["margin"]["margin_nats"] <= 0.15 for d in near)


def test_near_tie_mode_still_fails_a_confident_divergence(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(LOSSY)
    result = pytester.runpytest(*ARGS)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*[[]not-lossless[]] tree_budget 256 diverges from the target-only baseline at token *"
            "the target was sure (*): the speculative path produced a token the target would not",
            "*divergence: confident",
            "*lossless mode: near-tie:0.5",
            "*diagnosis: speculative decoding (the target was sure)*",
        ]
    )
    assert "tree_budget 16 diverges" not in result.stdout.str()
    report = json.loads((pytester.path / "rep" / "sweep.json").read_text())
    (sure,) = report["diagnoses"]
    assert sure["tree_budget"] == 256 and sure["codes"] == ["not-lossless"]
    assert sure["verdict"] == "speculation" and sure["margin"]["kind"] == "confident"
    assert "the target was sure" in sure["reason"]


def test_exact_mode_fails_a_near_tie_and_names_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest(*ARGS, "--ddtree-lossless=exact", "-k", "lossless")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*[[]not-lossless[]] tree_budget 16 diverges from the target-only baseline at token *"
            "top two were 0.* nats apart*",
            "*divergence: near-tie",
            "*lossless mode: exact",
            "*diagnosis: speculative decoding (numerical near-tie) - every divergence is at a "
            "numerical near-tie of the target*",
        ]
    )
    report = json.loads((pytester.path / "rep" / "sweep.json").read_text())
    assert {d["margin"]["kind"] for d in report["diagnoses"]} == {"near-tie"}
    assert {d["verdict"] for d in report["diagnoses"]} == {"speculation"}


def test_a_bad_lossless_value_is_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(ddtree_lossless):\n    pass\n")
    pytester.makeini("[pytest]\nddtree_lossless = near-tie:-1\n")
    result = pytester.runpytest("--ddtree-reference-latency=off")
    # the run stops at start-up (not a test failing on it), in one line
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = [line for line in result.stderr.str().splitlines() if line.strip()]
    assert len(err) == 1, err
    assert err[0].startswith(
        "ERROR: invalid lossless 'near-tie:-1' (from ini key ddtree_lossless): expected exact, "
    ), err
