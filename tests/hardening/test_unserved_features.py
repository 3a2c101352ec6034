"""A deployment that does not serve a feature: its tests skip, with one summary line.

vLLM started without ``--tool-call-parser`` refuses every request that offers ``tools`` with
HTTP 400 and a message naming the field. The bundled suite's tool tests then skip, and the
closing summary says why in one line, with the option that makes the refusal a failure.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from ._hostile import HostileServer

#: vLLM's answer to a named tool_choice without a tool-call parser (its ErrorResponse shape)
VLLM_NO_PARSER = json.dumps(
    {
        "error": {
            "message": 'tool_choice=function "get_weather" requires --tool-call-parser to be set',
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    }
).encode()


def _tool_tests(pytester: pytest.Pytester, server: HostileServer, *extra: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "--pyargs",
        "pytest_ddtree.suite",
        f"--ddtree-endpoint={server.base_url}",
        f"--ddtree-baseline-endpoint={server.base_url}",
        "--ddtree-budgets=16",
        "-k",
        "tool-weather",
        "-p",
        "no:randomly",
        *extra,
        timeout=120,
    )


def test_tools_refused_by_the_deployment_skip_their_tests_with_one_summary_line(
    pytester: pytest.Pytester, hostile: Callable[..., HostileServer]
) -> None:
    server = hostile("healthy", refuse_tools=VLLM_NO_PARSER)
    result = _tool_tests(pytester, server)
    output = result.stdout.str()
    result.assert_outcomes(skipped=4)
    assert result.ret == pytest.ExitCode.OK, output
    result.stdout.fnmatch_lines(
        [
            'tools: not served by this deployment (HTTP 400: tool_choice=function "get_weather" '
            "requires --tool-call-parser to be set); 4 test(s) skipped; --ddtree-require tools "
            "makes this a failure",
            "4 test(s) skipped: 4 tools not served by this deployment (-rs lists them)",
        ]
    )
    assert output.count("not served by this deployment (HTTP 400") == 1, output


def test_a_required_feature_refused_by_the_deployment_fails_its_tests(
    pytester: pytest.Pytester, hostile: Callable[..., HostileServer]
) -> None:
    server = hostile("healthy", refuse_tools=VLLM_NO_PARSER)
    result = _tool_tests(pytester, server, "--ddtree-require=tools")
    result.assert_outcomes(failed=4)
    assert "not served by" not in result.stdout.str()


def test_a_400_that_names_no_feature_stays_a_failure(
    pytester: pytest.Pytester, hostile: Callable[..., HostileServer]
) -> None:
    generic = json.dumps({"error": {"message": "bad request", "code": 400}}).encode()
    server = hostile("healthy", refuse_tools=generic)
    result = _tool_tests(pytester, server)
    result.assert_outcomes(failed=4)
    assert "not served by" not in result.stdout.str()
