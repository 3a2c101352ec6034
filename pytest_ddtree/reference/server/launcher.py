"""Starting a reference server: in this process (``start_reference_server``) or as a child
process (``spawn_reference_server``), and the handle on it (``ReferenceServer``)."""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from .engine import _Engine
from .handler import _HTTPServer
from .options import ServerOptions, _options, options_to_argv

_URL_PREFIX = "ddtree reference server listening on "


class ReferenceServer:
    """Handle on a running reference server (in-process or a child process).

    ``host``, ``port``, ``options`` (the :class:`ServerOptions` it runs with) and, for a
    spawned server, ``process`` (the child's ``Popen``; ``None`` in-process).
    """

    def __init__(
        self,
        host: str,
        port: int,
        options: ServerOptions,
        stop: Callable[[], None],
        process: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.options = options
        self.process = process
        self._stop = stop
        self._stopped = False

    @property
    def root_url(self) -> str:
        """``http://HOST:PORT`` (where ``/health`` and ``/tokenize`` live)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1``: the OpenAI base URL."""
        return self.root_url + "/v1"

    def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if not self._stopped:
            self._stopped = True
            self._stop()

    def __enter__(self) -> ReferenceServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        kind = f"pid {self.process.pid}" if self.process else "in-process"
        return f"<ReferenceServer {self.base_url} ({kind})>"


def serve(options: ServerOptions) -> tuple[_HTTPServer, threading.Event]:
    """Bind (listening) and return the HTTP server without serving yet."""
    stop_event = threading.Event()
    engine = _Engine(options, stop_event)
    httpd = _HTTPServer((options.host, options.port), engine)
    return httpd, stop_event


def start_reference_server(**kwargs: Any) -> ReferenceServer:
    """Start the reference server in this process, on background threads.

    Keyword arguments are :class:`ServerOptions` fields. Returns once the socket listens.
    """
    options = _options(kwargs)
    httpd, stop_event = serve(options)
    thread = threading.Thread(
        target=httpd.serve_forever,
        kwargs={"poll_interval": 0.05},
        daemon=True,
        name="ddtree-reference-server",
    )
    thread.start()
    host, port = httpd.server_address[:2]

    def stop() -> None:
        stop_event.set()
        httpd.shutdown()
        httpd.server_close()
        httpd.close_connections()
        thread.join(5)
        with httpd.active_lock:
            workers = list(httpd.handler_threads)
        for t in workers:
            t.join(5)

    return ReferenceServer(str(host), int(port), options, stop)


# The child runs this package's command line (as ``python -m pytest_ddtree.reference`` would)
# without executing ``pytest_ddtree/__init__.py``: the plugin's imports (pytest, httpx, ...)
# would triple the start-up time of a server that needs none of them.
_CHILD_BOOTSTRAP = """\
import sys, types
parent = types.ModuleType("pytest_ddtree")
parent.__path__ = [sys.argv.pop(1)]
sys.modules["pytest_ddtree"] = parent
from pytest_ddtree.reference.__main__ import main
raise SystemExit(main(sys.argv[1:]))
"""


def _stop_child(proc: subprocess.Popen[bytes]) -> None:
    """Stop the child server (terminate, then kill after 5 s) and close its pipes."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def spawn_reference_server(timeout: float = 15.0, **kwargs: Any) -> ReferenceServer:
    """Start the reference server as a child process running this package's command line.

    Returns once the child accepts connections; raises ``RuntimeError`` with the child's
    error output if it exits or does not report its URL within ``timeout`` seconds.
    """
    options = _options(kwargs)
    package_dir = str(Path(__file__).resolve().parents[2])
    # the child stops when its stdin closes, which the OS does when this process dies,
    # however it dies (SIGKILL, a cancelled CI job): a server never outlives its parent
    cmd = [
        sys.executable,
        "-c",
        _CHILD_BOOTSTRAP,
        package_dir,
        *options_to_argv(options),
        "--stop-on-stdin-eof",
    ]
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None and proc.stderr is not None
    err_lines: deque[str] = deque(maxlen=40)
    line_box: list[str] = []
    got = threading.Event()

    def read_stdout() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            if not line_box:
                line_box.append(raw.decode(errors="replace").strip())
                got.set()
        got.set()

    def read_stderr() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            err_lines.append(raw.decode(errors="replace").rstrip())

    threading.Thread(target=read_stdout, daemon=True).start()
    threading.Thread(target=read_stderr, daemon=True).start()

    kill = functools.partial(_stop_child, proc)
    if not got.wait(timeout) or not line_box or not line_box[0].startswith(_URL_PREFIX):
        kill()
        detail = "; ".join(err_lines) or (line_box[0] if line_box else "no output")
        raise RuntimeError(
            f"reference server child (exit code {proc.returncode}) did not start within "
            f"{timeout:g} s: {detail}"
        )
    url = line_box[0][len(_URL_PREFIX) :]
    hostport = url.split("//", 1)[1].split("/", 1)[0]
    host, port = hostport.rsplit(":", 1)
    host = host.strip("[]")
    return ReferenceServer(host, int(port), options, kill, process=proc)


def announce(httpd: _HTTPServer) -> str:
    """The one line a child prints once it accepts connections."""
    host, port = httpd.server_address[:2]
    if isinstance(host, bytes):
        host = host.decode()
    if ":" in host:
        host = f"[{host}]"
    return f"{_URL_PREFIX}http://{host}:{port}/v1"
