"""Gated benchmarks and the sweep report in real pytest runs (pytester + reference server)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_ddtree.measure.sweep import SweepPlan
from pytest_ddtree.reference import tokenizer_path
from pytest_ddtree.report import read_sweep_json
from pytest_ddtree.report.decision_text import sweep_answer

PROMPT = "Write a long essay about rivers and the valleys they shape."

BENCH_TEST = f"""
PROMPT = {PROMPT!r}

def test_gen(ddtree_benchmark, tree_budget):
    completion = ddtree_benchmark(PROMPT, max_tokens=48, rounds=2, warmup_rounds=1)
    assert completion.completion_tokens
"""


def _args(server: Any, *extra: str) -> list[str]:
    return [
        f"--ddtree-endpoint={server.base_url}",
        f"--ddtree-tokenizer={tokenizer_path()}",
        "--ddtree-budgets=16,64,256",
        "-p",
        "no:cacheprovider",
        "--ddtree-sweep=exhaustive",  # the grid these tests count (the race: test_adaptive)
        *extra,
    ]


def _benchmarks(path: Path) -> list[dict[str, Any]]:
    # pytest-benchmark opens --benchmark-json's file when it parses the option and writes
    # nothing into it when no benchmark ran: an empty file holds no benchmark
    if not path.exists() or not path.read_text().strip():
        return []
    return list(json.loads(path.read_text())["benchmarks"])


def test_valid_sweep_records_one_group_per_budget(
    pytester: pytest.Pytester, healthy_server: Any
) -> None:
    pytester.makepyfile(test_bench=BENCH_TEST)
    out = pytester.path / "bench.json"
    report = pytester.path / "report"
    result = pytester.runpytest(
        *_args(healthy_server, f"--benchmark-json={out}", f"--ddtree-report={report}")
    )
    result.assert_outcomes(passed=3)
    benches = _benchmarks(out)
    assert sorted(b["group"] for b in benches) == [
        "tree_budget=16",
        "tree_budget=256",
        "tree_budget=64",
    ]
    for b in benches:
        info = b["extra_info"]
        assert info["tree_budget"] == int(b["group"].split("=")[1])
        assert info["prompt_id"] == "test_gen"
        assert info["valid_rounds"] == 2 and len(b["stats"]["data"]) == 2
        assert info["decode_tokens_per_second"] > 0 and info["mean_acceptance_length"] >= 1
        assert {"ttft", "completion_tokens", "decode_rounds", "server_tokens_per_second"} <= set(
            info
        )
    # pytest-benchmark's own tables come in numeric budget order.
    text = result.stdout.str()
    positions = [text.index(f"benchmark 'tree_budget={b}'") for b in (16, 64, 256)]
    assert positions == sorted(positions)
    # read top to bottom: the ddtree summary first, then a line saying what follows and
    # how to leave it out, then pytest-benchmark's tables
    lines = text.splitlines()
    sweep = next(i for i, ln in enumerate(lines) if "pytest-ddtree budget sweep" in ln)
    lead = next(i for i, ln in enumerate(lines) if "pytest-benchmark's tables follow" in ln)
    first_table = next(i for i, ln in enumerate(lines) if "benchmark 'tree_budget=" in ln)
    assert sweep < lead < first_table, text
    assert "3 timed test(s)" in lines[lead] and "--benchmark-quiet leaves them out" in lines[lead]
    assert not any(ln.startswith("ddtree:") for ln in lines[first_table:]), text
    machine = json.loads(out.read_text())["machine_info"]["ddtree"]
    assert machine["model"] and machine["endpoint"].startswith("http://127.0.0.1:")
    # The end-of-session table and recommendation.
    result.stdout.fnmatch_lines(
        [
            "*pytest-ddtree budget sweep*",
            "tree_budget*valid*decode tok/s median*verdict",
            "*16*2/2*",
            "*64*2/2*",
            "*256*2/2*",
            # two rounds a budget: below the rule's minimum n, so no winner is named
            "Undecided: tree_budget=* (n=2)*",
        ]
    )
    # The report files exist, parse and agree with each other.
    run = read_sweep_json(report / "sweep.json")
    assert len(run.samples) == 6 and all(s.valid for s in run.samples)
    assert {s.tree_budget for s in run.samples} == {16, 64, 256}
    assert run.metadata["model"] == machine["model"] and run.metadata["dialect"] == "ddtree"
    html = (report / "sweep.html").read_text()
    assert html.count('<svg class="chart"') == 3
    assert sweep_answer(run.summary()) in html.replace("&#x27;", "'")


@pytest.mark.parametrize(
    ("fault", "code"),
    [
        ("early-eos", "early-stop"),
        ("role-leak", "role-leak"),
        ("finish-always-stop", "finish-lie"),
        ("empty-200", "empty"),
        ("stream-no-done", "stream-integrity"),
    ],
)
def test_fault_fails_once_and_records_nothing(
    pytester: pytest.Pytester, server_factory: Any, fault: str, code: str
) -> None:
    server = server_factory(simulated_latency=False, faults=(fault,))
    pytester.makepyfile(test_bench=BENCH_TEST)
    out = pytester.path / "bench.json"
    result = pytester.runpytest(*_args(server, f"--benchmark-json={out}"))
    # The smoke request fails the first test with the diagnosis; the rest are skipped.
    result.assert_outcomes(failed=1, skipped=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # the invariant's own line names exactly this code: "[finish-lie] ...", not "[finish-reason]"
    result.stdout.fnmatch_lines(["*smoke request before timing*", f"E   [[]{code}[]] *"])
    # the test's id names its own budget: the line says which budget the smoke request had
    result.stdout.fnmatch_lines(
        [
            "*benchmarks skipped: the smoke request before timing failed in *"
            "the smoke request is sent once per prompt, at the smallest budget, tree_budget=16)*"
        ]
    )
    assert _benchmarks(out) == []
    assert "benchmark 'tree_budget=" not in result.stdout.str()


def test_invalid_round_mid_benchmark_drops_every_timing(
    pytester: pytest.Pytester, server_factory: Any
) -> None:
    # Every second request fails with 503: the smoke passes, then each budget
    # gets one good timed round and one failing round.
    server = server_factory(simulated_latency=False, faults=("intermittent-5xx",))
    pytester.makepyfile(
        test_bench=f"""
PROMPT = {PROMPT!r}

def test_gen(ddtree_benchmark, tree_budget):
    ddtree_benchmark(PROMPT, max_tokens=32, rounds=2, warmup_rounds=0)
"""
    )
    out = pytester.path / "bench.json"
    result = pytester.runpytest(*_args(server, f"--benchmark-json={out}"))
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["*round * output-quality invariant(s) broken*", "*http-error*"])
    assert _benchmarks(out) == []
    # Not even the good first rounds reach pytest-benchmark's table.
    assert "benchmark 'tree_budget=" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*INVALID (http-error)*"])


def test_test_failing_after_the_benchmark_leaves_no_timing(
    pytester: pytest.Pytester, healthy_server: Any
) -> None:
    pytester.makepyfile(
        test_bench=f"""
PROMPT = {PROMPT!r}

def test_gen(ddtree_benchmark, tree_budget):
    ddtree_benchmark(PROMPT, max_tokens=32, rounds=2, warmup_rounds=0)
    assert tree_budget != 64, "a check after the timing failed"
"""
    )
    out = pytester.path / "bench.json"
    saved = pytester.path / "store"
    result = pytester.runpytest(
        *_args(
            healthy_server,
            f"--benchmark-json={out}",
            "--benchmark-autosave",
            f"--benchmark-storage=file://{saved}",
        )
    )
    result.assert_outcomes(passed=2, failed=1)
    assert sorted(b["group"] for b in _benchmarks(out)) == ["tree_budget=16", "tree_budget=256"]
    autosaved = list(saved.rglob("*.json"))
    assert len(autosaved) == 1
    assert sorted(b["group"] for b in _benchmarks(autosaved[0])) == [
        "tree_budget=16",
        "tree_budget=256",
    ]
    assert "benchmark 'tree_budget=64'" not in result.stdout.str()


def test_budgets_run_in_the_seeded_order_unless_fixed(
    pytester: pytest.Pytester, healthy_server: Any
) -> None:
    pytester.makepyfile(test_bench=BENCH_TEST)

    def ids(*extra: str) -> list[int]:
        # Collection only: no request is sent, so an in-process run is safe and quick.
        res = pytester.runpytest_inprocess(*_args(healthy_server, "--collect-only", "-q", *extra))
        return [
            int(ln.split("budget=")[1].rstrip("]")) for ln in res.outlines if "::test_gen[" in ln
        ]

    assert ids("--ddtree-sweep-order=fixed") == [16, 64, 256]
    orders = set()
    for seed in range(4):
        got = ids(f"--ddtree-sweep-seed={seed}")
        assert tuple(got) == SweepPlan((16, 64, 256), ("-",), seed=seed).budget_order(0)
        orders.add(tuple(got))
    assert len(orders) > 1


def test_budget_ignored_server_fails_the_session(
    pytester: pytest.Pytester, server_factory: Any
) -> None:
    server = server_factory(simulated_latency=False, faults=("budget-ignored",))
    pytester.makepyfile(
        test_bench=f"""
import pytest

PROMPTS = {{"rivers": {PROMPT!r}, "bees": "Write a detailed article about bees and their hives."}}

@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_gen(ddtree_benchmark, tree_budget, name):
    # Not streamed: no client decode rate, so the verdict rests on the (deterministic)
    # acceptance lengths and cannot flip on timing noise.
    ddtree_benchmark(PROMPTS[name], max_tokens=48, rounds=3, warmup_rounds=0, prompt_id=name,
                     stream=False)
"""
    )
    result = pytester.runpytest(*_args(server), "--junitxml=out.xml")
    # the sweep-level failure counts as a failed pseudo-test, in the summary and in JUnit
    result.assert_outcomes(passed=6, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*FAILED sweep: [[]budget-ignored[]]*", "FAILED *ddtree::sweep*"])
    assert 'failures="1"' in (pytester.path / "out.xml").read_text()


def test_failing_benchmark_names_the_layer_at_fault(
    pytester: pytest.Pytester, server_factory: Any
) -> None:
    server = server_factory(simulated_latency=False, faults=("stats-inflated",))
    baseline = server_factory(simulated_latency=False, target_only=True)
    pytester.makepyfile(test_bench=BENCH_TEST)
    report = pytester.path / "report"
    result = pytester.runpytest(
        *_args(
            server, f"--ddtree-baseline-endpoint={baseline.base_url}", f"--ddtree-report={report}"
        )
    )
    result.assert_outcomes(failed=1, skipped=2)
    result.stdout.fnmatch_lines(["*[[]stats-inflated[]]*", "*speculative decoding*"])
    run = read_sweep_json(report / "sweep.json")
    assert [d["verdict"] for d in run.diagnoses] == ["speculation"]
    assert "stats-inflated" in run.diagnoses[0]["codes"]
    html = (report / "sweep.html").read_text()
    assert "Diagnosis" in html and "speculative decoding" in html


def test_plugin_works_without_pytest_benchmark_loaded(
    pytester: pytest.Pytester, healthy_server: Any
) -> None:
    pytester.makepyfile(
        test_plain=f"""
def test_plain(ddtree_client, ddtree_check):
    ddtree_check(ddtree_client.chat({PROMPT!r}, max_tokens=32, tree_budget=16))
"""
    )
    result = pytester.runpytest(*_args(healthy_server, "-p", "no:benchmark"))
    result.assert_outcomes(passed=1)


def test_a_tripped_compare_gate_ends_in_one_line_per_regression(
    pytester: pytest.Pytester, reference_server: Any
) -> None:
    pytester.makepyfile(BENCH_TEST)
    args = _args(reference_server, "--ddtree-budgets=16,64", "--benchmark-storage=file://store")
    # subprocesses: pytest-benchmark warns of a setup that differs through Python's warnings,
    # which an in-process run hands to this run's warning capture instead of its output
    first = pytester.runpytest_subprocess(*args, "--benchmark-save=base")
    first.assert_outcomes(passed=2)
    saved = next((pytester.path / "store").rglob("*base.json"))
    data = json.loads(saved.read_text())
    for bench in data["benchmarks"]:  # a baseline a thousand times faster: a sure regression
        for key in ("min", "max", "mean", "median"):
            bench["stats"][key] /= 1000
    data["machine_info"]["ddtree"]["endpoint"] = "http://elsewhere.invalid/v1"
    saved.write_text(json.dumps(data))
    result = pytester.runpytest_subprocess(
        *args, "--benchmark-compare=0001", "--benchmark-compare-fail=median:5%"
    )
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    assert "Traceback" not in out and "INTERNALERROR" not in out, out
    regressions = [ln for ln in out.splitlines() if ln.startswith("REGRESSION ")]
    assert len(regressions) == 2, out
    for line in regressions:  # e.g. "... (0001_base): median 99733.5% slower than ..."
        assert re.fullmatch(
            r"REGRESSION test_gen\[tree_budget=(16|64)\] \(0001_base\): median [\d.]+% slower "
            r"than the baseline \(limit 5%\)",
            line,
        ), line
    # the ddtree summary and pytest's closing line are still there
    result.stdout.fnmatch_lines(["*pytest-ddtree budget sweep*", "Undecided: tree_budget=*"])
    result.stdout.fnmatch_lines(["ddtree: add --ddtree-report DIR for sweep.json and sweep.html*"])
    # the closing line says the run failed, in pytest's own words (and colour)
    last = out.rstrip().splitlines()[-1]
    assert re.search(r"=+ 1 failed, 2 passed", last), last
    assert [ln for ln in out.splitlines() if ln.startswith("REGRESSION ")] == sorted(
        regressions,
        key=lambda ln: int(re.search(r"tree_budget=(\d+)", ln).group(1)),  # type: ignore[union-attr]
    )
    # two endpoints: one line naming what differs, not both descriptions whole
    both = out + result.stderr.str()
    differ = [ln for ln in both.splitlines() if "machine_info" in ln and "differ" in ln]
    assert differ and all(len(ln) < 400 for ln in differ), both
    assert "ddtree.endpoint" in differ[0], differ


USER_CHECK = """
from pytest_ddtree import Violation

def pytest_ddtree_check(completion, settings):
    # a team's own property: every answer must cite a source
    if "Source:" not in completion.text:
        return [Violation("no-source", "the answer cites no source",
                          {"text": completion.text[:40]})]
    return []
"""


def test_a_users_own_check_gates_the_timing(pytester: pytest.Pytester, healthy_server: Any) -> None:
    pytester.makeconftest(USER_CHECK)
    pytester.makepyfile(test_bench=BENCH_TEST)
    out = pytester.path / "bench.json"
    result = pytester.runpytest(*_args(healthy_server, f"--benchmark-json={out}"))
    # the user's violation fails the first test before any timing, like a built-in code
    result.assert_outcomes(failed=1, skipped=2)
    result.stdout.fnmatch_lines(
        ["*smoke request before timing*", "E   [[]no-source[]] the answer cites no source"]
    )
    assert _benchmarks(out) == []


# a team's own check that only one prompt of the session fails: that prompt's own problem
PROMPT_CHECK = """
from pytest_ddtree import Violation

def pytest_ddtree_check(completion):
    if "cite" in str(completion.request.body.get("messages")) and "Source:" not in completion.text:
        return [Violation("no-source", "the answer cites no source")]
    return []
"""

TWO_PROMPTS = """
import pytest

PROMPTS = {{"rivers": "Write about rivers.", "cite": "Write about rivers and cite a source."}}

@pytest.mark.parametrize("prompt", list(PROMPTS))
def test_timed(ddtree_benchmark{budget}, prompt):
    ddtree_benchmark(PROMPTS[prompt], prompt_id=prompt, max_tokens=32, rounds=3)
"""


@pytest.mark.parametrize(
    ("budget", "options", "row"),
    [
        (", tree_budget", ("--ddtree-budgets=16,64",), "16    3/3"),
        ("", ("--ddtree-budget-mode=none",), "server-default    3/3"),
        # timed at the server's default, its smoke request at the smallest budget, 16
        ("", ("--ddtree-budgets=16,64",), "server-default    3/3"),
    ],
    ids=["budgets", "no-budget", "smoke-elsewhere"],
)
def test_a_smoke_failure_that_is_the_prompts_leaves_the_budget_its_timings(
    pytester: pytest.Pytester,
    healthy_server: Any,
    baseline_server: Any,
    budget: str,
    options: tuple[str, ...],
    row: str,
) -> None:
    # the first prompt is timed, the second one's smoke request (at the smallest budget)
    # fails the team's check, and the baseline fails it too: the prompt's, not the budget's
    pytester.makeconftest(PROMPT_CHECK)
    pytester.makepyfile(test_bench=TWO_PROMPTS.format(budget=budget))
    report = pytester.path / "report"
    result = pytester.runpytest(
        *_args(healthy_server, f"--ddtree-report={report}", "--ddtree-sweep-order=fixed"),
        f"--ddtree-baseline-endpoint={baseline_server.base_url}",
        *options,
    )
    out = result.stdout.str()
    assert (
        "diagnosis: prompt / chat template / model - the target-only baseline fails the "
        "same way (no-source)" in out
    ), out
    assert "INVALID" not in out and "Excluded for invalid responses" not in out, out
    assert "No recommendation" not in out, out
    # the later benchmarks are skipped, naming what to fix: the prompt, not the endpoint
    assert "fix the prompt, its expectations or the chat template first" in out, out
    assert "fix the endpoint first" not in out, out
    assert re.search(rf"^\s*{row}\s", out, re.M), out
    assert "ddtree: sweep report written" in out, out
    # the smoke request's failure stays in the report, with the layer it was blamed on
    run = read_sweep_json(report / "sweep.json")
    smoke = [s for s in run.samples if s.smoke]
    assert [(s.prompt_id, s.codes, s.blame) for s in smoke] == [
        ("cite", ("no-source",), "template")
    ]


# a team's own check that records every answer it judges and fails from its second call on
COUNTING_CHECK = """
from pathlib import Path
from pytest_ddtree import Violation

CALLS = Path(__file__).parent / "calls.txt"

def pytest_ddtree_check(completion):
    with CALLS.open("a") as f:
        f.write(f"{{completion.request.tree_budget}}\\n")
    if len(CALLS.read_text().splitlines()) >= {fail_from}:
        return [Violation("no-source", "the answer cites no source")]
    return []
"""

ONE_TIMING = f"""
PROMPT = {PROMPT!r}

def test_gen(ddtree_benchmark):
    ddtree_benchmark(PROMPT, max_tokens=32, rounds=3, warmup_rounds=1)
"""


def test_a_users_own_check_judges_the_smoke_the_warm_up_and_every_timed_round(
    pytester: pytest.Pytester, healthy_server: Any
) -> None:
    pytester.makeconftest(COUNTING_CHECK.format(fail_from=10**6))
    pytester.makepyfile(test_bench=ONE_TIMING)
    result = pytester.runpytest(*_args(healthy_server, "--ddtree-budget-mode=none"))
    result.assert_outcomes(passed=1)
    # the hookspec promises every completion: 1 smoke + 1 warm-up + 3 timed rounds
    assert len((pytester.path / "calls.txt").read_text().splitlines()) == 5


def test_a_users_own_check_failing_after_the_smoke_fails_the_timed_round(
    pytester: pytest.Pytester, healthy_server: Any
) -> None:
    # the smoke request passes; the team's check fails the next answer, the warm-up round
    pytester.makeconftest(COUNTING_CHECK.format(fail_from=2))
    pytester.makepyfile(test_bench=ONE_TIMING)
    out = pytester.path / "bench.json"
    result = pytester.runpytest(
        *_args(healthy_server, "--ddtree-budget-mode=none", f"--benchmark-json={out}")
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*warm-up round 1: 1 output-quality invariant(s) broken; no timing was recorded*",
            "E   [[]no-source[]] the answer cites no source",
        ]
    )
    assert "smoke request before timing" not in result.stdout.str()
    assert _benchmarks(out) == []
