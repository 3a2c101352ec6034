"""Fixtures of the server-counter tests: reference servers and a bad /metrics on loopback."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from pytest_ddtree.reference import start_reference_server

#: what each path of the bad server answers
HUGE_BYTES = 6 * 1024 * 1024


class _Bad(BaseHTTPRequestHandler):
    """``/html``: not Prometheus; ``/huge``: 6 MiB; ``/slow``: a byte every 0.2 s;
    ``/lag``, ``/stuck``: a request counter that counts late, or never; else 404."""

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self.server.hits[self.path] = self.server.hits.get(self.path, 0) + 1  # type: ignore[attr-defined]
        if self.path == "/html":
            body = b"<html><body>Grafana login</body></html>\n"
            self._send(body)
        elif self.path == "/huge":
            line = b'vllm:num_requests_running{model_name="m"} 0.0\n'
            self._send(line * (HUGE_BYTES // len(line) + 1))
        elif self.path in ("/lag", "/stuck"):
            # a finished-requests counter that counts late: one more per scrape, up to 3
            n = min(self.server.hits[self.path], 3) if self.path == "/lag" else 1  # type: ignore[attr-defined]
            self._send(
                b"# TYPE vllm:request_success_total counter\n"
                + f"vllm:request_success_total {n}\n".encode()
                + b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n"
            )
        elif self.path == "/slow":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            try:
                for _ in range(100):  # 20 s at most, far beyond the scrape's 5 s
                    self.wfile.write(b"#")
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                return
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            return


@pytest.fixture(scope="module")
def bad_metrics() -> Iterator[Any]:
    """A loopback server whose paths are each a bad ``/metrics``; ``.url(path)``, ``.hits``."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Bad)
    httpd.daemon_threads = True
    httpd.hits = {}  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    httpd.url = lambda path: f"http://127.0.0.1:{httpd.server_address[1]}{path}"  # type: ignore[attr-defined]
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def vllm_server() -> Iterator[Any]:
    """A reference server reporting per-request statistics in vLLM's shape."""
    with start_reference_server(simulated_latency=False, stats_dialect="vllm") as server:
        yield server


@pytest.fixture(scope="module")
def ddtree_server() -> Iterator[Any]:
    """A reference server in its own dialect (it echoes the budget); /metrics in vLLM's names."""
    with start_reference_server(simulated_latency=False) as server:
        yield server
