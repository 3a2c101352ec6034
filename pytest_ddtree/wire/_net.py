"""The socket layer under the client: one total deadline per request, at every read.

httpx has connect, read and write timeouts but no deadline for a whole request,
and its read timeout restarts on every byte: a server that trickles one byte a
second is never timed out. ``DeadlineBackend`` wraps httpcore's network
backend so that every socket operation of a request waits at most until that
request's deadline (``Scope``), whether the bytes are response headers, a
plain body, a stream or a start-up probe. It also records, per request, how
many connections were opened and how many bytes arrived, which is what tells a
stale reused keep-alive connection (closed by the server before sending a
byte) from a server that broke a response.

No pytest here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from pytest_ddtree.wire.protocol import KEEPALIVE_EXPIRY

__all__ = ["KEEPALIVE_EXPIRY", "DeadlineBackend", "Scope", "current", "make_transport", "scope"]


@dataclass
class Scope:
    """One request's deadline and what its sockets did."""

    deadline: float | None
    connects: int = 0
    bytes_in: int = 0
    deadline_hit: bool = False

    def clamp(self, timeout: float | None) -> float | None:
        """``timeout`` shortened to the time left before the deadline."""
        if self.deadline is None:
            return timeout
        left = self.deadline - time.perf_counter()
        if left <= 0:
            self.deadline_hit = True
            return 0.0
        if timeout is None or left < timeout:
            return left
        return timeout


_local = threading.local()


def current() -> Scope | None:
    """The scope of the request running on this thread, if any."""
    scope: Scope | None = getattr(_local, "scope", None)
    return scope


@contextmanager
def scope(seconds: float | None) -> Iterator[Scope]:
    """Run a request under a total deadline of ``seconds`` (None: no deadline)."""
    outer = current()
    here = Scope(None if seconds is None else time.perf_counter() + seconds)
    _local.scope = here
    try:
        yield here
    finally:
        _local.scope = outer


def _clamp(timeout: float | None, write: bool = False) -> float | None:
    sc = current()
    if sc is None:
        return timeout
    left = sc.clamp(timeout)
    if left == 0.0:
        exc = httpcore.WriteTimeout if write else httpcore.ReadTimeout
        raise exc("total deadline reached")
    return left


def _note_deadline(timeout: float | None, left: float | None) -> None:
    """A timeout that the deadline shortened is the deadline's."""
    sc = current()
    if sc is not None and left is not None and (timeout is None or left < timeout):
        sc.deadline_hit = True


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        left = _clamp(timeout)
        try:
            data = self._inner.read(max_bytes, left)
        except httpcore.ReadTimeout:
            _note_deadline(timeout, left)
            raise
        sc = current()
        if sc is not None:
            sc.bytes_in += len(data)
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        left = _clamp(timeout, write=True)
        try:
            self._inner.write(buffer, left)
        except httpcore.WriteTimeout:
            _note_deadline(timeout, left)
            raise

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, _clamp(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync backend with every wait bounded by the request's deadline."""

    def __init__(self, inner: httpcore.NetworkBackend | None = None) -> None:
        self._inner = inner or httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        sc = current()
        if sc is not None:
            sc.connects += 1
        left = _clamp(timeout)
        try:
            stream = self._inner.connect_tcp(
                host, port, left, local_address=local_address, socket_options=socket_options
            )
        except httpcore.ConnectTimeout:
            _note_deadline(timeout, left)
            raise
        return _Stream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:  # pragma: no cover - loopback TCP only in tests
        sc = current()
        if sc is not None:
            sc.connects += 1
        stream = self._inner.connect_unix_socket(
            path, _clamp(timeout), socket_options=socket_options
        )
        return _Stream(stream)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def make_transport(limits: httpx.Limits) -> tuple[httpx.HTTPTransport, bool]:
    """An httpx transport whose sockets honour ``scope`` deadlines.

    Returns the transport and whether the deadline backend could be installed
    (it replaces httpcore's backend inside httpx's transport; if a future
    httpx moves it, deadlines fall back to the checks between chunks).
    """
    transport = httpx.HTTPTransport(limits=limits)
    pool = getattr(transport, "_pool", None)
    inner = getattr(pool, "_network_backend", None)
    if pool is None or not isinstance(inner, httpcore.NetworkBackend):
        return transport, False
    pool._network_backend = DeadlineBackend(inner)
    return transport, True
