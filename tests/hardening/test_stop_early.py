"""A hung or trickling endpoint ends the bundled suite after two requests, with one line.

The endpoint lists its model, then takes every completion request and never finishes one:
the ``silent`` server sends no byte, the ``trickle`` one sends a byte a second. Two requests
in a row without a complete answer trip the session's stall guard; every later test that
needs the endpoint is skipped, and one line says what was seen and which limit ran out.
The inner runs use short limits, so each costs a few seconds; their ``timeout`` is a hang
guard, not a performance assertion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pytest_ddtree.wire.completion import ErrorKind
from pytest_ddtree.wire.protocol import StallGuard

from ._hostile import HostileServer

#: what a stopped run may print at most, start to end (the issue's hung run printed 1,478)
MAX_LINES = 100


def _suite_against(pytester: pytest.Pytester, server: HostileServer, timeout: str) -> list[str]:
    result = pytester.runpytest_subprocess(
        "--pyargs",
        "pytest_ddtree.suite",
        f"--ddtree-endpoint={server.base_url}",
        f"--ddtree-timeout={timeout}",
        "-p",
        "no:randomly",
        timeout=120,
    )
    lines = result.stdout.lines + result.stderr.lines
    output = "\n".join(lines)
    assert "Traceback" not in output and "INTERNALERROR" not in output, output[-4000:]
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output[-4000:]
    outcomes = result.parseoutcomes()
    # the two stalled requests fail their tests; nothing else ran against the endpoint
    assert outcomes.get("failed") == 2 and not outcomes.get("passed"), output[-4000:]
    assert outcomes.get("skipped", 0) > 100, output[-4000:]
    assert len(lines) < MAX_LINES, output[-4000:]
    return lines


def _stop_line(lines: list[str]) -> str:
    stops = [line for line in lines if line.startswith("ddtree: stopped early")]
    assert len(stops) == 1, "\n".join(lines)
    return stops[0]


def test_a_hung_endpoint_stops_the_bundled_suite_with_one_line(
    pytester: pytest.Pytester, hostile: Callable[..., HostileServer]
) -> None:
    server = hostile("silent", trickle_for=60)
    lines = _suite_against(pytester, server, "connect=1,read=1,total=3")
    host = server.base_url.split("//")[1].split("/")[0]
    assert _stop_line(lines) == (
        f"ddtree: stopped early: the endpoint at {host} stalled on 2 requests in a row (read "
        "timeout: the connection was accepted but no byte came in 1s); --ddtree-timeout "
        "connect=1,read=1,total=3 (from option --ddtree-timeout) sets the limits, raise it if "
        "the server is only slow; every later test that needs the endpoint was skipped (-rs "
        "lists them)"
    )
    assert any(line.endswith(" the endpoint stalled (-rs lists them)") for line in lines)


def test_a_trickling_endpoint_stops_the_bundled_suite_with_one_line(
    pytester: pytest.Pytester, hostile: Callable[..., HostileServer]
) -> None:
    server = hostile("trickle", interval=1.0, trickle_for=60)
    lines = _suite_against(pytester, server, "connect=1,read=2,total=3")
    stop = _stop_line(lines)
    # bytes kept coming: the line says so, and names the deadline, not a silent server
    assert "stalled on 2 requests in a row (deadline: no complete response within the " in stop
    assert "total deadline of 3s (" in stop and "bytes received)" in stop, stop
    assert "accepted the connection but no byte came" not in stop, stop
    assert "--ddtree-timeout connect=1,read=2,total=3 (from option --ddtree-timeout)" in stop


def test_a_slow_server_that_completes_answers_is_never_stopped() -> None:
    # a complete answer between deadline hits resets the count: a slow but healthy server
    # that finishes some answers keeps its run
    guard = StallGuard(dead_limit=3, stops_run=True)
    for _ in range(10):
        guard.note(ErrorKind.DEADLINE, "deadline: no complete response", 200, where="h:1")
        guard.note(None, None, 200)
    assert not guard.stopped and guard.reason is None
    guard.note(ErrorKind.DEADLINE, "deadline: no complete response", 200, where="h:1")
    guard.note(ErrorKind.READ_TIMEOUT, "read timeout: no data", 0, where="h:1")
    assert guard.stopped and guard.reason is not None and "at h:1 stalled on 2" in guard.reason
    # the baseline's or a library user's guard stops its own requests, never the run
    other = StallGuard()
    for _ in range(2):
        other.note(ErrorKind.DEADLINE, "deadline: no complete response", 200)
    assert other.tripped and not other.stopped


def test_the_report_of_a_run_a_stalled_endpoint_stopped_says_why_nothing_was_timed() -> None:
    # the report's reason was "no test reached its timed requests", which names no cause
    from types import SimpleNamespace

    from pytest_ddtree.pytest_plugin.analysis import untimed_reason

    guard = StallGuard(dead_limit=3, stops_run=True)
    guard.note(None, None, 200)  # the endpoint answered once: stalled, not down
    for _ in range(2):
        guard.note(ErrorKind.READ_TIMEOUT, "read timeout: no byte came in 15s", 0, where="h:1")
    runtime: Any = SimpleNamespace(client=SimpleNamespace(guard=guard))
    why = untimed_reason(start_error=None, interrupted=False, runtime=runtime, smoke_failure=None)
    assert why == (
        "the run stopped early: the endpoint at h:1 stalled on 2 requests in a row "
        "(read timeout: no byte came in 15s)"
    )
