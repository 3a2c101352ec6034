"""Which HTTP 400 answers refuse a feature (``core.features``), and ``--ddtree-require``."""

from __future__ import annotations

import pytest

from pytest_ddtree.core.features import refused_feature
from pytest_ddtree.core.options import resolve
from pytest_ddtree.core.settings import SettingsError

TOOLS = {"tools": [{"type": "function", "function": {"name": "get_weather"}}]}
VLLM = 'tool_choice=function "get_weather" requires --tool-call-parser to be set'


def test_a_400_naming_the_tool_fields_of_a_tool_request_refuses_tools() -> None:
    body = {"error": {"message": VLLM, "type": "BadRequestError", "param": None, "code": 400}}
    assert refused_feature(400, TOOLS, body) == ("tools", VLLM)
    assert refused_feature(400, TOOLS, VLLM) == ("tools", VLLM)  # the message alone


def test_structured_output_and_logprobs_refusals_are_named() -> None:
    schema = {"response_format": {"type": "json_schema", "json_schema": {"name": "p"}}}
    said = {"detail": "response_format json_schema is not supported by this server"}
    assert refused_feature(400, schema, said) == ("response_format", said["detail"])
    said = {"error": {"message": "logprobs is not supported with speculative decoding"}}
    assert refused_feature(400, {"logprobs": True}, said) == (
        "logprobs",
        said["error"]["message"],
    )


def test_a_refusal_that_names_no_field_the_request_asked_for_is_not_a_feature() -> None:
    # a generic 400, a 400 about another field, a feature the request did not ask for, a 500
    assert refused_feature(400, TOOLS, {"error": {"message": "bad request"}}) is None
    assert refused_feature(400, TOOLS, "max_tokens must be at most 2048") is None
    assert refused_feature(400, {"logprobs": False}, "logprobs are not served") is None
    assert refused_feature(400, {}, VLLM) is None
    assert refused_feature(500, TOOLS, VLLM) is None


def test_a_tool_choice_without_tools_is_a_malformed_request_not_a_feature_refused() -> None:
    # the server rightly refuses a tool_choice with no tools to choose from: the request is
    # wrong, and its refusal stays a failure (it used to skip as "tools: not served")
    said = "tool_choice 'required' needs tools"
    assert refused_feature(400, {"tool_choice": "required"}, said) is None
    assert refused_feature(400, {"tools": [], "tool_choice": "required"}, said) is None


def test_require_takes_features_and_an_alias_and_names_a_bad_value_with_its_source() -> None:
    assert resolve({"ddtree_require": "tools,json,logprobs"}, {}, {}).require == (
        "tools",
        "response_format",
        "logprobs",
    )
    with pytest.raises(SettingsError) as info:
        resolve({}, {}, {"DDTREE_REQUIRE": "tools,tool"})
    assert str(info.value) == (
        "invalid require 'tool' (from environment variable DDTREE_REQUIRE): known features "
        "are json, logprobs, response_format, tools"
    )
