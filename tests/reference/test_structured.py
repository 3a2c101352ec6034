"""Structured output and tool calls of the reference server, read on the raw wire: the JSON
validates against the schema sent at every budget, plain and streamed; speculation is
lossless under a grammar; tool calls come in the OpenAI shape and assemble alike."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import httpx
import jsonschema
import pytest

from ._helpers import LONG, SHORT, Stream, counts, post, stream

WEATHER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer"},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "tags"],
}
WEATHER_RF = {"type": "json_schema", "json_schema": {"name": "weather", "schema": WEATHER}}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The forecast of a city",
            "parameters": WEATHER,
        },
    },
    {
        "type": "function",
        "function": {"name": "find_person", "description": "A person", "parameters": PERSON},
    },
]
WEATHER_PROMPT = "What will the weather be in Venkabel?"
BUDGETS = [None, 4, 16, 64, 256]


def _message(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, r.text
    return dict(r.json()["choices"][0]["message"])


def _rf(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": True}}


def _calls(s: Stream) -> list[dict[str, Any]]:
    """The tool calls of a stream, assembled by index as OpenAI's clients do."""
    calls: dict[int, dict[str, Any]] = {}
    for c in s.chunks:
        for d in (c.get("choices") or [{}])[0].get("delta", {}).get("tool_calls") or []:
            call = calls.setdefault(d["index"], {"function": {"arguments": ""}})
            for key in ("id", "type"):
                if key in d:
                    call[key] = d[key]
            fn = d.get("function", {})
            if "name" in fn:
                call["function"]["name"] = fn["name"]
            call["function"]["arguments"] += fn.get("arguments") or ""
    return [calls[i] for i in sorted(calls)]


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize(
    ("prompt", "schema"), [(WEATHER_PROMPT, WEATHER), (LONG, PERSON), (SHORT, {"type": "object"})]
)
def test_json_schema_validates_plain_and_streamed(
    client: httpx.Client, prompt: str, schema: dict[str, Any], budget: int | None
) -> None:
    extra: dict[str, Any] = {"max_tokens": 256, "response_format": _rf(schema)}
    if budget is not None:
        extra["tree_budget"] = budget
    r = post(client, prompt, **extra)
    msg = _message(r)
    assert r.json()["choices"][0]["finish_reason"] == "stop"
    jsonschema.validate(json.loads(msg["content"]), schema)
    # small schemas end well within the limit: the grammar's end is the end of the turn
    assert r.json()["usage"]["completion_tokens"] <= 64
    s = stream(client, prompt, stream_options={"include_usage": True}, **extra)
    assert s.done and s.finish_reasons == ["stop"] and s.content == msg["content"]
    assert counts(s.usage) == counts(r.json()["usage"])


def test_json_object_is_an_object(client: httpx.Client) -> None:
    for prompt in (LONG, SHORT, WEATHER_PROMPT):
        msg = _message(post(client, prompt, response_format={"type": "json_object"}))
        assert isinstance(json.loads(msg["content"]), dict)


def test_text_format_is_prose(client: httpx.Client) -> None:
    plain = _message(post(client, SHORT))
    assert _message(post(client, SHORT, response_format={"type": "text"})) == plain


@pytest.mark.parametrize("budget", [4, 16, 64, 256, 1024])
def test_lossless_under_a_grammar(
    client: httpx.Client, target_client: httpx.Client, budget: int
) -> None:
    for prompt, schema in ((WEATHER_PROMPT, WEATHER), (LONG, PERSON), (SHORT, {"type": "object"})):
        rf = _rf(schema)
        base = post(target_client, prompt, response_format=rf, max_tokens=128).json()
        spec = post(client, prompt, response_format=rf, max_tokens=128, tree_budget=budget).json()
        assert spec["choices"][0]["message"] == base["choices"][0]["message"]
        assert counts(spec["usage"]) == counts(base["usage"])
        # speculation did take place: some round accepted drafted tokens
        assert spec["ddtree_stats"]["cycles"] < spec["usage"]["completion_tokens"]


def test_max_tokens_cuts_mid_json_with_length(client: httpx.Client) -> None:
    for max_tokens in (1, 6, 12):
        r = post(client, WEATHER_PROMPT, response_format=WEATHER_RF, max_tokens=max_tokens)
        body = r.json()
        assert body["choices"][0]["finish_reason"] == "length"
        assert body["usage"]["completion_tokens"] == max_tokens
        with pytest.raises(ValueError):
            json.loads(body["choices"][0]["message"]["content"])


@pytest.mark.parametrize(
    ("choice", "finish"),
    [
        ("required", "tool_calls"),
        ({"type": "function", "function": {"name": "get_weather"}}, "stop"),
    ],
)
@pytest.mark.parametrize("budget", [None, 16, 256])
def test_tool_call_plain_and_streamed(
    client: httpx.Client, choice: Any, finish: str, budget: int | None
) -> None:
    extra: dict[str, Any] = {"tools": TOOLS, "tool_choice": choice, "max_tokens": 128}
    if budget is not None:
        extra["tree_budget"] = budget
    r = post(client, WEATHER_PROMPT, **extra)
    body = r.json()
    msg = _message(r)
    assert msg["content"] is None and body["choices"][0]["finish_reason"] == finish
    (call,) = msg["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    jsonschema.validate(json.loads(call["function"]["arguments"]), WEATHER)
    # the arguments are the answer's tokens: the same JSON a response_format asks for
    same = post(client, WEATHER_PROMPT, response_format=WEATHER_RF, max_tokens=128, **_b(budget))
    assert same.json()["choices"][0]["message"]["content"] == call["function"]["arguments"]
    assert counts(same.json()["usage"]) == counts(body["usage"])

    s = stream(client, WEATHER_PROMPT, stream_options={"include_usage": True}, **extra)
    assert s.done and s.finish_reasons == [finish] and s.content == ""
    (streamed,) = _calls(s)
    assert streamed["function"] == call["function"]
    assert streamed["type"] == "function" and streamed["id"].startswith("call_")
    assert counts(s.usage) == counts(body["usage"])
    # the head carries id, type, name and empty arguments; then argument fragments only
    deltas = [
        d
        for c in s.chunks
        if c.get("choices")
        for d in c["choices"][0]["delta"].get("tool_calls") or []
    ]
    assert deltas[0] == {
        "index": 0,
        "id": streamed["id"],
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    assert all(
        set(d) == {"index", "function"} and set(d["function"]) == {"arguments"} for d in deltas[1:]
    )


def _b(budget: int | None) -> dict[str, Any]:
    return {} if budget is None else {"tree_budget": budget}


def test_tool_choice_policy(client: httpx.Client) -> None:
    def called(prompt: str, choice: Any) -> str | None:
        msg = _message(post(client, prompt, tools=TOOLS, tool_choice=choice, max_tokens=96))
        calls = msg.get("tool_calls")
        if not calls:
            assert isinstance(msg["content"], str) and msg["content"]
            return None
        return str(calls[0]["function"]["name"])

    # auto: a tool the prompt names (its name or a word of four letters or more of it)
    assert called(WEATHER_PROMPT, "auto") == "get_weather"
    assert called("Find the person who runs the mill.", "auto") == "find_person"
    assert called(LONG, "auto") is None
    assert called(WEATHER_PROMPT, None) == "get_weather"  # auto is the default with tools
    assert called(WEATHER_PROMPT, "none") is None
    # required: the tool the prompt names, else the first
    assert called("Find the person who runs the mill.", "required") == "find_person"
    assert called(LONG, "required") == "get_weather"
    named = {"type": "function", "function": {"name": "find_person"}}
    assert called(WEATHER_PROMPT, named) == "find_person"


def test_auto_call_finishes_with_tool_calls(client: httpx.Client) -> None:
    body = post(client, WEATHER_PROMPT, tools=TOOLS, max_tokens=96).json()
    assert body["choices"][0]["finish_reason"] == "tool_calls"


def test_tool_call_cut_by_max_tokens_is_length(client: httpx.Client) -> None:
    body = post(client, WEATHER_PROMPT, tools=TOOLS, tool_choice="required", max_tokens=8).json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 8


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"response_format": {"type": "yaml"}}, "response_format"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": WEATHER}}},
            "response_format",
        ),
        (
            {"response_format": _rf({"type": "objec"})},
            "response_format.json_schema.schema",
        ),
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"tools": TOOLS, "tool_choice": "always"}, "tool_choice"),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
        ),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]}, None),
    ],
)
def test_bad_fields_are_400_naming_the_field(
    client: httpx.Client, extra: dict[str, Any], param: str | None
) -> None:
    r = post(client, SHORT, **extra)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    if param is None:
        assert err["param"] == "tools[0].function.parameters"
    else:
        assert err["param"] == param


def test_completions_refuse_tools(client: httpx.Client) -> None:
    for field, value in (("tools", TOOLS), ("tool_choice", "auto")):
        r = client.post("/completions", json={"prompt": SHORT, "max_tokens": 8, field: value})
        assert r.status_code == 400 and r.json()["error"]["param"] == field
    # response_format is honoured on text completions, as vLLM does
    r = client.post("/completions", json={"prompt": SHORT, "response_format": WEATHER_RF})
    jsonschema.validate(json.loads(r.json()["choices"][0]["text"]), WEATHER)


def test_plain_requests_never_load_the_grammar_engine() -> None:
    code = (
        "import sys, httpx\n"
        "import pytest_ddtree.plugin\n"
        "from pytest_ddtree.reference import start_reference_server\n"
        "with start_reference_server(simulated_latency=False) as s:\n"
        "    r = httpx.post(s.base_url + '/chat/completions', json={'messages': "
        "[{'role': 'user', 'content': 'Hi?'}], 'max_tokens': 8})\n"
        "    assert r.status_code == 200\n"
        "    print('llguidance' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_reasoning_is_free_and_the_answer_holds_the_schema(
    client: httpx.Client, target_client: httpx.Client
) -> None:
    kw: dict[str, Any] = {
        "response_format": WEATHER_RF,
        "max_tokens": 256,
        "chat_template_kwargs": {"enable_thinking": True},
    }
    base = _message(post(target_client, WEATHER_PROMPT, **kw))
    assert base["reasoning_content"] and "{" not in base["reasoning_content"]
    jsonschema.validate(json.loads(base["content"]), WEATHER)
    for budget in (16, 256):
        assert _message(post(client, WEATHER_PROMPT, tree_budget=budget, **kw)) == base


def test_logprobs_under_a_grammar(client: httpx.Client) -> None:
    # a token the grammar imposed on the target is certain, as a forced token is: no
    # committed token is reported without probability
    body = post(
        client, WEATHER_PROMPT, response_format=WEATHER_RF, logprobs=True, top_logprobs=2
    ).json()
    entries = body["choices"][0]["logprobs"]["content"]
    assert len(entries) == body["usage"]["completion_tokens"]
    assert "".join(e["token"] for e in entries) == body["choices"][0]["message"]["content"]
    assert all(-50 < e["logprob"] <= 0 for e in entries)
