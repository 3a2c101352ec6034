"""The plugin against a hostile server: every failure named with its code, the session bounded
in time, the rest of the run unaffected.

Each inner run is a real ``pytest`` subprocess (pytester) against ``_hostile.HostileServer`` on
127.0.0.1. The ``timeout`` given to each run is a hang guard (the run is killed and the test
fails if it is exceeded), not a performance assertion: the bound it states is the total
deadline times the number of requests that can meet it, plus start-up.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable

import pytest

from ._hostile import HostileServer

# mode -> (stream?, the code its test must fail with, text the message must contain)
FAILING: dict[str, tuple[bool, str, str]] = {
    "trickle": (True, "stream-integrity", "deadline"),
    "trickle-headers": (True, "http-error", "deadline"),
    "trickle-body": (False, "http-error", "deadline"),
    "endless": (True, "too-large", "max-response-bytes"),
    "huge": (False, "too-large", "max-response-bytes"),
    "reset": (True, "stream-integrity", "reset"),
    "reset-before": (True, "http-error", "reset"),
    "bad-utf8": (True, "encoding", "invalid UTF-8 at byte"),
    "bad-utf8-plain": (False, "encoding", "invalid UTF-8 at byte"),
    "deep": (True, "stream-integrity", "nested too deep"),
    "deep-plain": (False, "http-error", "nested too deep"),
    "json-stream": (True, "stream-integrity", "Content-Type 'application/json'"),
    "429": (True, "http-error", "HTTP 429"),
}

TIMEOUT = "connect=2,read=5,total=3"


def _test_file() -> str:
    lines = [
        "PROMPT = 'Tell me about rivers.'",
        "",
        "def _run(client, check, mode, stream):",
        "    headers = {'X-Hostile-Mode': mode} if mode else {}",
        "    check(client.chat(PROMPT, max_tokens=96, stream=stream, headers=headers))",
        "",
    ]
    for i, (mode, (stream, _, _)) in enumerate(FAILING.items()):
        name = mode.replace("-", "_")
        lines += [
            f"def test_{i:02d}_{name}(ddtree_client, ddtree_check):",
            f"    _run(ddtree_client, ddtree_check, {mode!r}, {stream})",
            "",
            # a healthy plain request after each: the run goes on, and the stall guard resets
            f"def test_{i:02d}_{name}_then_healthy(ddtree_client, ddtree_check):",
            "    _run(ddtree_client, ddtree_check, None, False)",
            "",
        ]
    lines += [
        "def test_zz_stale_keepalive(ddtree_client, ddtree_check):",
        "    _run(ddtree_client, ddtree_check, None, False)  # pools a keep-alive connection",
        "    _run(ddtree_client, ddtree_check, 'stale', False)",
        "",
    ]
    return "\n".join(lines)


def _failures(xml_path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        failure = case.find("failure")
        out[case.get("name", "")] = (
            "" if failure is None else failure.get("message", "") + (failure.text or "")
        )
    return out


# one whole hostile run: every mode in one session (the healthy test after each, the retry and
# 429 counts of the session); its time is the trickling modes' deadlines, which no smaller
# selection of modes proves for the others
@pytest.mark.slow
def test_every_hostile_mode_fails_its_own_test_with_its_code(
    pytester: pytest.Pytester, hostile: Callable[..., HostileServer]
) -> None:
    server = hostile(interval=0.2, trickle_for=60)
    pytester.makepyfile(test_hostile_modes=_test_file())
    # 13 modes, at most one 3 s deadline each (two for the stream that is also retried): the
    # hang guard allows twice that plus start-up
    result = pytester.runpytest_subprocess(
        f"--ddtree-endpoint={server.base_url}",
        f"--ddtree-timeout={TIMEOUT}",
        # the endless stream must reach the byte cap before the 3 s deadline on a busy machine
        # too: the default 8 MiB took more than 3 s to read on a loaded CI runner (3.15 MB)
        "--ddtree-max-response-bytes=1MiB",
        "--junitxml=junit.xml",
        "-p",
        "no:randomly",
        timeout=120,
    )
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "INTERNALERROR" not in output, output[-4000:]
    result.assert_outcomes(failed=len(FAILING), passed=len(FAILING) + 1)
    failures = _failures(str(pytester.path / "junit.xml"))
    for i, (mode, (_, code, text)) in enumerate(FAILING.items()):
        name = mode.replace("-", "_")
        message = failures[f"test_{i:02d}_{name}"]
        assert f"[{code}]" in message, (mode, message[:2000])
        assert text in message, (mode, message[:2000])
        assert failures[f"test_{i:02d}_{name}_then_healthy"] == "", mode
        # the client's own trouble is never blamed on speculation or the template
        assert "diagnosis: speculative decoding" not in message, mode
        assert "diagnosis: prompt / chat template" not in message, mode
    # the stale keep-alive connection was retried once, on a fresh connection, and said so
    # (and so was the reset-before-any-byte, which came on a reused connection too)
    assert server.stale_closed == 1
    result.stdout.fnmatch_lines(
        ["*2 request(s) sent again on a fresh connection after a reused keep-alive*"]
    )
    result.stdout.fnmatch_lines(["*1 HTTP 429 (rate-limited) answer(s); 0 retried*"])


def test_trickled_model_list_stops_start_up_in_one_line(
    pytester: pytest.Pytester, hostile: Callable[..., HostileServer]
) -> None:
    server = hostile(trickle_models=True, interval=0.5, trickle_for=60)
    pytester.makepyfile("def test_x(ddtree_client):\n    pass\n")
    result = pytester.runpytest_subprocess(
        f"--ddtree-endpoint={server.base_url}",
        "--ddtree-timeout=connect=1,read=2,total=30",
        timeout=60,
    )
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output
    assert "Traceback" not in output and "INTERNALERROR" not in output, output
    # the probe's bound is connect + read (3 s), not the 30 s request deadline
    assert "/models: no complete answer within 3s" in output, output


def test_deeply_nested_model_list_is_one_line(
    pytester: pytest.Pytester, hostile: Callable[..., HostileServer]
) -> None:
    server = hostile()
    server.models_body = b"[" * 100_000 + b"]" * 100_000
    pytester.makepyfile("def test_x(ddtree_client):\n    pass\n")
    result = pytester.runpytest_subprocess(f"--ddtree-endpoint={server.base_url}", timeout=60)
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output
    assert "Traceback" not in output and "INTERNALERROR" not in output, output
    assert "is not an OpenAI model list" in output, output


def test_a_dying_server_fails_the_later_tests_and_the_session_ends(
    pytester: pytest.Pytester, hostile: Callable[..., HostileServer]
) -> None:
    server = hostile()
    pytester.makepyfile(
        """
        def test_a(ddtree_client, ddtree_check):
            ddtree_check(ddtree_client.chat("Rivers?", max_tokens=96,
                                            headers={"X-Hostile-Mode": "die"}))

        def test_b(ddtree_client, ddtree_check):
            ddtree_check(ddtree_client.chat("Rivers?", max_tokens=96))

        def test_c(ddtree_client, ddtree_check):
            ddtree_check(ddtree_client.chat("Rivers?", max_tokens=96))
        """
    )
    result = pytester.runpytest_subprocess(
        f"--ddtree-endpoint={server.base_url}",
        "--ddtree-timeout=connect=2,read=5,total=5",
        timeout=60,
    )
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "INTERNALERROR" not in output, output
    result.assert_outcomes(passed=1, failed=2)
    # once per failing test in the failure reports (the short summary repeats the message
    # whole when CI is set, so count above it)
    reports = output.split("short test summary info")[0]
    assert reports.count("[http-error]") == 2, output
    assert "cannot connect" in output or "ConnectError" in output, output


def test_a_failing_token_counter_is_named_once_and_tests_go_on(
    pytester: pytest.Pytester, hostile: Callable[..., HostileServer]
) -> None:
    server = hostile(tokenize="flaky")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", range(5))
        def test_answer(ddtree_client, ddtree_check, n):
            ddtree_check(ddtree_client.chat(f"Rivers {n}?", max_tokens=96))
        """
    )
    result = pytester.runpytest_subprocess(
        f"--ddtree-endpoint={server.base_url}", "--ddtree-tokenizer=server", timeout=60
    )
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "INTERNALERROR" not in output, output
    result.assert_outcomes(passed=5)
    lines = [line for line in output.splitlines() if "the token counter failed" in line]
    assert len(lines) == 1, output
    # counted on every call (the client's and the checks', at least one per request), named once
    times = re.search(r"the token counter failed (\d+) time\(s\)", lines[0])
    assert times is not None and int(times.group(1)) >= 5, lines
    assert "HTTP 500" in lines[0] and "did not run" in lines[0], lines


def test_429_retry_is_opt_in_and_counted(
    pytester: pytest.Pytester, hostile: Callable[..., HostileServer]
) -> None:
    server = hostile("429-once")
    pytester.makepyfile(
        """
        def test_a(ddtree_client, ddtree_check):
            ddtree_check(ddtree_client.chat("Rivers?", max_tokens=96))

        def test_b(ddtree_client, ddtree_check):
            ddtree_check(ddtree_client.chat("Lakes?", max_tokens=96))
        """
    )
    result = pytester.runpytest_subprocess(
        f"--ddtree-endpoint={server.base_url}", "--ddtree-retry-429=2", timeout=60
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*2 HTTP 429 (rate-limited) answer(s); 2 retried*"])
    assert server.modes_seen.count("429-once") == 4  # two 429s, two answers
