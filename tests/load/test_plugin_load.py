"""ddtree_load in real pytest runs: options, failures, the report, and xdist merging."""

from __future__ import annotations

import json
import textwrap
from html import escape
from typing import Any

import pytest

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.reference import tokenizer_path
from pytest_ddtree.report import read_sweep_json
from pytest_ddtree.report.load_text import none_text, schedule_text

TEST_FILE = textwrap.dedent(
    """
    PROMPTS = [
        "Write a long essay about rivers and the valleys they shape.",
        "Write a detailed article about bees and their hives.",
    ]

    def test_load(ddtree_load):
        result = ddtree_load(PROMPTS)
        assert result.samples
    """
)


def _args(server: Any, *extra: str) -> list[str]:
    return [
        f"--ddtree-endpoint={server.base_url}",
        f"--ddtree-tokenizer={tokenizer_path()}",
        "--ddtree-budgets=16,128",
        "--ddtree-max-tokens=48",
        "-p",
        "no:cacheprovider",
        *extra,
    ]


def test_results_reach_terminal_json_and_html(
    pytester: pytest.Pytester, fast_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_load=TEST_FILE)
    monkeypatch.setenv("COLUMNS", "80")
    report = pytester.path / "report"
    result = pytester.runpytest(
        *_args(
            fast_server,
            "--ddtree-load-concurrency=1,4",
            "--ddtree-load-requests=8",
            "--ddtree-slo=e2e=60s",
            f"--ddtree-report={report}",
        )
    )
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "ddtree load: total concurrency 1,4 (one process)" in out
    assert "pytest-ddtree load" in out and "schedule: " in out
    assert "best at C=1: " in out and "best at C=4: " in out
    # the table's legend wrapped to the terminal's width, indented with the table
    lines = result.stdout.lines
    start = next(i for i, ln in enumerate(lines) if ln.startswith("  (ms; ok/n valid/sent"))
    end = next(i for i in range(start, len(lines)) if "load.md#columns)" in lines[i])
    assert end > start and all(len(ln) <= 80 for ln in lines[start : end + 1]), lines
    doc = json.loads((report / "sweep.json").read_text())
    (test,) = doc["load"]["tests"]
    assert test["processes"] == 1
    assert len(test["samples"]) == 2 * 2 * 8  # budgets x points x requests
    points = {(p["label"], p["tree_budget"]) for p in test["points"]}
    assert points == {("C=1", 16), ("C=1", 128), ("C=4", 16), ("C=4", 128)}
    assert all(p["goodput_share"] == 1.0 and p["slo_met"] for p in test["points"])
    assert test["schedule"]["schedule"]
    assert read_sweep_json(report / "sweep.json").samples == []  # still a valid sweep.json
    html = (report / "sweep.html").read_text()
    assert "Load: test_load.py::test_load" in html and "TPOT vs load" in html
    assert html.count("<svg") >= 2 and "Schedule: " in html


def test_invalid_request_under_load_fails_with_its_code(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_load=TEST_FILE)
    result = pytester.runpytest(
        f"--ddtree-tokenizer={tokenizer_path()}",
        "--ddtree-budgets=16",
        "--ddtree-reference-latency=off",
        "--ddtree-reference-fault=early-eos",
        "--ddtree-load-concurrency=2",
        "--ddtree-load-requests=4",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*4 of 4 requests under load broke output-quality invariants (early-stop x4)*"]
    )
    result.stdout.fnmatch_lines(["*first evidence:*", "*[early-stop]*"])


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--ddtree-slo=ttft=fast"], "invalid slo 'ttft=fast' (from option --ddtree-slo): "),
        (["--ddtree-slo=speed=1s"], "invalid slo 'speed=1s' (from option --ddtree-slo): unknown"),
        (
            ["--ddtree-load-concurrency=4,0"],
            "invalid load-concurrency '4,0' (from option --ddtree-load-concurrency): "
            "'0' is not an integer >= 1",
        ),
        (
            ["--ddtree-load-rate=fast"],
            "invalid load-rate 'fast' (from option --ddtree-load-rate): 'fast' is not a rate",
        ),
        (
            ["--ddtree-load-burstiness=0"],
            "invalid load-burstiness '0' (from option --ddtree-load-burstiness): ",
        ),
        (["--ddtree-load-requests=0"], "invalid load-requests '0' (from option "),
    ],
)
def test_bad_values_get_one_line(pytester: pytest.Pytester, args: list[str], line: str) -> None:
    pytester.makepyfile(test_load=TEST_FILE)
    result = pytester.runpytest(*args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert f"ERROR: {line}" in err, err
    assert "Traceback" not in err and len([x for x in err.splitlines() if x.strip()]) == 1


def test_bad_ini_and_env_values_name_their_source(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_load=TEST_FILE)
    pytester.makeini("[pytest]\nddtree_slo = e2e=2 seconds\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert "invalid slo 'e2e=2 seconds' (from ini key ddtree_slo)" in result.stderr.str()
    pytester.makeini("[pytest]\n")
    monkeypatch.setenv("DDTREE_LOAD_RATE", "2,2")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert (
        "invalid load-rate '2,2' (from environment variable DDTREE_LOAD_RATE): 2 is listed twice"
        in result.stderr.str()
    )


@pytest.mark.parametrize("spread", [["-n", "2"], ["--tx", "2*popen"]], ids=["n2", "tx-popen"])
def test_xdist_workers_send_raw_samples_merged_once(
    pytester: pytest.Pytester, fast_server: Any, spread: list[str]
) -> None:
    pytester.makepyfile(test_load=TEST_FILE)
    report = pytester.path / "report"
    # a subprocess: pytest-xdist's controller and pytest-benchmark keep state per process
    result = pytester.runpytest_subprocess(
        *_args(
            fast_server,
            *spread,
            "--dist",
            "each",
            "--ddtree-load-concurrency=4",
            "--ddtree-load-requests=10",
            f"--ddtree-report={report}",
        )
    )
    result.assert_outcomes(passed=2)  # the test runs on each worker, with its share
    out = result.stdout.str()
    assert "ddtree load: total concurrency 4 (split over 2 xdist workers" in out
    assert "merged from 2 processes (gw0, gw1)" in out
    doc = json.loads((report / "sweep.json").read_text())
    (test,) = doc["load"]["tests"]
    assert test["processes"] == 2 and test["workers"] == ["gw0", "gw1"]
    # the total load: 10 requests per budget, 5 from each worker, at 2 + 2 concurrency
    by_point = {(p["label"], p["tree_budget"]): p for p in test["points"]}
    assert set(by_point) == {("C=4", 16), ("C=4", 128)}
    for p in by_point.values():
        assert p["requests"] == 10 and p["valid"] == 10
        assert p["workers"] == ["gw0", "gw1"]
        assert p["client"]["workers"] == 2
    workers = [s["worker"] for s in test["samples"]]
    assert workers.count("gw0") == workers.count("gw1") == 10


def test_xdist_merge_equals_one_process_on_the_same_samples(
    pytester: pytest.Pytester, fast_server: Any
) -> None:
    """The controller recomputes percentiles from the workers' raw samples."""
    from pytest_ddtree.measure.load import Sample, analyse

    pytester.makepyfile(test_load=TEST_FILE)
    report = pytester.path / "report"
    # a subprocess: pytest-xdist's controller and pytest-benchmark keep state per process
    pytester.runpytest_subprocess(
        *_args(
            fast_server,
            "-n",
            "2",
            "--dist",
            "each",
            "--ddtree-load-concurrency=2",
            "--ddtree-load-requests=8",
            f"--ddtree-report={report}",
        )
    ).assert_outcomes(passed=2)
    (test,) = json.loads((report / "sweep.json").read_text())["load"]["tests"]
    samples = [Sample.from_json(s) for s in test["samples"]]
    stats, schedule = analyse(samples)
    again_schedule = schedule.to_json()
    assert schedule_text(schedule) == test["schedule"]["schedule"]
    for choice, mine_choice, theirs in zip(
        schedule.choices, again_schedule["points"], test["schedule"]["points"], strict=True
    ):
        # "unreliable" (and the decision's client_saturated flag) comes from the workers'
        # client health, not from the samples; "why_none" is the report's words
        theirs = dict(theirs)
        why = theirs.pop("why_none")
        assert why == (None if choice.why_none is None else none_text(choice.why_none))
        assert _without_client(mine_choice) == _without_client(theirs)
    mine = {(s.point.label, s.tree_budget): jsonmodel.to_json(s) for s in stats}
    for p in test["points"]:
        again = mine[(p["label"], p["tree_budget"])]
        for key in ("ttft", "itl", "tpot", "e2e", "achieved_concurrency", "requests"):
            assert again[key] == p[key], key


def test_the_api_key_never_leaves_the_load_path(
    pytester: pytest.Pytester, fast_server: Any
) -> None:
    """The key goes in the load runner's headers and nowhere else: not in the failure, the
    locals, the JUnit XML or the report, even when every request of the load fails."""
    secret = "sk-load-0123456789abcdef"
    pytester.makepyfile(
        test_load=textwrap.dedent(
            """
            def test_load(ddtree_load):
                endpoint = ddtree_load.endpoint
                result = ddtree_load(["Write a long essay about rivers."], requests=2,
                                     concurrencies=[1], max_tokens=4,
                                     expect={"min_tokens": 40})
                assert False, (endpoint, result)
            """
        )
    )
    report = pytester.path / "report"
    result = pytester.runpytest(
        *_args(
            fast_server,
            f"--ddtree-api-key={secret}",
            f"--ddtree-report={report}",
            "--junitxml=out.xml",
            "-vv",
            "--showlocals",
        )
    )
    result.assert_outcomes(failed=1)
    assert secret not in result.stdout.str() + result.stderr.str()
    assert secret not in (pytester.path / "out.xml").read_text()
    written = [p for p in report.rglob("*") if p.is_file()]
    assert written
    for path in written:
        assert secret not in path.read_text(errors="replace"), path


def test_temperatures_give_one_load_test_each(pytester: pytest.Pytester, fast_server: Any) -> None:
    pytester.makepyfile(test_load=TEST_FILE)
    report = pytester.path / "report"
    result = pytester.runpytest(
        *_args(
            fast_server,
            "--ddtree-load-concurrency=2",
            "--ddtree-load-requests=4",
            "--ddtree-temperatures=0,0.7",
            f"--ddtree-report={report}",
        ),
        "-v",
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_load?temperature=0? PASSED*",
            "*test_load?temperature=0.7? PASSED*",
            "test_load.py::test_load[[]temperature=0.7[]] at temperature 0.7: merged from*",
        ]
    )
    doc = json.loads((report / "sweep.json").read_text())
    temps = {t["nodeid"].split("[")[1]: t["temperature"] for t in doc["load"]["tests"]}
    assert temps == {"temperature=0]": 0.0, "temperature=0.7]": 0.7}
    html = (report / "sweep.html").read_text()
    assert "test_load[temperature=0.7] at temperature 0.7</h2>" in html


@pytest.mark.parametrize(("dialect", "asked"), [("auto", True), ("none", False)])
def test_dialect_none_reads_no_statistics_under_load(
    pytester: pytest.Pytester, fast_server: Any, dialect: str, asked: bool
) -> None:
    """``--ddtree-dialect none`` is "read no statistics" for the load as for the sweep;
    ``auto`` (nothing detected before the load) detects them from the load's answers."""
    pytester.makepyfile(test_load=TEST_FILE)
    report = pytester.path / "report"
    result = pytester.runpytest(
        *_args(
            fast_server,
            "--ddtree-load-concurrency=2",
            "--ddtree-load-requests=4",
            f"--ddtree-dialect={dialect}",
            f"--ddtree-report={report}",
        )
    )
    result.assert_outcomes(passed=1)
    (test,) = json.loads((report / "sweep.json").read_text())["load"]["tests"]
    assert test["points"]
    assert all((p["stats_asked"] > 0) is asked for p in test["points"])


def test_load_at_a_temperature_the_server_ignores_sends_nothing(
    pytester: pytest.Pytester,
) -> None:
    from pytest_ddtree.reference import spawn_reference_server

    pytester.makepyfile(test_load=TEST_FILE)
    with spawn_reference_server(simulated_latency=False, faults=("temperature-ignored",)) as srv:
        result = pytester.runpytest(
            *_args(srv, "--ddtree-load-requests=4", "--ddtree-temperatures=0.7"), "-rf"
        )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*sampling check before the load at temperature 0.7: nothing sent*",
            "*[[]temperature-ignored[]] the server ignores temperature*",
        ]
    )
    assert "pytest-ddtree load" not in result.stdout.str()


def test_load_seeds_are_the_same_at_every_budget() -> None:
    from pytest_ddtree.measure.load.tester import _seeded

    assert _seeded({"x": 1}, 0.0, 0, "p0", 3) == {"x": 1}
    hot = _seeded(None, 0.7, 0, "p0", 3)
    assert hot is not None and hot == _seeded(None, 0.7, 0, "p0", 3)
    assert hot != _seeded(None, 0.7, 0, "p0", 4)


def _raced_budgets(test: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["label"]: p["race"] for p in test["schedule"]["points"]}


# the race decides only on points whose client was neither saturated nor stalled: beside
# another worker on the same cores the loop wakes late and the point rightly has no verdict
@pytest.mark.serial
def test_adaptive_races_the_budgets_at_each_load_point(
    pytester: pytest.Pytester, timed_server: Any
) -> None:
    pytester.makepyfile(test_load=TEST_FILE)
    report = pytester.path / "report"
    result = pytester.runpytest(
        *_args(
            timed_server,
            "--ddtree-budgets=16,256",  # 256 is far slower at C=1 and C=4 on this server
            "--ddtree-sweep=adaptive",
            "--ddtree-load-concurrency=1,4",
            "--ddtree-load-requests=16",
            f"--ddtree-report={report}",
        )
    )
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "raced points: " in out and " requests of the 64 sent in full" in out
    (test,) = json.loads((report / "sweep.json").read_text())["load"]["tests"]
    assert test["sweep"] == "adaptive" and test["note"] == ""
    races = _raced_budgets(test)
    assert set(races) == {"C=1", "C=4"}
    html = (report / "sweep.html").read_text()
    for label, race in races.items():
        assert race["requests"] <= race["max_requests"] == 2 * 16
        # each point's verdict reaches the terminal and the page
        assert race["verdict"] in out and escape(race["verdict"]) in html, race
        if race["decided"]:
            # the fast budget; the slow one out before the point's budget was spent, unless
            # runs the client could not keep up in (counted, never raced) spent it
            assert race["recommended"] == 16, race
            assert race["requests"] < race["max_requests"] or race["discarded_runs"] > 0, race
            (left,) = race["left"]
            assert left["tree_budget"] == 256 and left["status"] == "out"
            result.stdout.fnmatch_lines(
                [
                    f"*best at {label}: 16 (TPOT p50 * ms * n=*; the leader); race decided "
                    "after * of 32 requests*",  # a busy machine may add: (UNRELIABLE: ...)
                    f"*race at {label}: 256 out after * requests (n=*): slower than the leader "
                    "by *, more than the 2% margin",
                ]
            )
            assert f"256 out after {left['after_requests']} requests" in html
        else:
            # no verdict only where the client could not keep up (its runs did not race);
            # never a winner named, never for want of a difference between 16 and 256
            assert race["recommended"] is None and race["discarded_runs"] > 0, race
            result.stdout.fnmatch_lines([f"*best at {label}: undecided; race undecided after *"])
    # every request sent is a sample, validated, and counted by its point's race
    assert len(test["samples"]) == sum(r["requests"] for r in races.values())
    assert all(s["valid"] for s in test["samples"])
    by_point = {(p["label"], p["tree_budget"]): p for p in test["points"]}
    assert by_point[("C=4", 256)]["requests"] <= by_point[("C=4", 16)]["requests"]
    # a raced budget sends each prompt twice in a row: a spread within prompts from the start
    c1 = sorted((s for s in test["samples"] if s["point"]["value"] == 1), key=lambda s: s["start"])
    for budget in (16, 256):
        ids = [s["prompt_id"] for s in c1 if s["tree_budget"] == budget]
        assert ids == [f"p{(i // 2) % 2}" for i in range(len(ids))]


def test_adaptive_under_xdist_stops_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_load=TEST_FILE)
    result = pytester.runpytest(
        "-n", "2", "--dist", "each", "--ddtree-sweep=adaptive", "-p", "no:cacheprovider"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = [x for x in result.stderr.str().splitlines() if x.strip()]
    assert len(err) == 1 and "invalid sweep 'adaptive' (from option --ddtree-sweep)" in err[0]


INTERRUPTED = textwrap.dedent(
    """
    import pytest_ddtree.measure.load.tester as tester

    PROMPTS = ["Write a long essay about rivers.", "Write a detailed article about bees."]

    def test_load(ddtree_load, monkeypatch):
        real, calls = tester.run_point, []

        def ctrl_c_at_the_third_run_at_c4(endpoint, specs, point, **kwargs):
            if point.concurrency == 4:
                calls.append(1)
                if len(calls) == 3:
                    raise KeyboardInterrupt
            return real(endpoint, specs, point, **kwargs)

        monkeypatch.setattr(tester, "run_point", ctrl_c_at_the_third_run_at_c4)
        ddtree_load(PROMPTS, concurrencies=[1, 4], requests=16)
    """
)


def test_ctrl_c_in_a_race_keeps_the_finished_points(
    pytester: pytest.Pytester, fast_server: Any
) -> None:
    pytester.makepyfile(test_load=INTERRUPTED)
    report = pytester.path / "report"
    # a subprocess: in-process, pytester re-raises the inner run's Ctrl-C in this run
    result = pytester.runpytest_subprocess(
        *_args(fast_server, "--ddtree-sweep=adaptive", f"--ddtree-report={report}")
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*test_load.py::test_load: merged from 1 process; total load per point "
            "(interrupted: partial results)",
            "*best at C=4: undecided; race interrupted after 8 of 32 requests*undecided*",
        ]
    )
    (test,) = json.loads((report / "sweep.json").read_text())["load"]["tests"]
    assert test["partial"] is True
    races = _raced_budgets(test)
    assert races["C=1"]["outcome"] in ("decided", "undecided")  # finished, whichever way
    assert races["C=4"]["outcome"] == "interrupted" and races["C=4"]["requests"] == 8
    c1 = [s for s in test["samples"] if s["point"]["value"] == 1]
    assert len(c1) == races["C=1"]["requests"] and all(s["valid"] for s in c1)
    assert len(test["samples"]) == races["C=1"]["requests"] + 8


USER_CHECK = """
from pytest_ddtree import Violation

def pytest_ddtree_check(completion):
    if "Source:" not in completion.text:
        return [Violation("no-source", "the answer cites no source")]
    return []
"""


def test_a_users_own_check_judges_every_request_under_load(
    pytester: pytest.Pytester, fast_server: Any
) -> None:
    # the hookspec promises every completion, the requests under load included
    pytester.makeconftest(USER_CHECK)
    pytester.makepyfile(test_load=TEST_FILE)
    result = pytester.runpytest(
        *_args(
            fast_server,
            "--ddtree-budgets=16",
            "--ddtree-load-concurrency=2",
            "--ddtree-load-requests=4",
        )
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*4 of 4 requests under load broke output-quality invariants (no-source x4)*",
            "*first evidence:*",
            "*[[]no-source[]] the answer cites no source*",
        ]
    )


def _without_client(choice: dict[str, Any]) -> dict[str, Any]:
    """A point's choice without what the client's health decides."""
    decision = dict(choice["decision"])
    decision["flags"] = {k: v for k, v in decision["flags"].items() if k != "client_saturated"}
    decision.pop("decisive")
    out = {k: v for k, v in choice.items() if k not in ("unreliable", "decisive")}
    return {**out, "decision": decision}
