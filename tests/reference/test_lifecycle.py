"""Starting and stopping: in-process, as a child process, and the command line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from pytest_ddtree.reference import (
    FAULTS,
    CostModel,
    ServerOptions,
    spawn_reference_server,
    start_reference_server,
)

from ._helpers import LONG, post


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        # as any server does: connections the server closed may linger in TIME_WAIT
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_in_process_start_stop_frees_port_and_threads() -> None:
    before = set(threading.enumerate())
    srv = start_reference_server(simulated_latency=False)
    assert srv.base_url == f"http://127.0.0.1:{srv.port}/v1"
    assert srv.root_url == f"http://127.0.0.1:{srv.port}"
    with httpx.Client(base_url=srv.base_url) as c:  # keeps a keep-alive connection open
        assert post(c, LONG, max_tokens=8).status_code == 200
        srv.stop()
        srv.stop()  # idempotent
    assert _port_is_free(srv.port)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and set(threading.enumerate()) - before:
        time.sleep(0.02)
    assert not set(threading.enumerate()) - before


def test_spawn_and_stop_leave_nothing_behind() -> None:
    before = set(threading.enumerate())
    srv = spawn_reference_server(simulated_latency=False, seed=3)
    # spawn returns once the child listens: the first connection needs no retry
    with socket.create_connection((srv.host, srv.port), timeout=2):
        pass
    assert srv.process is not None and srv.process.poll() is None
    with httpx.Client(base_url=srv.base_url) as c:
        assert post(c, LONG, max_tokens=8).json()["usage"]["completion_tokens"] == 8
    srv.stop()
    # a clean exit, not an abort: a daemon thread blocked reading stdin once held its lock,
    # and the child's shutdown waited a second for it, then died of SIGABRT
    assert srv.process.poll() == 0
    assert _port_is_free(srv.port)
    with pytest.raises(httpx.ConnectError):
        httpx.get(srv.root_url + "/health", timeout=1)
    deadline = time.monotonic() + 3  # the pipe readers end with the child
    while time.monotonic() < deadline and set(threading.enumerate()) - before:
        time.sleep(0.02)
    assert not set(threading.enumerate()) - before


def test_spawn_passes_options() -> None:
    with (
        spawn_reference_server(
            simulated_latency=False,
            target_only=True,
            faults=("early-eos",),
            cost=CostModel(draft_ms=0.5),
            stats_dialect="omlx",
        ) as srv,
        httpx.Client(base_url=srv.base_url) as c,
    ):
        r = post(c, LONG).json()
    assert r["choices"][0]["finish_reason"] == "stop"
    assert r["usage"]["dflash_ddtree_avg_acceptance"] == 1.0


def test_spawn_failure_is_reported() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(RuntimeError, match="cannot listen"):
            spawn_reference_server(port=port, timeout=10)


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="default_tree_budget"):
        ServerOptions(default_tree_budget=0)
    with pytest.raises(ValueError, match="unknown fault 'nope'"):
        ServerOptions(faults=("nope",))
    with pytest.raises(ValueError, match="slowdown"):
        CostModel(slowdown=0)
    with pytest.raises(TypeError, match="bogus"):
        start_reference_server(bogus=1)
    assert ServerOptions(faults="hang").faults == ("hang",)  # type: ignore[arg-type]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_ddtree.reference", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "COLUMNS": "100"},
    )


def test_cli_help_describes_every_fault() -> None:
    out = _cli("--help")
    assert out.returncode == 0
    for name in FAULTS:
        assert f"  {name}" in out.stdout
    for flag in ("--target-only", "--fault", "--no-simulated-latency", "--stats-dialect"):
        assert flag in out.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--port", "-1"), "--port"),
        (("--port", "abc"), "'abc'"),
        (("--tree-budget", "0"), "--tree-budget"),
        (("--block-size", "1"), "--block-size"),
        (("--fault", "nope"), "'nope'"),
        (("--stats-dialect", "x"), "'x'"),
        (("--slowdown", "nan"), "--slowdown"),
        (("--draft-ms", "-1"), "--draft-ms"),
    ],
)
def test_cli_bad_values(args: tuple[str, ...], needle: str) -> None:
    out = _cli(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr


def test_cli_prints_one_url_line_and_stops_on_sigterm() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_ddtree.reference", "--port", "0", "--no-simulated-latency"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ddtree reference server listening on http://127.0.0.1:")
        url = line.split(" on ", 1)[1].strip()
        assert url.endswith("/v1")
        assert httpx.get(url + "/models").status_code == 200
        proc.terminate()
        assert proc.wait(5) == 0
        assert proc.stdout.read() == ""  # exactly one line
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_docs_markdown_lists_every_option_and_fault() -> None:
    from pytest_ddtree.reference.__main__ import docs_markdown

    md = docs_markdown()
    for name in FAULTS:
        assert f"| `{name}` |" in md
    for flag in ("--target-only", "--verify-free-nodes", "--stats-dialect", "--hang-seconds"):
        assert f"`{flag}`" in md


def test_spawned_server_dies_with_its_parent_even_on_sigkill() -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from pytest_ddtree.reference import spawn_reference_server\n"
            "s = spawn_reference_server(simulated_latency=False)\n"
            "print(s.process.pid, flush=True)\n"
            "import time; time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(5)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            # a zombie is gone for our purposes: it no longer listens
            with open(f"/proc/{child}/stat") as fh:
                if fh.read().split()[2] == "Z":
                    break
            time.sleep(0.1)
        else:
            os.kill(child, signal.SIGKILL)
            raise AssertionError("the reference server outlived its SIGKILLed parent")
    finally:
        if parent.poll() is None:
            parent.kill()
