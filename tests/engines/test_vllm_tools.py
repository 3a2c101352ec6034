"""vLLM's tool calls, live: under a named or ``required`` ``tool_choice`` vLLM 0.32 with
``--tool-call-parser hermes`` answers SmolLM2's ``get_weather`` call with ``arguments``
``"\\"Paris\\""`` (a JSON string; the tool's parameters require an object). The check fails it
with ``tool-call``, and the target-only twin, which answers the same, names the serving stack,
never speculation. Its JSON-schema answer validates, plain and streamed.
"""

from __future__ import annotations

import pytest

from pytest_ddtree import engines
from pytest_ddtree.checks.diagnose import Diagnoser
from pytest_ddtree.checks.invariants import check, check_determinism
from pytest_ddtree.core.settings import Timeout
from pytest_ddtree.wire.client import DDTreeClient

pytestmark = pytest.mark.real_engine

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
PERSON = {
    "type": "json_schema",
    "json_schema": {
        "name": "person",
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"],
        },
    },
}


def client_for(server: engines.EngineProcess) -> DDTreeClient:
    return DDTreeClient(
        server.base_url,
        model=server.model,
        budget_mode="none",
        timeout=Timeout(connect=10, read=300, total=600),
    )


@pytest.mark.parametrize("choice", [NAMED, "required"], ids=["named", "required"])
def test_arguments_a_json_string_fail_and_name_the_serving_stack(
    vllm_ngram: engines.EngineProcess, vllm_target: engines.EngineProcess, choice: object
) -> None:
    with client_for(vllm_ngram) as client, client_for(vllm_target) as baseline:

        def ask(stream: bool):
            return client.chat(
                "What is the weather in Paris?",
                max_tokens=96,
                temperature=0,
                stream=stream,
                tree_budget=None,
                tools=[WEATHER],
                tool_choice=choice,
            )

        plain, streamed = ask(False), ask(True)
        assert check_determinism(streamed, plain) == []
        for answer in (plain, streamed):
            found = check(answer)
            assert [v.code for v in found] == ["tool-call"], found
            assert found[0].evidence["rule"] == 'type: "object"'
            verdict = Diagnoser(baseline).diagnose(answer, found, lambda c: list(check(c)))
            assert verdict.blame == "server", verdict.render()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_json_schema_answer_validates(vllm_ngram: engines.EngineProcess, stream: bool) -> None:
    with client_for(vllm_ngram) as client:
        answer = client.chat(
            "Describe a person called Ada who is 36 years old, as JSON.",
            max_tokens=96,
            temperature=0,
            stream=stream,
            tree_budget=None,
            response_format=PERSON,
        )
    assert list(check(answer, min_tokens=1)) == []


def test_a_deployment_without_a_tool_parser_skips_the_suites_tool_tests_in_one_line(
    vllm_ngram_summary: engines.EngineProcess,
    pytester: pytest.Pytester,
    user_env_cleared: None,
) -> None:
    """vLLM started without ``--tool-call-parser`` (``vllm_ngram_summary``) refuses a named
    ``tool_choice`` with HTTP 400; the bundled suite's tool tests skip, and the closing
    summary says so once, naming the option that makes it a failure."""
    result = pytester.runpytest_subprocess(
        "--pyargs",
        "pytest_ddtree.suite",
        "-p",
        "no:xdist",
        "-k",
        "tool-weather",
        f"--ddtree-endpoint={vllm_ngram_summary.base_url}",
        f"--ddtree-model={vllm_ngram_summary.model}",
        "--ddtree-budget-mode=none",
        "--ddtree-timeout=connect=10,read=300,total=600",
        timeout=900,
    )
    output = result.stdout.str()
    lines = [line for line in output.splitlines() if line.startswith("tools: not served by")]
    assert len(lines) == 1, output[-4000:]
    assert lines[0].startswith("tools: not served by this deployment (HTTP 400: "), lines[0]
    assert output.count("not served by this deployment (HTTP 400") == 1, output[-4000:]
    assert "tool-call-parser" in lines[0], lines[0]
    assert lines[0].endswith("--ddtree-require tools makes this a failure"), lines[0]
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) >= 1 and "failed" not in outcomes, output[-4000:]
    print(lines[0])  # the line the docs quote (-s shows it)
