"""json-schema, json-object, tool-call and json-cut: each rule once, and the answers that
must not be flagged (whitespace around JSON, a named tool_choice ending with 'stop', prose
under 'auto', a tool call with no text is not 'empty')."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from pytest_ddtree.checks.diagnose import Diagnoser, Diagnosis
from pytest_ddtree.checks.invariants import check
from pytest_ddtree.wire.completion import Completion, ToolCall
from tests.invariants.factories import (
    FakeCounter,
    assembled,
    chunk,
    completion,
    fake_count,
    request,
    split,
    usage_chunk,
)

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
RF_SCHEMA = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
RF_OBJECT = {"type": "json_object"}

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
GOOD_ARGS = '{"city": "Paris", "unit": "celsius"}'


def answer(
    text: str,
    *,
    finish: str | None = "stop",
    calls: tuple[ToolCall, ...] = (),
    tokens: int | None = None,
    max_tokens: int = 256,
    **fields: Any,
) -> Completion:
    """A completion of ``text`` to a chat request whose body carries ``fields`` (a call's
    tokens are not in the text: 12 of them unless ``tokens`` says otherwise)."""
    if tokens is None and calls:
        tokens = 12
    base = completion(text, finish=finish, tokens=tokens, max_tokens=max_tokens)
    spec = request(max_tokens=max_tokens, body={"model": "m", "max_tokens": max_tokens, **fields})
    return dataclasses.replace(base, request=spec, tool_calls=calls)


def call(arguments: str | None = GOOD_ARGS, *, name: str = "get_weather", id: str | None = "c1"):
    return ToolCall(0, id, name, arguments)


def codes(c: Completion, **expect: Any) -> list[str]:
    return [v.code for v in check(c, min_tokens=1, **expect)]


# -------------------------------------------------------------------- json-schema / object


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "Ada", "age": 36}',
        '\n  {"name":"Ada","age":36}\n\n',  # whitespace around JSON is JSON's own
    ],
    ids=["compact", "whitespace"],
)
def test_json_that_validates_passes(text: str) -> None:
    assert codes(answer(text, response_format=RF_SCHEMA)) == []


def test_a_short_json_answer_is_no_early_stop() -> None:
    # 8 tokens of JSON, closed: that is where the answer ends (no min_tokens given)
    found = check(answer('{"name": "Ada", "age": 36}', response_format=RF_SCHEMA))
    assert [v.code for v in found] == []


def test_a_fence_the_server_trimmed_is_no_usage_mismatch() -> None:
    # llama.cpp: SmolLM2 wrote "```json\n{...}\n```" (24 tokens with the end-of-sequence),
    # the content is the bare JSON (18 tokens)
    text = '{\n  "name": "Ada",\n  "age": 36\n}'
    local = fake_count(text)

    def found(tokens: int, **fields: Any) -> list[str]:
        c = answer(text, tokens=tokens, **fields)
        return [v.code for v in check(c, counter=FakeCounter(), min_tokens=1)]

    assert found(local + 6, response_format=RF_SCHEMA) == []
    assert found(local + 6) == ["usage-mismatch"]  # no JSON asked: no trimming to allow
    assert found(local + 20, response_format=RF_SCHEMA) == ["usage-mismatch"]


def test_the_json_trim_allowance_is_exactly_its_tokens_and_only_for_usage_above() -> None:
    # with no relative slack the allowance is the absolute slack plus JSON_TRIM_TOKENS
    from pytest_ddtree.checks.invariants._structured import JSON_TRIM_TOKENS
    from pytest_ddtree.core.expectation import Expectation

    text = '{\n  "name": "Ada",\n  "age": 36\n}'
    local = fake_count(text)
    edge = Expectation().usage_tolerance_abs + JSON_TRIM_TOKENS

    def found(tokens: int) -> list[str]:
        c = answer(text, tokens=tokens, response_format=RF_SCHEMA)
        return [v.code for v in check(c, counter=FakeCounter(), min_tokens=1, usage_tolerance=0)]

    assert found(local + edge) == []
    assert found(local + edge + 1) == ["usage-mismatch"]
    # the server trims what it generated: usage below the text's count is allowed no more
    assert found(local - Expectation().usage_tolerance_abs) == []
    assert found(local - Expectation().usage_tolerance_abs - 1) == ["usage-mismatch"]


def test_json_breaking_the_schema_names_the_path_and_rule() -> None:
    (v,) = check(answer('{"name": "Ada", "age": -3}', response_format=RF_SCHEMA), min_tokens=1)
    assert v.code == "json-schema"
    assert v.evidence["path"] == "$.age"
    assert v.evidence["rule"] == "minimum: 0"
    (v,) = check(answer('{"name": "Ada"}', response_format=RF_SCHEMA), min_tokens=1)
    assert v.evidence["path"] == "$" and v.evidence["rule"].startswith("required:")


def test_prose_under_a_schema_fails() -> None:
    (v,) = check(answer("The capital of Selanmar is Venkabel.", response_format=RF_SCHEMA))
    assert v.code == "json-schema" and "not JSON" in v.message


def test_json_in_a_markdown_fence_is_not_bare_json() -> None:
    fenced = '```json\n{"name": "Ada", "age": 36}\n```'
    (v,) = check(answer(fenced, response_format=RF_SCHEMA), min_tokens=1)
    assert v.code == "json-schema" and "fence" in v.message


def test_json_object() -> None:
    assert codes(answer('{"a": [1, 2]}', response_format=RF_OBJECT)) == []
    assert codes(answer("[1, 2]", response_format=RF_OBJECT)) == ["json-object"]
    assert codes(answer("yes", response_format=RF_OBJECT)) == ["json-object"]


def test_no_response_format_no_json_check() -> None:
    assert codes(answer("plain prose", response_format={"type": "text"})) == []


def test_a_json_answer_cut_by_max_tokens_is_named_not_judged() -> None:
    cut = answer(
        '{\n    "name": "', finish="length", tokens=6, max_tokens=6, response_format=RF_SCHEMA
    )
    (v,) = check(cut)
    assert v.code == "json-cut"
    assert v.message.startswith("cut by max_tokens after 6 tokens: raise max_tokens")


def test_prose_cut_by_max_tokens_is_not_json() -> None:
    # the embedded server before it honoured response_format: prose until max_tokens
    prose = "The capital of Selanmar is Venkabel, a city of rivers and bridges"
    cut = answer(prose, finish="length", tokens=14, max_tokens=14, response_format=RF_SCHEMA)
    (v,) = check(cut)
    assert v.code == "json-schema" and "not JSON" in v.message


def test_a_cut_answer_gets_no_layer_and_no_replay() -> None:
    cut = answer('{"name": "', finish="length", tokens=6, max_tokens=6, response_format=RF_SCHEMA)
    violations = check(cut)

    class NoReplay:
        base_url = "http://127.0.0.1:9"

        def replay(self, spec: Any) -> Completion:
            raise AssertionError("an unjudged answer must not be replayed")

    found = Diagnoser(NoReplay()).diagnose(cut, violations, lambda c: list(check(c)))  # type: ignore[arg-type]
    assert found.blame == "undetermined"
    assert "cut by max_tokens after 6 tokens" in found.reason
    assert "raise max_tokens" in found.advice


def test_an_invalid_schema_is_withheld_not_blamed_on_the_server() -> None:
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 12}}}
    found = check(answer('{"a": 1}', response_format=bad), min_tokens=1)
    assert list(found) == []
    (schema,) = [w for w in found.withheld if w.code == "json-schema"]
    # withheld for the request's own sake: no client stall to count
    assert "not a valid JSON Schema" in schema.reason and not schema.client_stalled


# ------------------------------------------------------------------------------ tool calls


def test_a_good_call_passes_and_is_not_empty() -> None:
    c = answer("", finish="tool_calls", calls=(call(),), tools=[WEATHER], tool_choice="required")
    assert codes(c) == []
    assert [v.code for v in check(c)] == []  # no early-stop, no usage count of empty text


def test_a_named_tool_choice_may_finish_with_stop() -> None:
    c = answer("", finish="stop", calls=(call(),), tools=[WEATHER, TIME], tool_choice=NAMED)
    assert codes(c) == []


def test_prose_under_auto_passes() -> None:
    assert codes(answer("It is sunny in Paris.", tools=[WEATHER])) == []
    assert codes(answer("It is sunny in Paris.", tools=[WEATHER], tool_choice="auto")) == []


@pytest.mark.parametrize("choice", ["required", NAMED], ids=["required", "named"])
def test_prose_where_a_call_is_required_fails(choice: Any) -> None:
    (v,) = check(answer("It is sunny.", tools=[WEATHER], tool_choice=choice), min_tokens=1)
    assert v.code == "tool-call" and "requires a tool call" in v.message


def test_the_vllm_hermes_answer_a_json_string_for_arguments_fails() -> None:
    # vLLM 0.32 --tool-call-parser hermes, named tool_choice: arguments "\"Paris\""
    c = answer("", calls=(call('"Paris"'),), tools=[WEATHER], tool_choice=NAMED)
    (v,) = check(c)
    assert v.code == "tool-call"
    assert v.evidence["path"] == "$" and v.evidence["rule"] == 'type: "object"'


@pytest.mark.parametrize(
    ("the_call", "finish", "words"),
    [
        (call(id=None), "tool_calls", "has no id"),
        (call(id=""), "tool_calls", "has no id"),
        (call(name="get_stock"), "tool_calls", "not one of the tools offered"),
        (call(""), "tool_calls", "arguments are not JSON"),  # vllm-ascend #11788
        (call(None), "tool_calls", "has no arguments"),
        (call('{"city": "Paris"}'), "tool_calls", "required"),
        (call('{"city": "Paris", "unit": "kelvin"}'), "tool_calls", "enum"),
        (call(), "stop", "finish_reason 'stop'"),  # stop only under a named choice
    ],
    ids=["no-id", "empty-id", "unknown-tool", "empty-args", "no-args", "missing", "enum", "stop"],
)
def test_broken_calls(the_call: ToolCall, finish: str, words: str) -> None:
    c = answer("", finish=finish, calls=(the_call,), tools=[WEATHER], tool_choice="required")
    found = check(c)
    assert [v.code for v in found] == ["tool-call"]
    assert words in found[0].message


def test_a_call_to_another_tool_than_the_named_one_fails() -> None:
    c = answer("", calls=(call("{}", name="get_time"),), tools=[WEATHER, TIME], tool_choice=NAMED)
    (v,) = check(c)
    assert v.code == "tool-call" and "named another tool" in v.message


def test_finish_tool_calls_without_a_call_fails() -> None:
    (v,) = check(answer("Sunny.", finish="tool_calls", tools=[WEATHER]), min_tokens=1)
    assert v.code == "tool-call" and "no call came" in v.message


def test_no_tools_offered_no_calls_allowed() -> None:
    assert codes(answer("", finish="tool_calls", calls=(call(),))) == ["tool-call", "finish-reason"]


def test_tool_choice_none_forbids_calls() -> None:
    c = answer("", finish="tool_calls", calls=(call(),), tools=[WEATHER], tool_choice="none")
    assert codes(c) == ["tool-call"]


def test_arguments_cut_by_max_tokens_are_named_not_judged() -> None:
    c = answer(
        "",
        finish="length",
        calls=(call('{"city": "Par'),),
        tokens=8,
        max_tokens=8,
        tools=[WEATHER],
        tool_choice="required",
    )
    (v,) = check(c)
    assert v.code == "json-cut" and "after 8 tokens" in v.message


@pytest.mark.parametrize("arguments", ["", " ", None], ids=["empty", "blank", "none-yet"])
def test_a_call_cut_right_after_its_name_is_json_cut(arguments: str | None) -> None:
    # max_tokens ran out after the name: the arguments never started, as content that is cut
    # before its JSON closed
    c = answer(
        "",
        finish="length",
        calls=(call(arguments),),
        tokens=8,
        max_tokens=8,
        tools=[WEATHER],
        tool_choice="required",
    )
    (v,) = check(c)
    assert v.code == "json-cut" and "after 8 tokens" in v.message
    # not cut: empty arguments are still no JSON
    whole = dataclasses.replace(c, finish_reason="tool_calls")
    assert codes(whole) == ["tool-call"]


def test_prose_cut_by_max_tokens_under_required_is_judged() -> None:
    # llama.cpp without --jinja ignores the tools: prose until max_tokens, no call
    prose = answer(
        "Paris, the City of Light, is sunny.",
        finish="length",
        tokens=8,
        max_tokens=8,
        tools=[WEATHER],
        tool_choice=NAMED,
    )
    assert codes(prose) == ["tool-call"]
    unparsed = dataclasses.replace(prose, text='<tool_call>\n{"name": "get_')
    assert codes(unparsed) == ["json-cut"]


def test_no_tool_call_at_all_is_empty() -> None:
    # tools offered, tool_choice auto, nothing came back: empty, and no tool-call on top
    nothing = dataclasses.replace(answer("", tools=[WEATHER]), stats=None)
    found = check(nothing, min_tokens=1)
    assert [(v.code, v.message) for v in found] == [("empty", "HTTP 200 with empty content")]


# ------------------------------------------------- streamed: assembled from the events


def streamed_content(text: str, *, finish: str = "stop", **fields: Any) -> Completion:
    """``text`` streamed in pieces of a few characters to a request carrying ``fields``."""
    pieces = [chunk({"content": p}) for p in split(text, max(1, len(text) // 3))]
    tail = [chunk({}, finish=finish), usage_chunk(fake_count(text))]
    body = {"model": "m", "max_tokens": 256, **fields}
    return assembled([chunk({"role": "assistant"}), *pieces, *tail], body, reads=5)


def streamed_call(
    fragments: list[str], *, finish: str = "tool_calls", id: str | None = "c1", **fields: Any
) -> Completion:
    """One call to get_weather streamed as OpenAI does: its id and name first (arguments
    ""), then the arguments in ``fragments``."""
    head: dict[str, Any] = {"index": 0, "type": "function"}
    head["function"] = {"name": "get_weather", "arguments": ""}
    if id is not None:
        head["id"] = id
    deltas = [chunk({"role": "assistant", "tool_calls": [head]})]
    deltas += [
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": f}}]}) for f in fragments
    ]
    deltas += [chunk({}, finish=finish), usage_chunk(12)]
    body = {"model": "m", "max_tokens": 256, "tools": [WEATHER], **fields}
    return assembled(deltas, body, reads=3)


def test_streamed_json_is_judged_on_the_assembled_content() -> None:
    good = streamed_content('{"name": "Ada", "age": 36}', response_format=RF_SCHEMA)
    assert good.stream is not None and codes(good) == []
    (v,) = check(streamed_content('{"name": "Ada", "age": -3}', response_format=RF_SCHEMA))
    assert v.code == "json-schema" and v.evidence["path"] == "$.age"
    (v,) = check(streamed_content("Ada is 36.", response_format=RF_OBJECT), min_tokens=1)
    assert v.code == "json-object" and "not JSON" in v.message


def test_streamed_json_cut_by_max_tokens_is_json_cut() -> None:
    text = '{"name": "Ad'
    cut = streamed_content(
        text, finish="length", max_tokens=fake_count(text), response_format=RF_SCHEMA
    )
    assert codes(cut) == ["json-cut"]


def test_a_streamed_call_is_judged_on_its_assembled_arguments() -> None:
    good = streamed_call(['{"city": ', '"Paris", "unit": ', '"celsius"}'], tool_choice="required")
    assert good.tool_calls and good.tool_calls[0].arguments == GOOD_ARGS
    assert codes(good) == []
    (v,) = check(streamed_call(['{"city": "Paris", ', '"unit": "kelvin"}']), min_tokens=1)
    assert v.code == "tool-call" and v.evidence["path"] == "$.unit"
    (v,) = check(streamed_call(['{"city": "Paris"', "]"]), min_tokens=1)
    assert v.code == "tool-call" and "arguments are not JSON" in v.message
    (v,) = check(streamed_call([GOOD_ARGS], id=None), min_tokens=1)
    assert v.code == "tool-call" and "has no id" in v.message


def test_a_streamed_call_cut_after_its_name_is_json_cut() -> None:
    after_name = streamed_call([], finish="length", max_tokens=12, tool_choice="required")
    assert after_name.tool_calls[0].arguments == ""
    assert codes(after_name) == ["json-cut"]
    assert codes(streamed_call(['{"city": "Pa'], finish="length", max_tokens=12)) == ["json-cut"]


# ---------------------------------------------------- diagnosis: the baseline decides


class _Baseline:
    """A target-only baseline that answers every replay with ``reply``."""

    base_url = "http://127.0.0.1:9"

    def __init__(self, reply: Completion) -> None:
        self.reply = reply

    def replay(self, spec: Any) -> Completion:
        return dataclasses.replace(self.reply, request=spec)

    def props(self) -> None:  # says nothing of its chat template (no GET /props)
        return None


def _diagnosis(ours: Completion, theirs: Completion) -> Diagnosis:
    validate = lambda c: list(check(c, min_tokens=1))  # noqa: E731
    return Diagnoser(_Baseline(theirs)).diagnose(ours, validate(ours), validate)  # type: ignore[arg-type]


def _diagnose(ours: Completion, theirs: Completion) -> str:
    return _diagnosis(ours, theirs).blame


def test_a_broken_call_the_baseline_shares_is_the_serving_stack() -> None:
    broken = answer("", calls=(call('"Paris"'),), tools=[WEATHER], tool_choice=NAMED)
    found = _diagnosis(broken, broken)
    assert found.blame == "server"
    # the advice names the stack's tool support, not its resources or the network
    assert found.advice.startswith("the target-only server breaks the tool call the same way")
    assert "the network" not in found.advice


def test_the_shared_failures_advice_names_the_feature_only_when_it_is_all_that_broke() -> None:
    from pytest_ddtree.checks.blame import SERVER_ADVICE, server_advice

    follows = ("overrun", "finish-reason", "empty")
    assert server_advice(["tool-call", "finish-reason"], follows).startswith(
        "the target-only server breaks the tool call the same way"
    )
    # two features: both named, in a fixed order, the closing clause once
    both = server_advice(["tool-call", "stop-sequence"], follows)
    assert both.index("tool call") < both.index("stop sequence")
    assert both.count("speculation is not the cause") == 1
    # a cut stream beside a broken schema points at the stream first
    assert server_advice(["json-schema", "stream-integrity"], follows) == SERVER_ADVICE
    assert server_advice(["http-error"], follows) == SERVER_ADVICE


def test_a_broken_schema_the_baseline_keeps_is_speculation() -> None:
    ours = answer('{"name": "Ada", "age": "36"}', response_format=RF_SCHEMA)
    theirs = answer('{"name": "Ada", "age": 36}', response_format=RF_SCHEMA)
    assert _diagnose(ours, theirs) == "speculation"
    shared = _diagnosis(ours, ours)
    assert shared.blame == "server" and "structured-output backend" in shared.advice


def test_arguments_of_the_same_call_compare_as_json(tmp_path: Any) -> None:
    from pytest_ddtree.checks.invariants import check_determinism

    a = answer("", calls=(call('{"city": "Paris", "unit": "celsius"}'),), tools=[WEATHER])
    b = answer("", calls=(call('{"city":"Paris","unit":"celsius"}', id="c2"),), tools=[WEATHER])
    a, b = (dataclasses.replace(x, finish_reason="tool_calls") for x in (a, b))
    assert check_determinism(a, b) == []
    c = dataclasses.replace(b, tool_calls=(call(json.dumps({"city": "Lyon", "unit": "celsius"})),))
    (v,) = check_determinism(a, c)
    assert v.code == "nondeterministic" and "tool call" in v.message


def test_losslessness_compares_the_calls_too() -> None:
    from pytest_ddtree.checks.lossless import compare_lossless
    from pytest_ddtree.core.settings import Settings

    ref = answer("", finish="tool_calls", calls=(call(),), tools=[WEATHER])
    same = dataclasses.replace(ref, tool_calls=(call(id="other-id"),))
    dropped = dataclasses.replace(ref, tool_calls=(call('{"city": "Paris"}'),))
    result = compare_lossless(ref, {16: same, 64: dropped}, Settings().lossless)
    assert list(result.divergences) == [64]
