"""An engine's own HTTP server run as a subprocess of the engine's own interpreter.

vLLM and SGLang pin their own torch builds, which collide with each other and with the
plugin's environment, so each lives in a virtualenv of its own and is started here with
that virtualenv's python. The server runs in a new process group: ``stop()`` sends the
group SIGTERM, then SIGKILL, so the engine's worker processes go with it. The child also
asks the kernel for SIGTERM when its parent dies, so a killed test run leaves no server.
No pytest here.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

# Ports the launcher picks from when asked for port 0. Outside the kernel's range of
# ephemeral ports (32768-60999 on Linux), so an outgoing connection cannot take the port
# between the check that it is free and the engine's bind, which takes it 30 s later.
PORT_RANGE = (20000, 29999)
_TAIL_BYTES = 16384
_PR_SET_PDEATHSIG = 1


# ports are drawn from a generator of the launcher's own (a test run may seed the global one,
# and two engines started at once then drew the same port) and never handed out twice in one
# process: an engine binds its port tens of seconds after it is chosen
_PORT_DRAW = random.Random()
_PORTS_GIVEN: set[int] = set()
_PORTS_LOCK = threading.Lock()


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on, from ``PORT_RANGE``, never one this
    process was given before."""
    with _PORTS_LOCK:
        for _ in range(200):
            port = _PORT_DRAW.randint(*PORT_RANGE)
            if port in _PORTS_GIVEN:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _PORTS_GIVEN.add(port)
            return port
    raise RuntimeError(f"no free port on 127.0.0.1 in {PORT_RANGE[0]}-{PORT_RANGE[1]}")


def log_tail(path: Path, lines: int = 3) -> str:
    """The last non-empty lines of an engine's log, joined on one line."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - _TAIL_BYTES))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return "(no log)"
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "(empty log)"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_LIVE: set[EngineProcess] = set()
_LIVE_LOCK = threading.Lock()


@dataclass(eq=False)
class EngineProcess:
    """A running engine server; ``stop()`` ends its whole process group (idempotent).

    ``restart()`` starts the same command on the same port again (a stopped server
    keeps its URLs), for a caller that must stop an engine to make room for another.
    """

    engine: str
    root_url: str
    model: str
    speculation: str
    log_path: Path
    command: list[str] = field(repr=False)
    label: str = ""
    timeout: float = 300.0
    _env: dict[str, str] = field(default_factory=dict, repr=False)
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (``.../v1``)."""
        return f"{self.root_url}/v1"

    @property
    def pid(self) -> int | None:
        """The server process id while it runs."""
        return None if self._proc is None else self._proc.pid

    def running(self) -> bool:
        """True while the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM to the process group, SIGKILL after ``grace`` seconds; then reap."""
        proc, self._proc = self._proc, None
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if proc is None:
            return
        _signal_group(proc, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
        # the leader may be gone while a worker of its group still runs
        _signal_group(proc, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)

    def restart(self) -> None:
        """Stop the server if it runs, start it again, wait until it is ready."""
        self.stop()
        _spawn(self)
        _wait_ready(self)


class StopSignals:
    """Ctrl-C and SIGTERM, noted for a command that serves until stopped.

    The handler only sets ``requested``: it runs on the main thread between two bytecodes,
    possibly while that thread holds a lock, so it takes none. (It used to set a
    ``threading.Event``, whose lock the same thread may hold: inside ``wait()``, or in the
    handler of a signal that came just before. Once, the command stayed up after SIGTERM,
    its one thread waiting on a lock and its engine still serving; that was not seen
    again.) ``on_request``, if given, is called in the handler too (it may raise, to stop a
    start-up).
    """

    def __init__(self, on_request: Callable[[], None] | None = None) -> None:
        self.requested = False
        self._on_request = on_request

    def install(self) -> StopSignals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.requested = True
        if self._on_request is not None:
            self._on_request()

    def wait(self, running: Callable[[], bool] = lambda: True, tick: float = 0.5) -> bool:
        """Sleep until a stop is requested (True) or ``running()`` turns false (False)."""
        while not self.requested:
            if not running():
                return False
            time.sleep(tick)  # a signal's handler runs in it; the flag is read after it
        return True


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


@atexit.register
def _stop_all() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for server in live:
        server.stop(grace=5.0)


def _ready(client: httpx.Client, root: str, model: str) -> bool:
    try:
        response = client.get(f"{root}/v1/models")
    except httpx.HTTPError:
        return False
    if response.status_code != 200:
        return False
    try:
        data = response.json().get("data") or []
    except (ValueError, AttributeError):
        return False
    return any(isinstance(m, dict) and m.get("id") == model for m in data)


def launch(
    engine: str,
    label: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    port: int,
    model: str,
    speculation: str,
    timeout: float,
) -> EngineProcess:
    """Start ``argv`` (its own process group), wait until ``/v1/models`` lists ``model``.

    Raises ``RuntimeError`` in one line, with the tail of the engine's log, when the
    process exits or ``timeout`` seconds pass first; the process group is stopped then.
    """
    server = EngineProcess(
        engine=engine,
        root_url=f"http://127.0.0.1:{port}",
        model=model,
        speculation=speculation,
        log_path=Path(),
        command=list(argv),
        label=label,
        timeout=timeout,
        _env=dict(env),
    )
    _spawn(server)
    _wait_ready(server)
    return server


def _spawn(server: EngineProcess) -> None:
    port = server.root_url.rsplit(":", 1)[-1]
    fd, name = tempfile.mkstemp(prefix=f"ddtree-{server.engine}-{port}-", suffix=".log")
    server.log_path = Path(name)
    with os.fdopen(fd, "wb") as log:
        server._proc = subprocess.Popen(
            server.command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **server._env},
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
    with _LIVE_LOCK:
        _LIVE.add(server)


def _wait_ready(server: EngineProcess) -> None:
    proc, root, log_path = server._proc, server.root_url, server.log_path
    assert proc is not None
    deadline = time.monotonic() + server.timeout
    try:
        with httpx.Client(timeout=5.0, trust_env=False) as client:
            while True:
                code = proc.poll()
                if code is not None:
                    raise RuntimeError(
                        f"{server.label} exited with code {code} before it was ready "
                        f"(log {log_path}): {log_tail(log_path)}"
                    )
                if _ready(client, root, server.model):
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{server.label} was not ready on {root} after {server.timeout:g} s "
                        f"(log {log_path}): {log_tail(log_path)}"
                    )
                time.sleep(0.5)
    except BaseException:
        server.stop(grace=5.0)
        raise
