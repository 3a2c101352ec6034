"""A token counter that fails (``/tokenize`` answering HTTP 500) never ends the losslessness or
determinism tests in a traceback, and the failing counter is named once in the summary (the
divergence located without it: ``tests/core/test_comparable.py``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ._hostile import HostileServer

TESTS = """
def test_lossless(ddtree_lossless):
    ddtree_lossless("Tell me about rivers.", max_tokens=96)

def test_determinism(ddtree_determinism):
    ddtree_determinism("Tell me about rivers.", "Tell me about lakes.", max_tokens=96)
"""


def _counter_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("ddtree: the token counter")]


def test_flaky_tokenizer_lossless_runs_without_traceback(
    pytester: pytest.Pytester, hostile: Callable[..., HostileServer]
) -> None:
    server = hostile(tokenize="flaky")
    pytester.makepyfile(TESTS)
    # a subprocess: its timeout guards the run against a hang
    result = pytester.runpytest_subprocess(
        f"--ddtree-endpoint={server.base_url}",
        "--ddtree-tokenizer=server",
        "--ddtree-budgets=16,64",
        timeout=60,
    )
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "INTERNALERROR" not in output, output
    result.assert_outcomes(passed=2)
    lines = _counter_lines(output)
    assert len(lines) == 1 and "HTTP 500" in lines[0], output


def test_the_bundled_streaming_tests_name_a_failing_counter_once_without_traceback(
    pytester: pytest.Pytester, hostile: Callable[..., HostileServer]
) -> None:
    """A server that sends no usage and whose /tokenize answers 500 after the probe: the
    bundled test that counts the events skips on the plugin's named counter failure."""
    server = hostile("paced", tokenize="flaky", interval=0.002)
    # a subprocess: its timeout guards the run against a hang
    result = pytester.runpytest_subprocess(
        "--pyargs",
        "pytest_ddtree.suite.test_streaming",
        "-k",
        "incrementally or first_token",
        f"--ddtree-endpoint={server.base_url}",
        "--ddtree-tokenizer=server",
        "-rs",
        timeout=120,
    )
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "INTERNALERROR" not in output, output
    assert "RuntimeError" not in output.replace(_counter_lines(output)[0], ""), output
    result.assert_outcomes(passed=1, skipped=1)
    assert "event sizes not checked: the token counter failed" in output, output
    lines = _counter_lines(output)
    assert len(lines) == 1 and "HTTP 500" in lines[0], output
