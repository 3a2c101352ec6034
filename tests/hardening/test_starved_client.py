"""A starved client is never the server's fault.

The client process alone is stopped (SIGSTOP/SIGCONT of its pid, never its servers'):
the chunks that arrive meanwhile wait in the kernel's buffer and are stamped late, so
the client-measured decode rate falls below the one an honest server reports. The
client's own ticker sees the stop (``Completion.client_stall``) and the speed claim of
that request is withheld, never a ``stats-inflated`` verdict; a server that does inflate
its figures is still caught under the same starvation.

Bounded: every child process has a deadline, and the example-suite runs use two
budgets and the tests that judge speed claims.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.serial,
    pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP/SIGCONT"),
]

REPO = Path(__file__).resolve().parents[2]
#: a stats-inflated verdict (a withheld speed claim is named too, but is no verdict)
VERDICT = re.compile(r"\[stats-inflated\] (?!withheld)")
#: long beside the server's own decode (about 0.1 s), so the stalled client's rate is several
#: times below the honest server's however slow a busy machine makes both
STOP_SECONDS = 1.0


class _Gated(ThreadingHTTPServer):
    """Streams 8 one-word chunks 10 ms apart, waits for ``go``, then the rest at once.

    The ``ddtree_stats`` it reports are honest: its own decode rate, measured on its
    side of the socket.
    """

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _GatedHandler)
        self.midway = threading.Event()
        self.go = threading.Event()


class _GatedHandler(BaseHTTPRequestHandler):
    server: _Gated

    def log_message(self, *args: Any) -> None:
        pass

    def _event(self, obj: dict[str, Any]) -> None:
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()

    def do_GET(self) -> None:  # /v1/models
        body = json.dumps({"object": "list", "data": [{"id": "gated"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        base = {"id": "g-1", "object": "chat.completion.chunk", "model": "gated"}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return {**base, "choices": [choice]}

        self._event(chunk({"role": "assistant", "content": ""}))
        words = [" river"] * 10
        first = time.perf_counter()
        for w in words[:8]:
            self._event(chunk({"content": w}))
            time.sleep(0.01)
        self.server.midway.set()
        self.server.go.wait(10)
        for w in words[8:]:
            self._event(chunk({"content": w}))
        decode = time.perf_counter() - first
        self._event(chunk({}, "length"))
        stats = {
            "tree_budget": 16,
            "cycles": 10,
            "avg_acceptance": 1.0,
            "tok_per_sec": round((len(words) - 1) / decode, 2),
            "block_size": 16,
        }
        usage = {"prompt_tokens": 3, "completion_tokens": 10, "total_tokens": 13}
        self._event({**base, "choices": [], "ddtree_stats": stats, "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


_CHILD = textwrap.dedent(
    """
    import json, sys
    from pytest_ddtree.checks.invariants import check
    from pytest_ddtree.wire.client import DDTreeClient
    with DDTreeClient(sys.argv[1], dialect="ddtree") as client:
        c = client.chat("rivers", max_tokens=10, tree_budget=16)
    found = check(c, min_tokens=1)
    print(json.dumps({
        "stall": c.client_stall.to_json() if c.client_stall else None,
        "codes": [v.code for v in found],
        "messages": [v.message for v in found],
        "withheld": [str(w) for w in found.withheld],
        "stalled": [w.client_stalled for w in found.withheld],
        "error": c.error,
    }))
    """
)


@pytest.fixture
def gated() -> Iterator[_Gated]:
    server = _Gated()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.go.set()
        server.shutdown()
        server.server_close()


def _client(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def test_a_client_stopped_mid_decode_is_seen_and_the_speed_claim_withheld(
    gated: _Gated,
) -> None:
    url = f"http://127.0.0.1:{gated.server_address[1]}/v1"
    proc = _client(url)
    try:
        assert gated.midway.wait(30), "the client never reached the stream"
        os.kill(proc.pid, signal.SIGSTOP)  # the client alone; the server goes on
        try:
            gated.go.set()  # the rest of the answer arrives while the client is stopped
            time.sleep(STOP_SECONDS)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        result = _result(proc)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
        proc.kill() if proc.poll() is None else None
    assert result["error"] is None
    stall = result["stall"]
    assert stall is not None and stall["source"] == "thread"
    # the process was stopped for STOP_SECONDS inside the window: the ticker saw it
    assert stall["stalled"] >= STOP_SECONDS * 0.8, stall
    assert stall["stalled"] <= stall["window"]
    # the honest server's rate against the stalled client's is over 2x: withheld, no verdict
    assert "stats-inflated" not in result["codes"], result["messages"]
    assert [w.split(":")[0] for w in result["withheld"]] == ["[stats-inflated] withheld"]
    assert result["stalled"] == [True]
    pattern = r"\[stats-inflated\] withheld: client stalled \d+\.\d\d s of a \d+\.\d\d s decode \("
    assert re.match(pattern, result["withheld"][0]), result["withheld"]


def test_an_unstopped_client_judges_the_same_stream(gated: _Gated) -> None:
    """The control: the same server, the client left alone: its stall is nowhere near
    the window, and the honest rate passes (judged, not withheld)."""
    gated.go.set()
    url = f"http://127.0.0.1:{gated.server_address[1]}/v1"
    result = _result(_client(url))
    assert result["stall"] is not None
    assert "stats-inflated" not in result["codes"]
    assert result["withheld"] == []


# ------------------------------------------------------------ the example suite, starved


class _Starver:
    """Stop and continue one pid: slices of 10-20 ms, and stalls of 60-150 ms."""

    def __init__(self, pid: int, seed: int) -> None:
        self.pid, self.rng = pid, random.Random(seed)
        self.stops = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        rng = self.rng
        while not self._done.wait(rng.uniform(0.02, 0.06)):
            stall = rng.random() < 0.12
            pause = rng.uniform(0.06, 0.15) if stall else rng.uniform(0.01, 0.02)
            try:
                os.kill(self.pid, signal.SIGSTOP)
                time.sleep(pause)
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                return
            self.stops += 1
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def _starved_suite(*extra: str, seed: int = 0) -> tuple[int, str, int]:
    """Run the example suite's speed-judging tests with its process starved; (rc, output,
    stops). The embedded servers are its child processes and are never stopped."""
    cmd = [sys.executable, "-m", "pytest", "example_suite", "-q", "-p", "no:cacheprovider"]
    cmd += ["-k", "test_invariants or test_sweep or test_load", "--ddtree-budgets", "16,64"]
    cmd += [*extra]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    starver = _Starver(proc.pid, seed)
    try:
        out, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    finally:
        starver.stop()
    return proc.returncode, out, starver.stops


def test_the_example_suite_passes_on_a_healthy_server_with_its_client_starved() -> None:
    rc, out, stops = _starved_suite(seed=1)
    assert stops > 0
    assert not VERDICT.search(out), out[-4000:]
    assert rc == 0, out[-4000:]


def test_an_inflating_server_is_still_caught_with_the_client_starved() -> None:
    rc, out, stops = _starved_suite("--ddtree-reference-fault", "stats-inflated", seed=2)
    assert stops > 0
    assert rc == 1, out[-4000:]
    assert VERDICT.search(out), out[-4000:]
