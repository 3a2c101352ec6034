"""Bad requests get an OpenAI-style error with the right 4xx status, and the server goes on."""

from __future__ import annotations

import json
import re
import socket
from typing import Any

import httpx
import pytest

from pytest_ddtree.reference import ReferenceServer

from ._helpers import LONG, chat_body, post


def _assert_error(r: httpx.Response, status: int, *needles: str) -> None:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "code"}
    assert isinstance(err["message"], str) and err["message"]
    for n in needles:
        assert n in err["message"], err["message"]


def _still_serving(client: httpx.Client) -> None:
    r = post(client, LONG, max_tokens=8)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8


def test_malformed_json(client: httpx.Client) -> None:
    r = client.post(
        "/chat/completions", content=b'{"messages": [', headers={"Content-Type": "application/json"}
    )
    _assert_error(r, 400, "not valid JSON")
    r = client.post("/chat/completions", content=b"[1, 2]")
    _assert_error(r, 400, "JSON object")
    r = client.post("/chat/completions", content=b"\xff\xfe")
    _assert_error(r, 400)
    deep = b"[" * 5000 + b"]" * 5000
    r = client.post("/chat/completions", content=deep)
    _assert_error(r, 400, "nested too deeply")
    _still_serving(client)


BAD_FIELDS: list[tuple[dict[str, Any], str]] = [
    ({"max_tokens": "64"}, "max_tokens"),
    ({"max_tokens": 1.5}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": -3}, "max_tokens"),
    ({"max_tokens": 32769}, "context"),
    ({"temperature": "hot"}, "temperature"),
    ({"temperature": 3}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"seed": "x"}, "seed"),
    ({"stop": 5}, "stop"),
    ({"stop": ["a", 1]}, "stop"),
    ({"stream": "yes"}, "stream"),
    ({"stream_options": []}, "stream_options"),
    ({"stream_options": {"include_usage": "yes"}}, "include_usage"),
    ({"tree_budget": 0}, "tree_budget"),
    ({"tree_budget": 4097}, "tree_budget"),
    ({"tree_budget": "64"}, "tree_budget"),
    ({"tree_budget": 64.0}, "tree_budget"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "user"}]}, "content"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "role"),
    ({"messages": [{"role": "user", "content": [{"type": "image"}]}]}, "content"),
    ({"chat_template_kwargs": {"enable_thinking": "yes"}}, "enable_thinking"),
    ({"chat_template_kwargs": 3}, "chat_template_kwargs"),
    ({"n": 2}, "n=1"),
    ({"model": 7}, "model"),
]


@pytest.mark.parametrize(("fields", "needle"), BAD_FIELDS, ids=[repr(f) for f, _ in BAD_FIELDS])
def test_wrong_types_and_values(client: httpx.Client, fields: dict[str, Any], needle: str) -> None:
    r = client.post("/chat/completions", json=chat_body(**fields))
    _assert_error(r, 400, needle)
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_completions_prompt_type(client: httpx.Client) -> None:
    _assert_error(client.post("/completions", json={"prompt": 5}), 400, "prompt")
    _assert_error(client.post("/completions", json={}), 400, "prompt")


def test_unknown_model(client: httpx.Client) -> None:
    r = client.post("/chat/completions", json=chat_body(model="gpt-17"))
    _assert_error(r, 404, "gpt-17")
    assert r.json()["error"]["code"] == "model_not_found"
    _still_serving(client)


def test_budget_edges_are_accepted(client: httpx.Client) -> None:
    for b in (1, 4096):
        r = post(client, LONG, max_tokens=8, tree_budget=b)
        assert r.status_code == 200 and r.json()["ddtree_stats"]["tree_budget"] == b


def test_body_over_one_mebibyte(client: httpx.Client) -> None:
    big = chat_body(LONG + " " + "x" * (1 << 20))
    r = client.post("/chat/completions", json=big)
    _assert_error(r, 413, "exceeds")
    _still_serving(client)


def test_body_just_under_limit_is_read(client: httpx.Client) -> None:
    # read in full: every token counted, and the prompt refused as longer than the context
    body = chat_body("Tell me about rivers. " + "a " * 100_000, max_tokens=4)
    r = client.post("/chat/completions", json=body)
    assert r.status_code == 400, r.text
    requested = re.search(r"However, you requested (\d+) tokens", r.json()["error"]["message"])
    assert requested is not None and int(requested.group(1)) > 50_000, r.text


def test_unknown_route_and_wrong_method(ref_server: ReferenceServer, client: httpx.Client) -> None:
    _assert_error(client.get("/nope"), 404, "/v1/nope")
    _assert_error(client.post("/embeddings", json={}), 404)
    r = client.get("/chat/completions")
    _assert_error(r, 405, "GET")
    assert r.headers["Allow"] == "POST"
    r = client.post("/models", json={})
    _assert_error(r, 405)
    assert r.headers["Allow"] == "GET"
    _assert_error(client.delete("/models"), 405)
    _assert_error(httpx.get(ref_server.root_url + "/tokenize"), 405)
    _still_serving(client)


def test_tokenize_bad_input(ref_server: ReferenceServer) -> None:
    _assert_error(httpx.post(ref_server.root_url + "/tokenize", json={"text": "hi"}), 400, "prompt")


def test_garbage_on_the_socket_does_not_kill_the_server(
    ref_server: ReferenceServer, client: httpx.Client
) -> None:
    with socket.create_connection((ref_server.host, ref_server.port), timeout=5) as s:
        s.sendall(b"\x00\x01 not http at all\r\n\r\n")
        raw = b""
        while chunk := s.recv(4096):  # the server answers, then closes the connection
            raw += chunk
    # no request line to answer in kind: the JSON error alone
    assert json.loads(raw)["error"]["code"] == "bad_request", raw
    with socket.create_connection((ref_server.host, ref_server.port), timeout=5) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        # the client vanishes mid-body
    _still_serving(client)


def test_protocol_errors_are_json(ref_server: ReferenceServer, client: httpx.Client) -> None:
    with socket.create_connection((ref_server.host, ref_server.port), timeout=5) as s:
        s.sendall(b"BREW /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        raw = b""
        while chunk := s.recv(4096):  # the server closes the connection after the error
            raw += chunk
        head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 501") and b"application/json" in head
    assert b"BREW" in body
    assert client.head("/models").status_code == 405
    _assert_error(client.options("/models"), 405, "OPTIONS")
    _still_serving(client)
