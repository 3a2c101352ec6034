"""Ctrl-C inside a timed benchmark leaves no timing and marks the report partial."""

from __future__ import annotations

import json

import pytest

INTERRUPTED = """
def test_first(ddtree_benchmark, tree_budget):
    ddtree_benchmark("Write a long essay about rivers.", max_tokens=16, rounds=3,
                     warmup_rounds=0)


def test_second(ddtree_benchmark, ddtree_client, tree_budget, monkeypatch):
    real = ddtree_client.request
    calls = []

    def interrupted_after_two(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:  # smoke, two timed rounds, then Ctrl-C
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(ddtree_client, "request", interrupted_after_two)
    ddtree_benchmark("Tell me a long story about a lighthouse.", max_tokens=16, rounds=5,
                     warmup_rounds=0)
"""


def test_interrupted_benchmark_is_not_saved(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(INTERRUPTED)
    # a subprocess: in-process, pytester re-raises the inner run's Ctrl-C in this run
    result = pytester.runpytest_subprocess(
        "--ddtree-reference-latency=off",
        "--ddtree-budgets=32",
        "--benchmark-json=bench.json",
        "--ddtree-report=rep",
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    names = [
        b["name"] for b in json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
    ]
    assert names == ["test_first[tree_budget=32]"]
    report = json.loads((pytester.path / "rep" / "sweep.json").read_text())
    assert report["metadata"]["interrupted"] is True
    assert report["recommendation"]["decisive"] is False
    assert report["recommendation"]["message"].startswith("Partial run (interrupted)")
    assert {s["prompt_id"] for s in report["samples"]} == {"test_first"}
    result.stdout.fnmatch_lines(["*interrupted: partial run, the recommendation is not final*"])


def test_timings_of_a_test_failing_after_its_benchmark_do_not_count(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        def test_ok(ddtree_benchmark, tree_budget):
            ddtree_benchmark("Write a long essay about rivers.", max_tokens=16, rounds=2,
                             warmup_rounds=0)

        def test_fails_after(ddtree_benchmark, tree_budget):
            ddtree_benchmark("Write a long story about a mill.", max_tokens=16, rounds=2,
                             warmup_rounds=0)
            assert False, "the user's own check failed"
        """
    )
    result = pytester.runpytest(
        "--ddtree-reference-latency=off",
        "--ddtree-budgets=16,64",
        "--benchmark-json=bench.json",
        "--ddtree-report=rep",
    )
    result.assert_outcomes(passed=2, failed=2)
    timed = json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
    assert {b["name"].split("[")[0] for b in timed} == {"test_ok"}
    report = json.loads((pytester.path / "rep" / "sweep.json").read_text())
    assert {s["prompt_id"] for s in report["samples"]} == {"test_ok"}


def test_ddtree_sweep_takes_a_plain_list_of_prompts(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_sweep(ddtree_sweep):
            summary = ddtree_sweep(["Write a long essay about rivers.",
                                    "Write a long story about a train."],
                                   max_tokens=16, rounds=1, warmup_rounds=0)
            assert summary.recommendation is not None
        """
    )
    result = pytester.runpytest(
        "--ddtree-reference-latency=off", "--ddtree-budgets=16,64", "--ddtree-report=rep"
    )
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "rep" / "sweep.json").read_text())
    assert {s["prompt_id"] for s in report["samples"]} == {"p0", "p1"}


def test_ctrl_c_in_the_first_timed_round_still_writes_every_report(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        INTERRUPTED.replace(
            "if len(calls) == 4:  # smoke, two timed rounds", "if len(calls) == 2:  #"
        )
    )
    # a subprocess: in-process, pytester re-raises the inner run's Ctrl-C in this run
    result = pytester.runpytest_subprocess(
        "--ddtree-reference-latency=off",
        "--ddtree-budgets=32",
        "--benchmark-json=bench.json",
        "--ddtree-report=rep",
        "--junitxml=out.xml",
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    names = [
        b["name"] for b in json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
    ]
    assert names == ["test_first[tree_budget=32]"]
    assert (pytester.path / "rep" / "sweep.json").is_file()
    assert (pytester.path / "out.xml").is_file()
