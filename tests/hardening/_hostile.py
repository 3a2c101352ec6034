"""A deliberately hostile OpenAI-compatible server (stdlib only, 127.0.0.1).

Every request is answered in one *mode*: the ``X-Hostile-Mode`` request header picks it,
else a ``hostile_mode`` field of the JSON body, else the server's default mode. ``healthy``
answers like a correct server; the others each break one thing a broken deployment breaks:

========================  ==================================================================
``silent``                reads the request and never answers (until ``trickle_for``)
``one-slot``              healthy, one request at a time, each taking ``interval`` seconds
                          (a one-slot server: the others wait in its queue)
``paced``                 healthy, but each stream event ``interval`` seconds after the last
``trickle``               stream: headers, then one byte every ``interval`` seconds, forever
``trickle-headers``       the status line and headers themselves, one byte at a time
``trickle-body``          plain answer: headers, then the body one byte at a time
``endless``               a valid event stream that never ends, as fast as it can
``huge``                  a 10 MB plain answer that claims ``completion_tokens: 96``
``reset``                 a few stream events, then a TCP reset
``reset-before``          a TCP reset right after reading the request (no byte sent)
``stale``                 per connection: the first request answered with keep-alive, the
                          next one read and the connection closed without a byte
``bad-utf8``              a stream with an invalid UTF-8 byte inside the content
``bad-utf8-plain``        the same in a plain body
``deep``                  a stream event nested 100,000 arrays deep
``deep-plain``            a plain body nested 100,000 arrays deep
``json-stream``           a streamed request answered with a whole application/json answer
``429``                   HTTP 429 with ``Retry-After: 1``
``429-once``              HTTP 429 (Retry-After: 0) for the first request of each prompt text,
                          then healthy
``die``                   answers, then the whole server stops listening (a dying server)
========================  ==================================================================

Server-wide options: ``trickle_models`` (``GET /v1/models`` trickled one byte a second),
``tokenize`` (``None``: 404; ``"ok"``: word counts; ``"flaky"``: the start-up probe
succeeds, every later count answers HTTP 500) and ``refuse_tools`` (an HTTP 400 with this
JSON body to every request that offers ``tools``, as a deployment without tool calls).
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "hostile-model"

SENTENCES = (
    "Rivers carry water from the hills down to the sea.",
    "Along the way they shape valleys, feed farms and move sand.",
    "A delta forms where the current slows and drops its load.",
    "Floods renew the soil but can also destroy bridges and homes.",
    "Engineers build levees, while ecologists argue for wide floodplains.",
    "Fish such as salmon swim upstream every autumn to spawn.",
    "Towns grew on river banks because boats were the cheapest transport.",
    "Today many rivers are dammed for electricity and irrigation.",
)
HEALTHY_TEXT = " ".join(SENTENCES)


def _chunk(content: str | None = None, finish: str | None = None, **extra: Any) -> bytes:
    delta: dict[str, Any] = {} if content is None else {"content": content}
    obj = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _plain(text: str, completion_tokens: int | None = None) -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-hostile",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
    }
    if completion_tokens is not None:
        body["usage"] = {
            "prompt_tokens": 10,
            "completion_tokens": completion_tokens,
            "total_tokens": 10 + completion_tokens,
        }
    return json.dumps(body).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HostileServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.requests_here = 0

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()

    # -- helpers

    def _send(self, status: int, body: bytes, ctype: str = "application/json", **hdr: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in hdr.items():
            self.send_header(k.replace("_", "-"), v)
        self.end_headers()
        self.wfile.write(body)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _write(self, data: bytes) -> bool:
        try:
            self.wfile.write(data)
            self.wfile.flush()
            return True
        except OSError:
            return False

    def _reset(self) -> None:
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def _trickle(self, data: bytes) -> None:
        stop = time.monotonic() + self.server.trickle_for
        for i in range(len(data)):
            if time.monotonic() > stop or not self._write(data[i : i + 1]):
                return
            time.sleep(self.server.interval)
        # then keep the connection open, silent, until the client gives up
        while time.monotonic() < stop and self._write(b""):
            time.sleep(self.server.interval)

    # -- endpoints

    def do_GET(self) -> None:
        if self.path.rstrip("/") != "/v1/models":
            self._send(404, b'{"error": {"message": "not found"}}')
            return
        body = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        if self.server.models_body is not None:
            self._send(200, self.server.models_body)
            return
        if self.server.trickle_models:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.flush()
            self._trickle(body.encode())
            self.close_connection = True
            return
        self._send(200, body.encode())

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        self.requests_here += 1
        if self.path == "/tokenize":
            self._tokenize(raw)
            return
        if not self.path.endswith("/completions"):  # e.g. SGLang's /v1/tokenize
            self._send(404, b'{"error": {"message": "not found"}}')
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(400, b'{"error": {"message": "bad JSON"}}')
            return
        if self.server.refuse_tools is not None and body.get("tools"):
            self._send(400, self.server.refuse_tools)  # a deployment without tool calls
            return
        mode = self.headers.get("X-Hostile-Mode") or body.get("hostile_mode") or self.server.mode
        with self.server.lock:
            self.server.served += 1
            self.server.modes_seen.append(mode)
        getattr(self, "_mode_" + mode.replace("-", "_"))(body)

    def _tokenize(self, raw: bytes) -> None:
        mode = self.server.tokenize
        text = json.loads(raw).get("prompt", "")
        if mode is None:
            self._send(404, b'{"error": {"message": "no /tokenize"}}')
        elif mode == "flaky" and text != "Hello, world.":
            self._send(500, b'{"error": {"message": "tokenizer crashed"}}')
        else:
            self._send(200, json.dumps({"count": max(1, len(text.split()))}).encode())

    # -- modes

    def _mode_healthy(self, body: dict[str, Any]) -> None:
        if not body.get("stream"):
            self._send(200, _plain(HEALTHY_TEXT))
            return
        self._start_stream()
        self._write(_chunk(""))
        for word in HEALTHY_TEXT.split(" "):
            self._write(_chunk(word + " "))
        self._write(_chunk(finish="stop"))
        self._write(b"data: [DONE]\n\n")

    def _mode_paced(self, body: dict[str, Any]) -> None:
        if not body.get("stream"):
            self._send(200, _plain(HEALTHY_TEXT))
            return
        self._start_stream()
        self._write(_chunk(""))
        for word in HEALTHY_TEXT.split(" "):
            time.sleep(self.server.interval)
            self._write(_chunk(word + " "))
        self._write(_chunk(finish="stop"))
        self._write(b"data: [DONE]\n\n")

    def _mode_one_slot(self, body: dict[str, Any]) -> None:
        with self.server.slot:
            time.sleep(self.server.interval)
            self._mode_healthy(body)

    def _mode_silent(self, body: dict[str, Any]) -> None:
        self.close_connection = True
        stop = time.monotonic() + self.server.trickle_for
        while time.monotonic() < stop and not self.server.stopping:
            time.sleep(0.05)

    def _mode_trickle(self, body: dict[str, Any]) -> None:
        self._start_stream()
        self.wfile.flush()
        data = b"".join(_chunk(w + " ") for w in HEALTHY_TEXT.split(" ")) * 1000
        self._trickle(data)

    def _mode_trickle_headers(self, body: dict[str, Any]) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + b"X-Pad: " * 10000
        self.close_connection = True
        self._trickle(head)

    def _mode_trickle_body(self, body: dict[str, Any]) -> None:
        data = _plain(HEALTHY_TEXT)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        self._trickle(data)

    def _mode_endless(self, body: dict[str, Any]) -> None:
        self._start_stream()
        piece = b"".join(_chunk(w + " ") for w in HEALTHY_TEXT.split(" "))
        stop = time.monotonic() + self.server.trickle_for
        while time.monotonic() < stop and self._write(piece):
            pass

    def _mode_huge(self, body: dict[str, Any]) -> None:
        text = (HEALTHY_TEXT + " ") * (10_000_000 // (len(HEALTHY_TEXT) + 1))
        data = _plain(text, completion_tokens=96)
        self.close_connection = True
        with contextlib.suppress(OSError):
            self._send(200, data, Connection="close")

    def _mode_reset(self, body: dict[str, Any]) -> None:
        self._start_stream()
        for word in HEALTHY_TEXT.split(" ")[:5]:
            self._write(_chunk(word + " "))
        time.sleep(0.05)
        self._reset()

    def _mode_reset_before(self, body: dict[str, Any]) -> None:
        self._reset()

    def _mode_stale(self, body: dict[str, Any]) -> None:
        if self.requests_here == 1:
            self._send(200, _plain(HEALTHY_TEXT))  # keep-alive: the client pools it
            return
        with self.server.lock:
            self.server.stale_closed += 1
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def _mode_bad_utf8(self, body: dict[str, Any]) -> None:
        self._start_stream()
        for word in HEALTHY_TEXT.split(" ")[:10]:
            self._write(_chunk(word + " "))
        bad = _chunk("caf\u00e9 ").replace(b"\\u00e9", b"\xff")
        self._write(bad)
        for word in HEALTHY_TEXT.split(" ")[10:]:
            self._write(_chunk(word + " "))
        self._write(_chunk(finish="stop"))
        self._write(b"data: [DONE]\n\n")

    def _mode_bad_utf8_plain(self, body: dict[str, Any]) -> None:
        data = _plain("caf\u00e9 " + HEALTHY_TEXT).replace(b"\\u00e9", b"\xff")
        self._send(200, data)

    def _mode_deep(self, body: dict[str, Any]) -> None:
        self._start_stream()
        self._write(_chunk("Rivers "))
        self._write(b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n")
        self._write(_chunk(finish="stop"))
        self._write(b"data: [DONE]\n\n")

    def _mode_deep_plain(self, body: dict[str, Any]) -> None:
        self._send(200, b"[" * 100_000 + b"]" * 100_000)

    def _mode_json_stream(self, body: dict[str, Any]) -> None:
        self._send(200, _plain(HEALTHY_TEXT))

    def _mode_429(self, body: dict[str, Any]) -> None:
        self._send(429, b'{"error": {"message": "rate limited"}}', Retry_After="1")

    def _mode_429_once(self, body: dict[str, Any]) -> None:
        key = json.dumps(body.get("messages"), sort_keys=True)
        with self.server.lock:
            first = key not in self.server.limited
            self.server.limited.add(key)
        if first:
            self._send(429, b'{"error": {"message": "rate limited"}}', Retry_After="0")
        else:
            self._mode_healthy(body)

    def _mode_die(self, body: dict[str, Any]) -> None:
        self._mode_healthy(body)
        threading.Thread(target=self.server.stop, daemon=True).start()


class HostileServer(ThreadingHTTPServer):
    """The server; ``start()`` serves on a thread, ``base_url`` ends in /v1."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        mode: str = "healthy",
        *,
        interval: float = 0.5,
        trickle_for: float = 120.0,
        trickle_models: bool = False,
        tokenize: str | None = None,
        refuse_tools: bytes | None = None,
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mode = mode
        self.interval = interval
        self.trickle_for = trickle_for
        self.trickle_models = trickle_models
        self.tokenize = tokenize
        self.refuse_tools = refuse_tools
        self.lock = threading.Lock()
        self.served = 0
        self.stale_closed = 0
        self.modes_seen: list[str] = []
        self.limited: set[str] = set()
        self.models_body: bytes | None = None
        self.stopping = False
        self.slot = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def start(self) -> HostileServer:
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping = True
        self.shutdown()
        self.server_close()

    def __enter__(self) -> HostileServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None and self._thread.is_alive():
            self.stop()


if __name__ == "__main__":  # python tests/hardening/_hostile.py MODE
    import sys

    server = HostileServer(sys.argv[1] if len(sys.argv) > 1 else "healthy").start()
    print(server.base_url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
