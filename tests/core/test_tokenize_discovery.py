"""Start-up discovery of the server's /tokenize, against small real HTTP servers on loopback."""

from __future__ import annotations

import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from pytest_ddtree.core.options import resolve
from pytest_ddtree.pytest_plugin.runtime import start_runtime


def _handler(tokenize: Any) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
            else:
                self._send(404, {"error": {"message": "no route"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            answer = tokenize(self.path, body)
            if answer is None:
                self._send(404, {"error": {"message": "no route"}})
            else:
                self._send(200, answer)

    return Handler


Loopback = Callable[[ThreadingHTTPServer], str]


def _server(loopback: Loopback, tokenize: Any) -> str:
    return loopback(ThreadingHTTPServer(("127.0.0.1", 0), _handler(tokenize))) + "/v1"


@pytest.fixture
def garbage_tokenize(loopback: Loopback) -> str:
    return _server(loopback, lambda path, body: {"tokens": "abc"} if path == "/tokenize" else None)


@pytest.fixture
def llamacpp_tokenize(loopback: Loopback) -> str:
    def answer(path: str, body: dict[str, Any]) -> Any:
        if path != "/tokenize":
            return None
        text = body.get("content", "")  # a llama.cpp server answers [] to {"prompt": ...}
        return {"tokens": list(range(len(str(text).split())))}

    return _server(loopback, answer)


def test_garbage_tokenize_falls_back_with_the_shapes_tried(garbage_tokenize: str) -> None:
    runtime = start_runtime(resolve({"ddtree_endpoint": garbage_tokenize}, {}, {}))
    try:
        assert not runtime.counter.exact
        notes = "\n".join(runtime.notes)
        assert "warning: ignoring /tokenize: " in notes
        assert garbage_tokenize.removesuffix("/v1") + "/tokenize" in notes
        assert "no usable /tokenize (shapes tried: reference, vllm, sglang, llamacpp)" in notes
    finally:
        runtime.close()


def test_llamacpp_shape_is_found_at_start_up(llamacpp_tokenize: str) -> None:
    runtime = start_runtime(resolve({"ddtree_endpoint": llamacpp_tokenize}, {}, {}))
    try:
        assert runtime.counter.exact and runtime.counter.count("a b c") == 3
        assert "(llamacpp shape)" in runtime.tokenizer_source
        assert not [n for n in runtime.notes if "tokenize" in n]
    finally:
        runtime.close()


def test_a_tokenize_that_never_answers_ends_the_probe_at_its_first_timeout(
    loopback: Loopback,
) -> None:
    import threading

    release = threading.Event()
    posts: list[str] = []

    def hang(path: str, body: dict[str, Any]) -> Any:
        posts.append(path)
        release.wait(10)  # holds the request: a server that took it and never answers
        return None

    url = _server(loopback, hang)
    settings = resolve(
        {"ddtree_endpoint": url, "ddtree_timeout": "connect=1,read=0.5,total=5"}, {}, {}
    )
    try:
        runtime = start_runtime(settings)
        try:
            notes = "\n".join(runtime.notes)
            # one shape waited for; the others would hang as long, each
            assert posts == ["/tokenize"], posts
            assert f"{url.removesuffix('/v1')}/tokenize: no answer in time" in notes, notes
            assert "shapes tried: reference)" in notes, notes
            # the endpoint's first stall: one more request in a row without an answer stops
            # the run (the probe's wait was not counted, and a hung endpoint took a third)
            assert len(runtime.client.guard._stalls) == 1, runtime.client.guard._stalls
        finally:
            runtime.close()
    finally:
        release.set()
