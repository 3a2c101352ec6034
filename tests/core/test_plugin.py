"""Real pytest sessions (pytester) driving the plugin against the reference server."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pytest_ddtree.wire.completion import ErrorKind
from pytest_ddtree.wire.protocol.stall import StallGuard

FAST = ("--ddtree-reference-latency=off", "-p", "no:randomly")


def test_header_parametrisation_and_fixtures(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_budget(ddtree_client, tree_budget, ddtree_model, ddtree_endpoint, ddtree_check):
            assert ddtree_endpoint.startswith("http://127.0.0.1:")
            assert ddtree_model == "ddtree-reference"
            c = ddtree_client.chat("Write a detailed essay about rivers.", max_tokens=24,
                                   tree_budget=tree_budget)
            ddtree_check(c)
            assert c.stats.tree_budget == tree_budget
        """
    )
    result = pytester.runpytest("-v", "--ddtree-budgets=16,64", *FAST)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "ddtree: endpoint embedded reference server (started on first use); no api key; "
            "model first listed; dialect auto; budgets 16,64 via field; tokenizer auto",
            "ddtree: serving http://127.0.0.1:*/v1 model ddtree-reference;"
            " tokenizer tokenizer.json*",
            "*test_budget?tree_budget=16? PASSED*",
            "*test_budget?tree_budget=64? PASSED*",
            "ddtree: statistics dialect detected: ddtree",
        ]
    )


def test_marker_overrides_budgets_and_max_tokens(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.ddtree(budgets=[32], max_tokens=12)
        def test_marked(ddtree_settings, tree_budget):
            assert tree_budget == 32
            assert ddtree_settings.max_tokens == 12

        def test_default(ddtree_settings, tree_budget):
            assert ddtree_settings.max_tokens == 128
        """
    )
    result = pytester.runpytest("-v", "--strict-markers", "--ddtree-budgets=16,64", *FAST)
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*test_marked?tree_budget=32?*PASSED*"])


def test_bad_marker_stops_the_run_with_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.ddtree(budget=[32])
        def test_marked(tree_budget):
            pass
        """
    )
    result = pytester.runpytest(*FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: invalid marker argument 'budget' (@pytest.mark.ddtree on *"]
    )


def test_no_ddtree_fixture_no_server(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=1)
    assert "ddtree: serving" not in result.stdout.str()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_endpoint_fails_once_at_start(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_a(ddtree_client, tree_budget):
            pass
        """
    )
    url = f"http://127.0.0.1:{_free_port()}/v1"
    result = pytester.runpytest(f"--ddtree-endpoint={url}", "--ddtree-timeout=2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: ddtree: {url}/models: cannot connect*"])
    assert "passed" not in result.stdout.str() and "failed" not in result.stdout.str()


def test_an_unreachable_endpoint_names_the_setting_it_came_from(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile("def test_a(ddtree_client):\n    pass\n")
    url = f"http://127.0.0.1:{_free_port()}/v1"
    monkeypatch.setenv("DDTREE_ENDPOINT", url)
    result = pytester.runpytest("--ddtree-timeout=2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: ddtree: {url}/models: cannot connect*; check environment variable "
            "DDTREE_ENDPOINT and that the server is running"
        ]
    )
    assert "--ddtree-endpoint" not in result.stderr.str()


def test_unknown_model_fails_once(pytester: pytest.Pytester, reference_server) -> None:
    pytester.makepyfile("def test_a(ddtree_client):\n    pass\n")
    result = pytester.runpytest(
        f"--ddtree-endpoint={reference_server.base_url}", "--ddtree-model=gpt-imaginary"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: ddtree: model 'gpt-imaginary' (from option --ddtree-model) is not served by"
            " *; it lists: ddtree-reference"
        ]
    )


def test_bad_option_value_from_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nddtree_budgets = 16,sixty-four\n")
    pytester.makepyfile("def test_a():\n    pass\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: invalid budgets '16,sixty-four' (from ini key ddtree_budgets): *"]
    )


def test_unknown_skip_check_code(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_a():\n    pass\n")
    result = pytester.runpytest("--ddtree-skip-check=no-such-check")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: invalid skip-check 'no-such-check' (from option*"])


def test_embedded_servers_stop_at_the_end(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_record(ddtree_runtime, pytestconfig):
            ports = [s.port for s in ddtree_runtime.servers]
            assert len(ports) == 2
            assert ddtree_runtime.baseline is not None
            open("ports.txt", "w").write(" ".join(map(str, ports)))
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=1)
    ports = [int(p) for p in (pytester.path / "ports.txt").read_text().split()]
    for port in ports:
        with socket.socket() as s, pytest.raises(OSError):
            s.settimeout(1)
            s.connect(("127.0.0.1", port))


def test_api_key_never_printed(pytester: pytest.Pytester, reference_server) -> None:
    secret = "sk-live-0123456789abcdef"
    pytester.makepyfile(
        """
        def test_fails(ddtree_client, ddtree_settings):
            c = ddtree_client.chat("Hello", max_tokens=4)
            assert False, (ddtree_settings, c.request)
        """
    )
    result = pytester.runpytest(
        f"--ddtree-endpoint={reference_server.base_url}",
        f"--ddtree-api-key={secret}",
        "-vv",
        "--showlocals",
        "--junitxml=out.xml",
    )
    result.assert_outcomes(failed=1)
    assert secret not in result.stdout.str()
    assert secret not in (pytester.path / "out.xml").read_text()


def test_runs_under_xdist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_budget(ddtree_client, tree_budget, ddtree_check):
            c = ddtree_client.chat("Write a long story about a harbour.", max_tokens=16,
                                   tree_budget=tree_budget)
            ddtree_check(c)
        """
    )
    # a subprocess: pytest-xdist's controller and pytest-benchmark keep state per process
    result = pytester.runpytest_subprocess("-n", "2", "--ddtree-budgets=16,32,64,128", *FAST)
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*one per xdist worker*"])


def test_external_endpoint_counts_with_server_tokenize(
    pytester: pytest.Pytester, reference_server
) -> None:
    pytester.makepyfile(
        """
        def test_a(ddtree_client, ddtree_check, ddtree_counter):
            assert ddtree_counter.source.startswith("server")
            c = ddtree_client.chat("Write a detailed essay about rivers.", max_tokens=24,
                                   tree_budget=32)
            ddtree_check(c)
            assert ddtree_counter.count(c.text) == 24
        """
    )
    result = pytester.runpytest(f"--ddtree-endpoint={reference_server.base_url}")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["ddtree: serving * tokenizer server*"])


def test_missing_tokenizer_file_is_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_a(ddtree_client):\n    pass\n")
    result = pytester.runpytest("--ddtree-tokenizer=/no/such/tokenizer.json", *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: ddtree: tokenizer file not found: '/no/such/tokenizer.json'"
            " (from option --ddtree-tokenizer)"
        ]
    )


def test_marker_skip_check_is_validated_and_named_without_parameters(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.ddtree(skip_checks=["nope"])
        def test_marked(tree_budget):
            pass
        """
    )
    result = pytester.runpytest("--ddtree-budgets=16,64", *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: invalid skip-check 'nope' (from @pytest.mark.ddtree on"
            " test_marker_skip_check_is_validated_and_named_without_parameters.py::test_marked):"
            " known codes are *"
        ]
    )


def test_unwritable_report_dir_stops_the_run_at_start(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_a():\n    pass\n")
    (pytester.path / "afile").write_text("x")
    result = pytester.runpytest("--ddtree-report=afile")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: invalid report 'afile' (from option --ddtree-report): exists and is not a dir*"]
    )


def test_unreachable_baseline_fails_at_start(pytester: pytest.Pytester, reference_server) -> None:
    pytester.makepyfile("def test_a(ddtree_client):\n    pass\n")
    url = f"http://127.0.0.1:{_free_port()}/v1"
    result = pytester.runpytest(
        f"--ddtree-endpoint={reference_server.base_url}", f"--ddtree-baseline-endpoint={url}"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: ddtree: baseline (from option --ddtree-baseline-endpoint): {url}/models: *"]
    )


def test_forced_dialect_without_statistics_warns(
    pytester: pytest.Pytester, reference_server
) -> None:
    pytester.makepyfile(
        """
        def test_a(ddtree_client):
            assert ddtree_client.chat("Write a long essay.", max_tokens=8).ok
        """
    )
    result = pytester.runpytest(
        f"--ddtree-endpoint={reference_server.base_url}", "--ddtree-dialect=sglang"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["ddtree: WARNING: --ddtree-dialect sglang (from option --ddtree-dialect) found no*"]
    )


def test_no_dialect_line_when_no_request_was_made(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_a(ddtree_client):\n    pass\n")
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=1)
    assert "dialect detected" not in result.stdout.str()


def test_endpoint_without_v1_fails_at_start(pytester: pytest.Pytester, reference_server) -> None:
    pytester.makepyfile("def test_a(ddtree_client):\n    pass\n")
    result = pytester.runpytest(f"--ddtree-endpoint={reference_server.root_url}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ddtree: *: HTTP 404; is this an OpenAI-compatible*"])


def _squeezed(text: str) -> str:
    """``text`` without whitespace: argparse wraps help where it likes (even after a hyphen)."""
    return "".join(text.split())


def test_help_renders_every_option(pytester: pytest.Pytester) -> None:
    from pytest_ddtree.core.options import OPTIONS

    result = pytester.runpytest("--help")
    assert result.ret == 0, result.stderr.str()
    out = _squeezed(result.stdout.str())
    assert "goodput=95%" in out  # a literal percent sign, not an argparse placeholder
    for opt in OPTIONS:
        flag = opt.cli if opt.flag else f"{opt.cli}={opt.metavar}"
        assert _squeezed(f"{flag} {opt.help}") in out, opt.cli
        kind = "linelist" if opt.repeatable else "paths" if opt.path else "string"
        assert _squeezed(f"{opt.ini} ({kind}):") in out, opt.ini


def test_help_works_whatever_the_settings_say(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a bad value in the project's ini file or the environment fails a run with one line,
    # never the help of a project that installs the plugin
    pytester.makeini("[pytest]\nddtree_timeout = nope\n")
    monkeypatch.setenv("DDTREE_ENDPOINT", "::bad")
    result = pytester.runpytest("--help")
    assert result.ret == 0, result.stderr.str()
    assert "--ddtree-endpoint" in result.stdout.str()
    run = pytester.runpytest()
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    assert "invalid endpoint '::bad' (from environment variable DDTREE_ENDPOINT)" in (
        run.stderr.str()
    )


def test_short_summary_shows_the_codes_at_80_columns(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_s="""
        def test_short(ddtree_client, ddtree_check):
            c = ddtree_client.chat("Write a detailed essay about rivers.", max_tokens=8)
            ddtree_check(c, allowed_finish_reasons=["stop"])
        """
    )
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("BUILD_NUMBER", raising=False)
    result = pytester.runpytest("-rf", "--ddtree-budgets=16", "--junitxml=out.xml", *FAST)
    result.assert_outcomes(failed=1)
    line = next(ln for ln in result.stdout.lines if ln.startswith("FAILED "))
    assert len(line) <= 80, line
    # the old line, cut at 80 columns: "... - pytest_ddtree.InvariantError: 1 out..."
    assert line.startswith("FAILED test_s.py::test_short - [finish-reason] 1 output-"), line
    # JUnit XML's failure message keeps the whole message, evidence included
    import xml.etree.ElementTree as ET

    failure = next(ET.parse(pytester.path / "out.xml").getroot().iter("failure"))
    message = failure.get("message", "")
    assert message.startswith("[finish-reason] 1 output-quality invariant(s) broken"), message
    assert "finish_reason 'length' is not one of ['stop']" in message


def test_short_summary_names_a_load_failure_without_its_module(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_l="""
        def test_load(ddtree_load):
            ddtree_load(["Write about rivers."], tree_budgets=[16], concurrencies=[1],
                        requests=2, max_tokens=8)
        """
    )
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("BUILD_NUMBER", raising=False)
    result = pytester.runpytest("-rf", "--ddtree-slo=ttft=1us", *FAST)
    result.assert_outcomes(failed=1)
    line = next(ln for ln in result.stdout.lines if ln.startswith("FAILED "))
    # "SLO missed at ..." or, on a busy machine, "SLO verdict withheld: the client was ..."
    assert line.startswith("FAILED test_l.py::test_load - LoadError: SLO "), line


def test_regression_lines_read_as_words() -> None:
    from pytest_ddtree.pytest_plugin.summary import _regression_text

    assert (
        _regression_text("Field 'min' has failed DifferenceRegressionCheck: 0.250000000 > 0.1")
        == "min 0.25 s slower than the baseline (limit 0.1 s)"
    )
    assert _regression_text("something else entirely") == "something else entirely"


FAILING_CHECK = """
def test_answer(ddtree_client, ddtree_settings, ddtree_check):
    completion = ddtree_client.request("Write a long essay about rivers.", max_tokens=48)
    unrelated = "a line of the test's source that the failure block need not show"
    ddtree_check(completion, min_tokens=32)
"""


def test_a_failure_block_shows_the_cause_not_the_source_and_fixtures(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(FAILING_CHECK)
    args = (
        "--ddtree-reference-latency=off",
        "--ddtree-reference-fault=early-eos",
        "-p",
        "no:randomly",
    )
    result = pytester.runpytest(*args)
    out = result.stdout.str()
    result.assert_outcomes(failed=1)
    assert "[early-stop]" in out and "E   " in out, out
    assert "ddtree_settings = Settings(" not in out and "unrelated =" not in out, out
    # the block starts at the test's own frame: none of pytest's runner or pluggy above it
    # (up to the warnings summary: an in-process run may warn about pytest's own rewriting)
    block = out.split("FAILURES", 1)[1].split("warnings summary", 1)[0]
    assert "_pytest" not in block and "pluggy" not in block, out
    assert "test_a_failure_block_shows_the_cause_not_the_source_and_fixtures.py:" in block, out
    # --tb=long still has everything, with a short Settings repr
    long = pytester.runpytest(*args, "--tb=long").stdout.str()
    assert "unrelated =" in long
    line = next(ln for ln in long.splitlines() if ln.startswith("ddtree_settings = "))
    assert len(line) < 300, line


class _BadGateway(BaseHTTPRequestHandler):
    """Lists a model, and answers every completion with an HTML 502 (a gateway whose
    upstream is down)."""

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._send(200, "application/json", b'{"object": "list", "data": [{"id": "m"}]}')

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(502, "text/html", b"<html><h1>502 Bad Gateway</h1></html>")


def test_a_dead_endpoint_stops_the_run_after_three_failures(
    pytester: pytest.Pytester, loopback: Callable[[ThreadingHTTPServer], str]
) -> None:
    url = loopback(ThreadingHTTPServer(("127.0.0.1", 0), _BadGateway))
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("i", range(8))
        def test_a(ddtree_client, ddtree_check, i):
            ddtree_check(ddtree_client.chat("Hello?", max_tokens=8))

        def test_offline():
            pass
        """
    )
    result = pytester.runpytest(f"--ddtree-endpoint={url}/v1", "-rs")
    # three requests in a row failed before any answer: the rest are skipped, one line says why
    result.assert_outcomes(failed=3, skipped=5, passed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "ddtree: stopped early, the endpoint is down: the endpoint answered none of its first "
            "3 requests (HTTP 502: <html><h1>502 Bad Gateway</h1></html>); every later test that "
            "needs it was skipped (-rs lists them)",
            "SKIPPED [[]5[]] *ddtree: not run, the endpoint is down: the endpoint answered none*",
        ]
    )
    assert out.count("[http-error]") == 3, out


def _report_of(directory: Path) -> tuple[dict[str, Any], str]:
    doc = json.loads((directory / "sweep.json").read_text(encoding="utf-8"))
    return doc, (directory / "sweep.html").read_text(encoding="utf-8")


def test_a_run_that_timed_nothing_still_writes_its_report_saying_why(
    pytester: pytest.Pytester, loopback: Callable[[ThreadingHTTPServer], str]
) -> None:
    url = loopback(ThreadingHTTPServer(("127.0.0.1", 0), _BadGateway))
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("i", range(4))
        def test_a(ddtree_client, ddtree_check, i):
            ddtree_check(ddtree_client.chat("Hello?", max_tokens=8))

        def test_timed(ddtree_benchmark, tree_budget):
            ddtree_benchmark("Hello?", max_tokens=8)
        """
    )
    result = pytester.runpytest(
        f"--ddtree-endpoint={url}/v1",
        "--ddtree-budgets=16",
        "--ddtree-report=out",
        "-p",
        "no:randomly",
    )
    result.assert_outcomes(failed=3, skipped=2)
    out = pytester.path / "out"
    result.stdout.fnmatch_lines(
        [
            "ddtree: sweep report written (nothing was timed: it says why): out/sweep.json, "
            "out/sweep.html"
        ]
    )
    doc, html = _report_of(out)
    why = "the run stopped early, the endpoint is down: the endpoint answered none of its first 3"
    assert doc["samples"] == []
    assert doc["metadata"]["notes"][0].startswith(f"Nothing was timed: {why}"), doc
    assert doc["recommendation"]["message"].startswith(
        f"No recommendation: nothing was timed ({why}"
    )
    assert f"Nothing was timed: {why}" in html and "nothing was timed</div>" in html
    assert "every timed request passed the invariants" not in html


def test_a_run_whose_endpoint_cannot_be_reached_writes_its_report_saying_why(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile("def test_a(ddtree_client):\n    pass\n")
    result = pytester.runpytest(
        "--ddtree-endpoint=http://127.0.0.1:9/v1", "--ddtree-report=out", "-p", "no:randomly"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    doc, html = _report_of(pytester.path / "out")
    note = doc["metadata"]["notes"][0]
    assert note.startswith("Nothing was timed: the run stopped before any test: "), note
    assert "http://127.0.0.1:9/v1/models: cannot connect" in note
    assert doc["metadata"]["endpoint"] == "http://127.0.0.1:9/v1"
    assert "cannot connect" in html


def test_a_server_that_has_answered_is_never_stopped_as_dead() -> None:
    # an overloaded or flaky server: each failure is its own test's finding, never a stop
    guard = StallGuard(dead_limit=3)
    guard.note(None, None, 200)
    for _ in range(10):
        guard.note(ErrorKind.HTTP, "HTTP 502", 502)
    assert not guard.dead and guard.reason is None
    # a 4xx is an answer too: the server is up and read the request
    guard = StallGuard(dead_limit=3)
    guard.note(ErrorKind.HTTP, "HTTP 400", 400)
    for _ in range(10):
        guard.note(ErrorKind.TRANSPORT, "connection refused", 0)
    assert not guard.dead
    # never answered: three server-side failures in a row stop it, whatever their kind
    guard = StallGuard(dead_limit=3)
    guard.note(ErrorKind.TRANSPORT, "connection refused", 0)
    guard.note(ErrorKind.HTTP, "HTTP 503", 503)
    assert not guard.dead
    guard.note(ErrorKind.HTTP, "HTTP 502", 502)
    assert guard.dead and guard.reason is not None and "(HTTP 502)" in guard.reason
    # the client's own failure (its parser, its size cap) is no sign of a dead server
    guard = StallGuard(dead_limit=3)
    for _ in range(5):
        guard.note(ErrorKind.CLIENT, "client error while handling the response", 0)
    assert not guard.dead
    # an answer under load counts as an answer
    guard = StallGuard(dead_limit=3)
    guard.answered()
    for _ in range(5):
        guard.note(ErrorKind.HTTP, "HTTP 502", 502)
    assert not guard.dead
    # the rule is off unless asked for (a load point's own guard, a library user's client)
    guard = StallGuard()
    for _ in range(10):
        guard.note(ErrorKind.HTTP, "HTTP 502", 502)
    assert not guard.dead


def test_the_load_answer_joins_the_schedule_to_the_sweep() -> None:
    from pytest_ddtree.measure.load.arrivals import LoadPoint
    from pytest_ddtree.measure.load.recommend import Choice, Schedule
    from pytest_ddtree.measure.sweep.decision import Decision
    from pytest_ddtree.report.load_text import load_answer

    def decision(*arms: int, status: str = "recommended") -> Decision[int | None]:
        return Decision(status, arms, arms[0], 9, 0.02, 0.95, 6)  # type: ignore[arg-type]

    def pick(c: int, budget: int, unreliable: bool = False) -> Choice:
        return Choice(LoadPoint("concurrency", c), decision(budget), 1.0, unreliable=unreliable)

    same = Schedule((pick(1, 64), pick(4, 64)))
    assert load_answer("t::load", same, decision(64)) == (
        "under load (t::load): tree_budget=64 at every load point too (all C: 64)."
    )
    apart = Schedule((pick(1, 64), pick(4, 16, unreliable=True)))
    line = load_answer("t::load", apart, decision(64))
    assert line.startswith("under load (t::load): C<=1: 64, C>1: 16. The same rule"), line
    assert "and 16 at C=4, where requests share the server" in line, line
    assert "the data differ" in line and "UNRELIABLE" in line, line
    # the sweep's answer is a set: a load pick inside it agrees with it
    inside = load_answer("t::load", same, decision(64, 128, status="tied"))
    assert inside == (
        "under load (t::load): all C: 64, one of the sweep's tree_budget=64 or 128 at every "
        "load point."
    )


def test_no_empty_benchmark_storage_is_left_in_the_users_directory(
    pytester: pytest.Pytester,
) -> None:
    # pytest-benchmark makes ./.benchmarks when it starts, whether it saves or not
    pytester.makepyfile("def test_a(benchmark):\n    benchmark.pedantic(lambda: None, rounds=1)\n")
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1)
    assert not (pytester.path / ".benchmarks").exists()
    # a run that saved keeps what it saved
    pytester.runpytest("-p", "no:randomly", "--benchmark-autosave").assert_outcomes(passed=1)
    assert list((pytester.path / ".benchmarks").rglob("*.json"))
    # a directory that was there before the run is the user's: left as it was
    other = pytester.path / "mine"
    other.mkdir()
    pytester.runpytest("-p", "no:randomly", "--benchmark-storage=mine").assert_outcomes(passed=1)
    assert other.is_dir()


def test_a_load_point_whose_tied_set_holds_the_sweeps_budget_agrees_with_it() -> None:
    from pytest_ddtree.measure.load.arrivals import LoadPoint
    from pytest_ddtree.measure.load.recommend import Choice, Schedule
    from pytest_ddtree.measure.sweep.decision import Decision
    from pytest_ddtree.report.load_text import load_answer

    def decision(*arms: int, status: str = "recommended") -> Decision[int | None]:
        return Decision(status, arms, arms[0], 9, 0.02, 0.95, 6)  # type: ignore[arg-type]

    c1 = Choice(LoadPoint("concurrency", 1), decision(32, 64, status="tied"), 1.0)
    c4 = Choice(LoadPoint("concurrency", 4), decision(16), 1.0)
    line = load_answer("t::load", Schedule((c1, c4)), decision(64))
    # C=1 holds 64: no difference there; C=4 differs, where requests share the server
    assert "and 16 at C=4, where requests share the server" in line, line
    alone = load_answer("t::load", Schedule((c1,)), decision(64))
    assert alone == (
        "under load (t::load): all C: 32 or 64; each point's answer holds the sweep's "
        "tree_budget=64."
    )
