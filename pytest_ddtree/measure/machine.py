"""The machine's and the server's state next to the timings: ``--ddtree-probe`` and ``/version``.

:func:`run_probe` runs the user's probe command (GPU clocks, temperature,
memory: whatever the command prints) before and after the session.
:func:`server_info` reads what the server says about itself (vLLM's
``/version``, SGLang's ``/get_server_info``). Both are descriptive: bounded
in time and bytes, and a failure of either is a one-line warning in the
result, never an exception. Nothing here imports pytest.

The probe command is split with :func:`shlex.split` and run **without a
shell**: what the user wrote is what runs, with no second round of
expansion. A command that needs a pipe or a redirection says so itself:
``sh -c 'nvidia-smi ... | tail -n +2'``.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import IO, Any

from pytest_ddtree.core import jsonmodel

#: A probe may run this long (seconds) before it is stopped.
PROBE_TIMEOUT = 10.0
#: A probe's output is kept up to this many bytes; the rest is cut with a note.
PROBE_MAX_BYTES = 64 * 1024
#: The server's description is read only up to this size, and this long (seconds).
INFO_MAX_BYTES = 64 * 1024
INFO_TIMEOUT = 5.0
#: Where servers describe themselves, under the server root.
INFO_PATHS = ("/version", "/get_server_info")


@dataclass(frozen=True)
class ProbeResult:
    """One run of the probe command: its output and, when it went wrong, why.

    ``problem`` is None when the command ran and exited 0 within the limits;
    otherwise one line (not found, exit status, timed out, output cut).
    ``output`` keeps whatever was printed, even when something went wrong.
    """

    command: str
    when: str
    started: str
    seconds: float
    exit_code: int | None
    output: str
    truncated: bool = False
    problem: str | None = None

    def warning(self) -> str | None:
        """The one-line warning for the terminal (None when the probe went well)."""
        if self.problem is None:
            return None
        return f"ddtree: WARNING: --ddtree-probe ({self.when} the session): {self.problem}"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for ``sweep.json`` and pytest-benchmark's ``machine_info``."""
        return jsonmodel.to_json(self)


jsonmodel.register(ProbeResult, seconds=jsonmodel.override(unstruct_hook=lambda x: round(x, 3)))


def _redact(text: str, secrets: Iterable[str | None]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Stop the probe and whatever it started (its own process group on POSIX)."""
    try:
        if os.name == "posix":
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
    except OSError:
        pass  # already gone


def _read_capped(stream: IO[bytes], cap: int, out: bytearray, full: threading.Event) -> None:
    try:
        while True:
            chunk = stream.read1(65536)  # type: ignore[attr-defined]
            if not chunk:
                return
            out.extend(chunk[: cap + 1 - len(out)])
            if len(out) > cap:
                full.set()
                return
    except (OSError, ValueError):
        return  # the pipe was closed under us: the probe was given up on


def run_probe(
    command: str,
    when: str,
    *,
    timeout: float = PROBE_TIMEOUT,
    max_bytes: int = PROBE_MAX_BYTES,
    secrets: Iterable[str | None] = (),
) -> ProbeResult:
    """Run ``command`` (no shell), keep at most ``max_bytes`` of its output, stop it at ``timeout``.

    Standard error is kept with standard output (a failing ``nvidia-smi`` says
    why there). ``secrets`` (the API key) are masked in the output.
    """
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()

    def result(code: int | None, out: bytes, truncated: bool, problem: str | None) -> ProbeResult:
        text = _redact(out.decode("utf-8", errors="replace"), secrets)
        if truncated:
            text += f"\n[output cut at {max_bytes:,} bytes]"
        shown = _redact(command, secrets)
        return ProbeResult(
            shown, when, started, time.monotonic() - t0, code, text, truncated, problem
        )

    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return result(None, b"", False, f"cannot split the command into words ({exc})")
    if not argv:
        return result(None, b"", False, "the command is empty")
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=os.name == "posix",
        )
    except OSError as exc:  # not found, not executable
        why = exc.strerror or str(exc)
        return result(None, b"", False, f"cannot run {_redact(argv[0], secrets)!r}: {why}")
    assert proc.stdout is not None
    out, full = bytearray(), threading.Event()
    reader = threading.Thread(
        target=_read_capped, args=(proc.stdout, max_bytes, out, full), daemon=True
    )
    reader.start()
    try:
        reader.join(timeout)
        timed_out = reader.is_alive()
        if timed_out or full.is_set():
            _kill(proc)
        try:
            code: int | None = proc.wait(2.0)
        except subprocess.TimeoutExpired:
            code = None
        reader.join(1.0)
    finally:  # Ctrl-C included: the probe never outlives the session
        if proc.poll() is None:
            _kill(proc)
        proc.stdout.close()
    truncated = full.is_set()
    data = bytes(out[:max_bytes])
    if timed_out:
        problem = f"stopped after {timeout:g} s without finishing; its output so far is kept"
    elif truncated:
        problem = f"printed more than {max_bytes:,} bytes; the output is cut there"
    elif code != 0:
        last = data.decode("utf-8", errors="replace").strip().splitlines()[-1:] or ["no output"]
        problem = f"exited with status {code}: {_redact(last[0][:200], secrets)}"
    else:
        problem = None
    return result(None if timed_out else code, data, truncated, problem)


# ---------------------------------------------------------------- the server's own word

_SECRET_KEYS = ("api_key", "apikey", "password", "secret", "hf_token", "access_token")


def _is_secret_key(key: str) -> bool:
    k = key.lower()
    return k == "token" or k == "authorization" or any(k.endswith(s) for s in _SECRET_KEYS)


def scrub(value: Any, secrets: Iterable[str | None] = ()) -> Any:
    """``value`` with secret-looking keys (``api_key``, ``*_password``) and ``secrets`` masked."""
    known = [s for s in secrets if s]
    if isinstance(value, Mapping):
        return {
            str(k): "***" if _is_secret_key(str(k)) and v not in (None, "") else scrub(v, known)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [scrub(v, known) for v in value]
    if isinstance(value, str):
        return _redact(value, known)
    return value


@dataclass(frozen=True)
class ServerInfo:
    """What the server said about itself (``found``: path -> JSON) and what could not be read."""

    found: Mapping[str, Any]
    problems: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Plain JSON: the answers by path."""
        return dict(self.found)


def server_info(
    http: Any,
    root: str,
    *,
    secrets: Iterable[str | None] = (),
    timeout: float = INFO_TIMEOUT,
    max_bytes: int = INFO_MAX_BYTES,
) -> ServerInfo:
    """GET ``/version`` and ``/get_server_info`` from ``root`` with the client's pooled ``http``.

    A path the server does not have (404, not JSON) is simply absent; a slow
    or huge answer is a problem line, never an exception. Secrets are masked
    (SGLang lists its own ``api_key`` among its server arguments).
    """
    import httpx

    from pytest_ddtree.wire import _net
    from pytest_ddtree.wire.client import _read_capped as read_body

    keys = list(secrets)
    found: dict[str, Any] = {}
    problems: list[str] = []
    for path in INFO_PATHS:
        url = root.rstrip("/") + path
        with _net.scope(timeout):
            try:
                # the pooled client's deadline backend bounds the total; the timeout each read
                with http.stream("GET", url, timeout=timeout) as resp:
                    body, over = read_body(resp, max_bytes)
            except httpx.HTTPError as exc:
                problems.append(f"{url}: no answer within {timeout:g} s ({type(exc).__name__})")
                continue
        if over:
            problems.append(f"{url}: larger than {max_bytes:,} bytes; not recorded")
        elif resp.status_code == 200:
            try:
                found[path] = scrub(json.loads(body), keys)
            except (ValueError, RecursionError):
                continue  # not a description this version understands
    return ServerInfo(found, tuple(problems))
