"""``ddtree_cold_warm_batched`` through pytest, on the embedded server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import BaseServer
from typing import Any

import httpx
import pytest

from pytest_ddtree.reference import ReferenceServer

TESTS = """
PROMPT = "Write a detailed essay about harbours and ships."

def test_healthy(ddtree_cold_warm_batched):
    found = ddtree_cold_warm_batched(PROMPT, max_tokens=48, concurrency=3)
    assert found.ok
    assert found.batch.others == 2 and found.batch.batched
    assert found.cold.text == found.warm.text == found.batched.text

def test_cold_garble(ddtree_cold_warm_batched):
    ddtree_cold_warm_batched(PROMPT, max_tokens=48, headers={"X-DDTree-Fault": "cold-garble"})

def test_cut_short(ddtree_cold_warm_batched):
    ddtree_cold_warm_batched(PROMPT, max_tokens=48, headers={"X-DDTree-Fault": "stream-no-done"})
"""


def test_the_fixture_passes_a_healthy_server_and_names_a_cold_garble(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(TESTS)
    result = pytester.runpytest("--ddtree-budgets=16,256", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*not the same answer cold, warm and batched at temperature 0: the cold answer "
            "differs from the warm and the batched one (which agree)",
            "*[[]cold-warm-batched[]] the warm answer differs from the cold answer at token * "
            "the target was sure (it gives the speculative token no probability*",
            "*session line: *",
            "*diagnosis: speculative decoding - * the target-only baseline gives one answer "
            "cold, warm and batched",
        ]
    )
    # an answer cut short is judged by the invariants first: no comparison is drawn from it
    result.stdout.fnmatch_lines(["*the cold answer breaks 1 output-quality invariant(s): stream*"])


class _OneSlot(BaseHTTPRequestHandler):
    """Forwards to the reference server one request at a time, as a server with one slot
    decodes them: each answer is read whole before the next request is sent on."""

    protocol_version = "HTTP/1.1"
    slot = threading.Lock()
    upstream = ""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._forward("GET", b"")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.slot:
            self._forward("POST", raw)

    def _forward(self, method: str, raw: bytes) -> None:
        headers = {"Content-Type": "application/json"}
        resp = httpx.request(method, self.upstream + self.path, content=raw, headers=headers)
        self.send_response(resp.status_code)
        self.send_header("Content-Type", resp.headers.get("content-type", "application/json"))
        self.send_header("Content-Length", str(len(resp.content)))
        self.end_headers()
        self.wfile.write(resp.content)


def test_a_server_with_one_slot_skips_the_batched_comparison(
    pytester: pytest.Pytester,
    reference_server: ReferenceServer,
    loopback: Callable[[BaseServer], str],
) -> None:
    handler = type("OneSlot", (_OneSlot,), {"upstream": reference_server.base_url[: -len("/v1")]})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    url = loopback(server)
    pytester.makepyfile(
        """
        def test_one_slot(ddtree_cold_warm_batched):
            ddtree_cold_warm_batched("Write a detailed essay about harbours.", max_tokens=24)
        """
    )
    result = pytester.runpytest(f"--ddtree-endpoint={url}/v1", "--ddtree-budgets=16", "-rs")
    # nothing is wrong with an answer: the batch was not made, so the test says so and skips
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED * the batched answer not compared: no other request was decoded beside "
            "the batched one (*); the warm answer agrees with the cold one. No other request "
            "was decoded beside the batched one*--parallel at least C*"
        ]
    )


class _OneSlotStreaming(_OneSlot):
    """A one-slot server that streams: each event goes on ``pace`` seconds after the last
    while the slot is held, so a request behind a long answer waits in its queue."""

    pace = 0.06

    def _forward(self, method: str, raw: bytes) -> None:
        if method != "POST":
            super()._forward(method, raw)
            return
        headers = {"Content-Type": "application/json"}
        url = self.upstream + self.path
        with httpx.stream(method, url, content=raw, headers=headers) as resp:
            self.send_response(resp.status_code)
            self.send_header("Content-Type", resp.headers.get("content-type", "text/plain"))
            self.end_headers()
            self.close_connection = True  # the body ends when the connection closes
            try:
                for line in resp.iter_lines():
                    if line:
                        time.sleep(self.pace)
                    self.wfile.write(line.encode() + b"\n")
                    self.wfile.flush()
            except OSError:
                pass  # the client cut the stream: the slot is free again


@pytest.mark.serial  # a 0.5 s read timeout against a relay pacing its events
def test_a_request_queued_past_the_read_timeout_skips_the_batched_comparison(
    pytester: pytest.Pytester,
    reference_server: ReferenceServer,
    loopback: Callable[[BaseServer], str],
) -> None:
    """A one-slot server streams the first other request (4 x 24 tokens, about 2 s) while the
    second and the batched one wait in its queue past the client's 0.5 s read timeout: no
    text of the batched answer was decoded, beside anything or at all, so the comparison is
    set aside and the test skips, naming the queue, instead of failing on the client's
    timeout; the other that timed out in the queue is no failure of the server either."""
    upstream = reference_server.base_url[: -len("/v1")]
    handler = type("OneSlotStreaming", (_OneSlotStreaming,), {"upstream": upstream})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    url = loopback(server)
    pytester.makepyfile(
        """
        def test_one_slot(ddtree_cold_warm_batched):
            ddtree_cold_warm_batched(
                "Write a detailed essay about harbours.", max_tokens=24, concurrency=3
            )
        """
    )
    result = pytester.runpytest(
        f"--ddtree-endpoint={url}/v1",
        "--ddtree-budgets=16",
        "--ddtree-timeout=connect=2,read=0.5,total=30",
        # the relay's pace is not the server's: its own speed figures are not checked
        "--ddtree-dialect=none",
        "-rs",
    )
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED * the batched answer not compared: the server queued the batched request: "
            "no event of it came before the client's read-timeout while 1 other request(s) went "
            "on streaming (2 other request(s): 1 streaming before it was sent, *; 1 queued past "
            "the client's read timeout before any event); the warm answer agrees with the "
            "cold one.*--parallel at least C*"
        ]
    )
