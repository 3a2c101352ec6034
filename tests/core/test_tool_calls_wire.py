"""Tool calls read off the wire: ``choices[0].message.tool_calls`` of a plain answer, and a
stream's ``choices[0].delta.tool_calls`` fragments assembled by ``index`` (an id and name in
the first fragment, the arguments in pieces; two calls in one chunk; a repeated id)."""

from __future__ import annotations

import http.server
import json
from collections.abc import Callable
from socketserver import BaseServer
from typing import Any

import pytest

from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import ToolCall

BASE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
USAGE = {"prompt_tokens": 20, "completion_tokens": 30, "total_tokens": 50}

PLAIN = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": "{}"},
                    },
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": USAGE,
}


def _delta(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {**BASE, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _frag(index: int, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index}
    fn = {k: fields.pop(k) for k in ("name", "arguments") if k in fields}
    out.update(fields)
    if fn:
        out["function"] = fn
    return out


STREAM = [
    _delta({"role": "assistant", "content": ""}),
    _delta({"tool_calls": [_frag(0, id="call_a", type="function", name="get_weather")]}),
    _delta({"tool_calls": [_frag(0, arguments='{"city": ')]}),
    # the id repeated (some servers send it with every fragment): it adds nothing
    _delta({"tool_calls": [_frag(0, id="call_a", arguments='"Paris"}')]}),
    # two calls' fragments in one chunk (SGLang #37634 loses the second)
    _delta(
        {
            "tool_calls": [
                _frag(1, id="call_b", type="function", name="get_time", arguments="{"),
                _frag(1, arguments="}"),
            ]
        }
    ),
    _delta({}, "tool_calls"),
    {**BASE, "choices": [], "usage": USAGE},
]


class _Answers(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        if body.get("stream"):
            data = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in STREAM)
            data += b"data: [DONE]\n\n"
            kind = "text/event-stream"
        else:
            data, kind = json.dumps(PLAIN).encode(), "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def url(loopback: Callable[[BaseServer], str]) -> str:
    return loopback(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)) + "/v1"


WANT = (
    ToolCall(0, "call_a", "get_weather", '{"city": "Paris"}', "function"),
    ToolCall(1, "call_b", "get_time", "{}", "function"),
)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_tool_calls_are_read(url: str, stream: bool) -> None:
    with DDTreeClient(url, model="m", dialect="none") as client:
        c = client.chat("weather?", max_tokens=64, stream=stream, tree_budget=None)
    assert c.ok, c.error
    assert c.tool_calls == WANT
    assert c.text == "" and c.finish_reason == "tool_calls"


def test_a_conflicting_fragment_shows_in_the_call() -> None:
    from pytest_ddtree.wire.protocol.parse import ToolCallDeltas

    deltas = ToolCallDeltas()
    deltas.feed({"tool_calls": [_frag(0, id="a", name="get_weather", arguments="{")]})
    deltas.feed({"tool_calls": [_frag(0, name="_x", arguments="}")]})
    deltas.feed({"tool_calls": [{"function": {"arguments": ""}}]})  # no index: position 0
    (only,) = deltas.calls()
    assert only == ToolCall(0, "a", "get_weather_x", "{}", None)
