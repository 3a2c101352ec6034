"""What the batch of ``send_batched`` did, told from real streams over loopback: a server
that queues the batched request while it decodes the others is told apart from one that
froze, one that left it waiting once the others ended, and one that started an other and
then left it silent (each of those stays a failure)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import BaseServer
from typing import Any

import pytest

from pytest_ddtree.checks.coldwarm import Batch, send_batched
from pytest_ddtree.core.settings import Timeout
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion, ErrorKind
from pytest_ddtree.wire.protocol import EndpointConfig

# the verdicts rest on when events came within a 2 s read timeout: alone, outside xdist
pytestmark = pytest.mark.serial

PACE = 0.05  # seconds between two events of an other request
READ = 2.0  # the client's read timeout: the batched request is never answered


def _event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + json.dumps({"object": "chat.completion.chunk", "choices": [choice]}).encode()


class _Scripted(BaseHTTPRequestHandler):
    """The others stream; the batched request (its prompt says MEASURED) gets headers and no
    event. ``script`` says what the others do once it has come:

    - ``queue``: they go on streaming (a one-slot server serving them first);
    - ``freeze``: they fall silent (the server froze when it came);
    - ``finish-early``: they end soon after (and the server never serves it);
    - ``hang-after-role``: as ``queue``, but the second other gets its role event only.
    """

    protocol_version = "HTTP/1.0"  # each body ends when its connection closes
    script = "queue"
    joined: threading.Event
    others: list[int]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        measured = "MEASURED" in json.dumps(body["messages"])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            if measured:
                self.joined.set()
                time.sleep(3 * READ)  # past the client's read timeout, no event
            else:
                self._other()
        except OSError:
            pass  # the client cut the stream

    def _send(self, data: bytes) -> None:
        self.wfile.write(data + b"\n\n")
        self.wfile.flush()

    def _other(self) -> None:
        self.others.append(1)
        nth = len(self.others)
        self._send(_event({"role": "assistant"}))
        if self.script == "hang-after-role" and nth == 2:
            time.sleep(3 * READ)
            return
        since: float | None = None
        for _ in range(200):  # 10 s at most
            if self.joined.is_set():
                since = since or time.monotonic()
                if self.script == "freeze":
                    time.sleep(3 * READ)
                    return
                if self.script == "finish-early" and time.monotonic() - since > 0.2:
                    break
            self._send(_event({"content": " word"}))
            time.sleep(PACE)
        self._send(_event({}, finish="length"))
        self._send(b"data: [DONE]")


@pytest.fixture
def scripted(loopback: Callable[[BaseServer], str]) -> Iterator[Callable[..., DDTreeClient]]:
    clients: list[DDTreeClient] = []

    def start(script: str) -> DDTreeClient:
        attrs = {"script": script, "joined": threading.Event(), "others": []}
        server = ThreadingHTTPServer(("127.0.0.1", 0), type("S", (_Scripted,), attrs))
        server.daemon_threads = True
        config = EndpointConfig(
            f"{loopback(server)}/v1",
            model="m",
            budget_mode="none",
            dialect="none",
            timeout=Timeout(connect=2, read=READ, total=30),
        )
        client = DDTreeClient(config, stall_limit=0)
        clients.append(client)
        return client

    yield start
    for client in clients:
        client.close()


def _batched(client: DDTreeClient, others: int) -> tuple[Completion, Batch]:
    return send_batched(
        client,
        "MEASURED: tell me about rivers.",
        [f"Other {i}: tell me about lakes." for i in range(others)],
        other_max_tokens=200,
        wait=5,
        max_tokens=8,
        temperature=0.0,
        stream=True,
    )


def test_a_request_queued_behind_streaming_others_is_told_as_queued(
    scripted: Callable[..., DDTreeClient],
) -> None:
    measured, batch = _batched(scripted("queue"), 1)
    assert measured.error_kind == ErrorKind.READ_TIMEOUT
    assert batch.served_late == 1 and batch.errors == () and batch.waited == 0


@pytest.mark.parametrize("script", ["freeze", "finish-early"])
def test_a_server_that_served_nothing_near_the_end_of_the_wait_is_no_queue(
    scripted: Callable[..., DDTreeClient], script: str
) -> None:
    measured, batch = _batched(scripted(script), 1)
    assert measured.error_kind == ErrorKind.READ_TIMEOUT
    assert batch.served_late == 0, batch


def test_an_other_started_then_left_silent_is_a_failure_not_a_queue(
    scripted: Callable[..., DDTreeClient],
) -> None:
    _, batch = _batched(scripted("hang-after-role"), 2)
    # the second other got its role event (the server had started it) and then nothing
    assert batch.waited == 0
    assert len(batch.errors) == 1 and "read timeout" in batch.errors[0], batch
