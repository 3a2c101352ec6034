"""vLLM 0.32's real answers to a tool call and a JSON schema, replayed byte for byte.

Recorded by ``tests/recorded/record_vllm_tools.py`` from vLLM with ``--tool-call-parser
hermes``, once with n-gram speculation (``ngram/``) and once target-only (``target/``).
Offered ``get_weather`` (parameters: an object with ``city`` and ``unit``) under a named or
``required`` ``tool_choice``, vLLM answers ``arguments: "\\"Paris\\""``: a JSON string. It
must fail with ``tool-call`` and, with the target-only twin as baseline, name the serving
stack, not speculation. Its JSON-schema answers validate and must pass.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

RECORDED = Path(__file__).parents[1] / "recorded" / "vllm" / "tools"


def _name(body: dict[str, Any]) -> str:
    mode = "stream" if body.get("stream") else "plain"
    if "response_format" in body:
        return f"json_schema_{mode}"
    kind = "required" if body.get("tool_choice") == "required" else "named"
    return f"tool_{kind}_{mode}"


def _replay(label: str) -> type[BaseHTTPRequestHandler]:
    class Replay(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            models = {"object": "list", "data": [{"id": "smollm2", "object": "model"}]}
            self._send(200, "application/json", json.dumps(models).encode())

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            record = json.loads((RECORDED / label / f"{_name(body)}.json").read_text())
            self._send(record["status"], record["content_type"], record["body"].encode())

    return Replay


@pytest.fixture
def replays(loopback: Callable[[ThreadingHTTPServer], str]) -> tuple[str, str]:
    ngram = loopback(ThreadingHTTPServer(("127.0.0.1", 0), _replay("ngram")))
    target = loopback(ThreadingHTTPServer(("127.0.0.1", 0), _replay("target")))
    return ngram + "/v1", target + "/v1"


def test_the_recordings_hold_the_finding() -> None:
    for label in ("ngram", "target"):
        for name, finish in (("tool_named_plain", "stop"), ("tool_required_plain", "tool_calls")):
            record = json.loads((RECORDED / label / f"{name}.json").read_text())
            choice = json.loads(record["body"])["choices"][0]
            assert choice["finish_reason"] == finish
            assert choice["message"]["tool_calls"][0]["function"]["arguments"] == '"Paris"'
    spec = json.loads((RECORDED / "ngram" / "tool_named_plain.json").read_text())["body"]
    assert "speculative_decoding" in spec  # the n-gram recording did speculate


WEATHER_TEST = """
import json, pathlib, pytest
from pytest_ddtree import InvariantError, check_determinism

RECORD = json.loads(pathlib.Path({record!r}).read_text())["request"]

def ask(client, stream, **fields):
    body = dict(RECORD, **fields)
    return client.request(body["messages"], max_tokens=body["max_tokens"], temperature=0,
                          stream=stream, tree_budget=None, tools=body["tools"],
                          tool_choice=body["tool_choice"])

@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("choice", ["named", "required"])
def test_weather(ddtree_client, ddtree_check, stream, choice):
    fields = {{"tool_choice": "required"}} if choice == "required" else {{}}
    c = ask(ddtree_client, stream, **fields)
    assert [t.arguments for t in c.tool_calls] == ['"Paris"']
    ddtree_check(c)

def test_streamed_calls_equal_plain(ddtree_client):
    assert check_determinism(ask(ddtree_client, True), ask(ddtree_client, False)) == []

@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_json_schema(ddtree_client, ddtree_check, stream):
    body = json.loads(pathlib.Path({schema!r}).read_text())["request"]
    c = ddtree_client.request(body["messages"], max_tokens=body["max_tokens"], temperature=0,
                              stream=stream, tree_budget=None,
                              response_format=body["response_format"])
    assert json.loads(c.text) == {{"name": "Ada", "age": 36}}
    ddtree_check(c, min_tokens=1)
"""


def test_vllm_tool_arguments_a_json_string_fail_and_name_the_serving_stack(
    pytester: pytest.Pytester, replays: tuple[str, str]
) -> None:
    ngram, target = replays
    pytester.makepyfile(
        WEATHER_TEST.format(
            record=str(RECORDED / "ngram" / "tool_named_plain.json"),
            schema=str(RECORDED / "ngram" / "json_schema_plain.json"),
        )
    )
    result = pytester.runpytest(
        f"--ddtree-endpoint={ngram}",
        f"--ddtree-baseline-endpoint={target}",
        "--ddtree-model=smollm2",
        "--ddtree-budget-mode=none",
        "--ddtree-tokenizer=none",
        "-p",
        "no:randomly",
        # no short summary: under CI=true pytest prints each failure's whole message there too
        "-rN",
        "--junitxml=junit.xml",
    )
    result.assert_outcomes(failed=4, passed=3)
    out = result.stdout.str()
    # each failing test carries the whole evidence and the diagnosis (JUnit XML: one
    # failure each); the terminal prints a repeated one once and refers back to it
    failures = [f.text or "" for f in ET.parse(pytester.path / "junit.xml").iter("failure")]
    assert len(failures) == 4
    for text in failures:
        assert "[tool-call] tool call 0 (get_weather): arguments break the tool's" in text
        assert 'rule: type: "object"' in text
        assert (
            "diagnosis: serving stack - the target-only baseline fails the same way (tool-call)"
            in text
        )
        # the advice names the stack's tool support, not its resources or the network
        advice = "what to do: the target-only server breaks the tool call the same way: its tool"
        assert advice in text and "the network" not in text, text
    whole = out.count('rule: type: "object"')
    assert whole >= 1 and whole + out.count("E   the same failure (codes, prompt") == 4, out
    assert "speculative decoding -" not in out
