"""The shipped JSON Schemas and the schema check."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_ddtree.checks.invariants import SCHEMA_NAMES, check, load_schema, schema_errors
from pytest_ddtree.checks.invariants._fastschema import compile_schema
from pytest_ddtree.checks.invariants._schema import _fast, validator
from pytest_ddtree.wire.completion import StreamInfo

from .factories import chat_body, chunks_for, completion, split

USAGE = {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}
STATS = {
    "tree_budget": 64,
    "cycles": 3,
    "avg_acceptance": 2.33,
    "tok_per_sec": 812.5,
    "block_size": 16,
}


def codes(c):
    return [v.code for v in check(c)]


def test_every_schema_loads_and_declares_an_id():
    for name in SCHEMA_NAMES:
        schema = load_schema(name)
        assert schema["$id"].endswith(name)
    with pytest.raises(ValueError, match="unknown schema 'nope'"):
        load_schema("nope")


def test_validators_are_built_once():
    assert validator("chat.completion") is validator("chat.completion")


def test_healthy_documents_validate():
    assert schema_errors("chat.completion", chat_body("hi", usage=USAGE, stats=STATS)) is None
    for chunk in chunks_for(["a", "b"], usage=USAGE, stats=STATS):
        assert schema_errors("chat.completion.chunk", chunk) is None
    assert schema_errors("error", {"error": {"message": "m", "type": "t", "code": 400}}) is None
    assert schema_errors("ddtree_stats", STATS) is None
    no_echo = {k: v for k, v in STATS.items() if k != "tree_budget"}
    assert schema_errors("ddtree_stats", no_echo) is None
    text_body = {
        "id": "c",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
    }
    assert schema_errors("text_completion", text_body) is None


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        (("object",), "chat.completions", "object"),
        (("choices",), [], "choices"),
        (("usage", "completion_tokens"), -1, "usage/completion_tokens"),
        (("usage", "prompt_tokens"), "5", "usage/prompt_tokens"),
        (("ddtree_stats", "avg_acceptance"), "fast", "ddtree_stats/avg_acceptance"),
        (("created",), "yesterday", "created"),
    ],
)
def test_broken_body_names_the_path(path, value, where):
    body = chat_body("hi", usage=dict(USAGE), stats=dict(STATS))
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    c = completion("hi " * 10, raw=body, tokens=14)
    v = next(v for v in check(c) if v.code == "schema")
    assert where in v.message


def test_missing_body_is_a_schema_violation():
    assert "schema" in codes(completion(raw=None))


def test_completions_api_uses_the_text_completion_schema():
    c = completion(raw=chat_body("hi"))
    c = dataclasses.replace(c, request=dataclasses.replace(c.request, api="completions"))
    v = next(v for v in check(c) if v.code == "schema")
    assert "text_completion" in v.message


def stream_completion(chunks):
    return completion(
        stream=True,
        raw=chunks,
        stream_info=StreamInfo(events=len(chunks) + 1, done_seen=True, finish_chunks=1),
    )


def test_malformed_middle_chunk_is_found_by_the_cheap_check():
    chunks = chunks_for(split("word " * 300, 200), usage=USAGE)
    chunks[101] = copy.deepcopy(chunks[101])
    chunks[101]["choices"][0]["delta"]["content"] = 42
    v = next(v for v in check(stream_completion(chunks)) if v.code == "schema")
    assert "chunk 101" in v.message and "delta/content" in v.message


def test_finish_and_usage_chunks_get_the_full_schema():
    chunks = chunks_for(split("word " * 300, 200), usage=dict(USAGE))
    chunks[-1]["usage"]["completion_tokens"] = "seven"
    v = next(v for v in check(stream_completion(chunks)) if v.code == "schema")
    assert "usage/completion_tokens" in v.message
    chunks = chunks_for(split("word " * 300, 200), usage=USAGE)
    chunks[-2]["choices"][0]["finish_reason"] = 3
    v = next(v for v in check(stream_completion(chunks)) if v.code == "schema")
    assert "finish_reason" in v.message


def test_error_events_are_left_to_stream_error():
    chunks = chunks_for(["a"], usage=USAGE)
    chunks.insert(1, {"error": {"message": "boom"}})
    assert "schema" not in codes(stream_completion(chunks))


def test_stream_raw_must_be_a_list():
    c = completion(stream=True, raw={"not": "a list"})
    assert "schema" in codes(c)


# --- the compiled fast validator agrees with jsonschema -------------------------------


leaves = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([1.0, 2.5, -0.5])
    | st.floats(allow_nan=True)
    | st.sampled_from(["", "x", "chat.completion", "chat.completion.chunk", "assistant"])
)
json_values = st.recursive(
    leaves,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=10,
)
VALID = [
    ("chat.completion", chat_body("hi", usage=USAGE, stats=STATS, reasoning="r")),
    ("chat.completion.chunk", chunks_for(["a"], usage=USAGE, stats=STATS)[1]),
    ("chat.completion.chunk", chunks_for(["a"], usage=USAGE, stats=STATS)[-1]),
    ("usage", {**USAGE, "completion_tokens_details": {"reasoning_tokens": 1}}),
    ("ddtree_stats", STATS),
    ("error", {"error": {"message": "m", "type": "t", "param": None, "code": 1}}),
]


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated(draw):
    name, doc = draw(st.sampled_from(VALID))
    doc = copy.deepcopy(doc)
    path = draw(st.sampled_from(list(_paths(doc))))
    if not path:
        return name, draw(json_values)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if isinstance(parent, dict) and draw(st.booleans()):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(json_values)
    return name, doc


@settings(max_examples=300, deadline=None)
@given(mutated())
def test_fast_validator_agrees_with_jsonschema_on_near_valid_documents(case):
    name, doc = case
    assert _fast(name)(doc) == validator(name).is_valid(doc)


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_fast_validator_agrees_with_jsonschema_on_arbitrary_json(doc):
    for name in SCHEMA_NAMES:
        assert _fast(name)(doc) == validator(name).is_valid(doc)


def test_fast_validator_rejects_unsupported_keywords():
    with pytest.raises(ValueError, match="not supported"):
        compile_schema({"type": "string", "pattern": "^a"}, lambda uri: lambda x: True)
