"""The interleaved sweep, xdist merging and cross-commit comparison in real pytest runs."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytest_ddtree.reference import CostModel, optimal_budget, tokenizer_path
from pytest_ddtree.reference.cost import DEFAULT_PROMPTS
from pytest_ddtree.report import read_sweep_json
from pytest_ddtree.report.arm_text import verdict_text
from pytest_ddtree.report.decision_text import sweep_answer


def _args(server: Any, budgets: str, *extra: str) -> list[str]:
    return [
        f"--ddtree-endpoint={server.base_url}",
        f"--ddtree-tokenizer={tokenizer_path()}",
        f"--ddtree-budgets={budgets}",
        "-p",
        "no:cacheprovider",
        "--ddtree-sweep=exhaustive",  # the grid these tests count (the race: test_adaptive)
        *extra,
    ]


@pytest.mark.serial
def test_recommendation_matches_the_cost_model_optimum(
    pytester: pytest.Pytester, server_factory: Any
) -> None:
    server = server_factory(simulated_latency=True)
    budgets = [16, 32, 64, 128, 256, 512]
    prompts = DEFAULT_PROMPTS[:3]
    max_tokens = 96
    pytester.makepyfile(
        test_sweep=textwrap.dedent(
            f"""
            PROMPTS = {dict((f"p{i}", p) for i, p in enumerate(prompts))!r}

            def test_sweep(ddtree_sweep):
                summary = ddtree_sweep(PROMPTS, max_tokens={max_tokens}, rounds=3, warmup_rounds=1)
                assert summary.recommendation.tree_budget is not None
            """
        )
    )
    report = pytester.path / "report"
    result = pytester.runpytest(
        *_args(server, ",".join(map(str, budgets)), f"--ddtree-report={report}")
    )
    result.assert_outcomes(passed=1)
    run = read_sweep_json(report / "sweep.json")
    # three rounds, and the drift blocks: 3 passes over the 3 prompts at the start and the end
    assert len(run.samples) == 3 * len(budgets) * 3 + 18 and all(s.valid for s in run.samples)
    summary = run.summary()
    rec = summary.recommendation
    best, table = optimal_budget(budgets, prompts, max_tokens=max_tokens)
    assert rec.tree_budget is not None
    # The cost model leaves out the server's own per-round CPU time, so two
    # budgets it predicts within 3% of each other are a tie of the model itself.
    model_tie = table[rec.tree_budget]["tok_per_sec"] >= 0.97 * table[best]["tok_per_sec"]
    assert rec.tree_budget == best or best in rec.tied or model_tie, (sweep_answer(summary), table)
    # The test can fail: the sweep separates the optimum from the expensive budgets.
    verdicts = {b.tree_budget: verdict_text(b) for b in summary.budgets}
    assert verdicts[512] == "slower" and verdicts[256] == "slower", verdicts
    # Acceptance length rises with the budget while throughput does not.
    acc = [b.mean_acceptance_length or 0.0 for b in summary.budgets]
    assert acc[-1] > acc[0]


def test_ddtree_sweep_reports_invalid_budgets(
    pytester: pytest.Pytester, server_factory: Any
) -> None:
    server = server_factory(simulated_latency=False)
    pytester.makepyfile(
        test_sweep="""
        import pytest
        from pytest_ddtree.core.violation import InvariantError

        def test_sweep(ddtree_sweep):
            with pytest.raises(InvariantError) as info:
                ddtree_sweep({"a": "Write a long essay about rivers."}, max_tokens=48, rounds=1,
                             warmup_rounds=0, headers={"X-DDTree-Fault": "role-leak"})
            assert "smoke requests before the sweep" in str(info.value)
            assert "role-leak" in info.value.codes
        """
    )
    report = pytester.path / "report"
    result = pytester.runpytest(*_args(server, "16,64", f"--ddtree-report={report}"))
    result.assert_outcomes(passed=1)
    run = read_sweep_json(report / "sweep.json")
    assert [s.codes for s in run.samples] == [("role-leak",)]


def test_xdist_workers_results_are_merged_and_labelled_concurrent(
    pytester: pytest.Pytester, server_factory: Any
) -> None:
    server = server_factory(simulated_latency=False)
    pytester.makepyfile(
        test_bench="""
        import pytest

        PROMPTS = {"rivers": "Write a long essay about rivers and the valleys they shape.",
                   "bees": "Write a detailed article about bees and their hives."}

        @pytest.mark.parametrize("name", sorted(PROMPTS))
        def test_gen(ddtree_benchmark, tree_budget, name):
            ddtree_benchmark(PROMPTS[name], max_tokens=32, rounds=2, warmup_rounds=1)
        """
    )
    report = pytester.path / "report"
    out = pytester.path / "bench.json"
    # a subprocess: pytest-xdist's controller and pytest-benchmark keep state per process
    result = pytester.runpytest_subprocess(
        *_args(
            server, "16,64,256", "-n", "2", f"--ddtree-report={report}", f"--benchmark-json={out}"
        )
    )
    result.assert_outcomes(passed=6)
    text = result.stdout.str()
    assert text.count("pytest-benchmark disables itself under pytest-xdist") == 1
    assert text.count("pytest-ddtree budget sweep") == 1
    # 2 prompts x 2 rounds: n=4 a budget, below the rule's minimum n, so no winner is named
    result.stdout.fnmatch_lines(
        ["*timings were taken concurrently*", "Undecided: tree_budget=* tok/s (n=4)*"]
    )
    run = read_sweep_json(report / "sweep.json")
    assert len(run.samples) == 12 and all(s.concurrent for s in run.samples)
    assert {s.worker for s in run.samples} == {"gw0", "gw1"}
    assert {s.prompt_id for s in run.samples} == {"bees", "rivers"}
    assert run.metadata["workers"] == 2 and run.metadata["model"]
    # pytest-benchmark leaves the file empty, or lists no benchmark, when it timed nothing
    assert (
        not out.exists() or json.loads(out.read_text() or '{"benchmarks": []}')["benchmarks"] == []
    )


@pytest.mark.serial
def test_autosave_then_compare_fail_catches_a_slower_server(
    pytester: pytest.Pytester, server_factory: Any
) -> None:
    fast = server_factory(simulated_latency=True)
    slow = server_factory(simulated_latency=True, cost=CostModel(slowdown=2.0))
    pytester.makepyfile(
        test_bench="""
        def test_gen(ddtree_benchmark, tree_budget):
            ddtree_benchmark("Write a long essay about rivers and the valleys they shape.",
                             max_tokens=64, rounds=4, warmup_rounds=1)
        """
    )
    storage = f"--benchmark-storage=file://{pytester.path / 'store'}"
    # subprocesses: pytest-benchmark warns of a setup that differs through Python's warnings,
    # which an in-process run hands to this run's warning capture instead of its output
    first = pytester.runpytest_subprocess(*_args(fast, "16,64", "--benchmark-autosave", storage))
    first.assert_outcomes(passed=2)
    saved = list((pytester.path / "store").rglob("*.json"))
    assert len(saved) == 1
    assert json.loads(saved[0].read_text())["machine_info"]["ddtree"]["model"]

    gate = ["--benchmark-compare", storage]
    same = pytester.runpytest_subprocess(
        *_args(fast, "16,64", *gate, "--benchmark-compare-fail=median:25%")
    )
    assert same.ret == pytest.ExitCode.OK, same.stdout.str()
    # Same endpoint, same description: no spurious setup warning.
    assert "machine_info is different" not in same.stdout.str() + same.stderr.str()

    slower = pytester.runpytest_subprocess(
        *_args(slow, "16,64", *gate, "--benchmark-compare-fail=median:10%")
    )
    assert slower.ret != pytest.ExitCode.OK
    output = slower.stdout.str() + slower.stderr.str()
    # one line per regression, no traceback
    assert "REGRESSION test_gen[tree_budget=16]" in output and "Traceback" not in output
    # The setups differ (another endpoint): one line says so, naming what differs
    differ = [ln for ln in output.splitlines() if "machine_info differs" in ln]
    assert differ and "ddtree.endpoint" in differ[0] and len(differ[0]) < 400, output


@pytest.mark.serial
def test_compare_command_on_two_reports(
    pytester: pytest.Pytester, server_factory: Any, tmp_path: Path
) -> None:
    from pytest_ddtree.report.compare import main

    fast = server_factory(simulated_latency=True)
    slow = server_factory(simulated_latency=True, cost=CostModel(slowdown=2.0))
    pytester.makepyfile(
        test_sweep="""
        def test_sweep(ddtree_sweep):
            ddtree_sweep({"a": "Write a long essay about rivers and the valleys they shape.",
                          "b": "Write a detailed article about bees and their hives."},
                         max_tokens=48, rounds=3, warmup_rounds=0)
        """
    )
    for name, server in (("a", fast), ("b", slow)):
        res = pytester.runpytest(*_args(server, "16,64", f"--ddtree-report={tmp_path / name}"))
        res.assert_outcomes(passed=1)
    assert main([str(tmp_path / "a" / "sweep.json"), str(tmp_path / "b" / "sweep.json")]) == 1


def test_compare_reads_the_setup_the_plugin_wrote(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """Real sweep.json files: a new port is the same setup; latency and /models are not."""
    from dataclasses import replace

    from pytest_ddtree.report.compare import compare_runs

    pytester.makepyfile(
        test_sweep="""
        def test_sweep(ddtree_sweep):
            ddtree_sweep(["Write a long essay about rivers and the valleys they shape."],
                         max_tokens=32, rounds=2, warmup_rounds=0)
        """
    )
    runs = {}
    for name, latency in (("a", "off"), ("b", "off"), ("c", "on")):
        res = pytester.runpytest(
            "--ddtree-budgets=16,64",
            f"--ddtree-reference-latency={latency}",
            f"--ddtree-report={tmp_path / name}",
            "-p",
            "no:cacheprovider",
        )
        res.assert_outcomes(passed=1)
        runs[name] = read_sweep_json(tmp_path / name / "sweep.json")
    a, b, c = runs["a"], runs["b"], runs["c"]
    assert a.metadata.endpoint != b.metadata.endpoint  # each run has its own port
    assert a.metadata.server_models == ["ddtree-reference"]
    assert compare_runs(a, b).setup_differences == ()
    (diff,) = compare_runs(a, c).setup_differences
    assert diff.startswith("embedded_setup:"), diff
    other = replace(b, metadata=replace(b.metadata, server_models=["another-model"]))
    (diff,) = compare_runs(a, other).setup_differences
    assert diff.startswith("server_models:"), diff


def test_a_renderer_that_breaks_leaves_the_json_and_the_run_output_whole(
    pytester: pytest.Pytester, server_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a bug in the HTML renderer: one line says so, sweep.json is written, the summary and
    # the failures still print, and the run's exit status is its tests'
    import pytest_ddtree.report.writer as writer

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the chart engine fell over")

    server = server_factory(simulated_latency=False)
    # the inner run is in-process: it meets the broken renderer, and this test puts it back
    monkeypatch.setattr(writer, "write_sweep_html", broken)
    pytester.makepyfile(
        test_sweep="""
        def test_sweep(ddtree_sweep):
            ddtree_sweep({"p": "Tell me about rivers."}, max_tokens=16, rounds=1)
        """
    )
    report = pytester.path / "report"
    result = pytester.runpytest(*_args(server, "16,64", f"--ddtree-report={report}"))
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*pytest-ddtree budget sweep*",
            f"ddtree: could not write the report to {report} (a bug in pytest-ddtree, please "
            "report it): RuntimeError: the chart engine fell over",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    assert read_sweep_json(report / "sweep.json").samples
