"""One attempt of a request on the wire (``Exchange``) and its transport failures.

A shell fills in the ``Exchange`` (stamps, status, body); ``classify_transport``
names an httpx exception by its type. No I/O: httpx appears only to classify
its exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from pytest_ddtree.core.settings import Timeout
from pytest_ddtree.wire.completion import (
    ErrorKind,
    RequestSpec,
)
from pytest_ddtree.wire.protocol.endpoint import EVENT_STREAM
from pytest_ddtree.wire.protocol.parse import one_line


@dataclass
class Exchange:
    """What one attempt of a request did on the wire, filled in by a shell.

    ``sent``, ``headers_at`` and ``done`` are ``perf_counter`` stamps; ``body`` is
    a plain (or error) answer, at most the byte cap; ``error``/``kind`` are set by
    the shell only for what happened below HTTP (transport, deadline, size cap).
    """

    spec: RequestSpec
    sent: float = 0.0
    headers_at: float | None = None
    done: float = 0.0
    status: int = 0
    content_type: str | None = None
    retry_after: str | None = None
    body: bytes = b""
    received: int = 0
    error: str | None = None
    kind: ErrorKind | None = None
    #: a non-2xx answer's own message (its ``error.message``), apart from ``error``'s words
    server_message: str | None = None

    def head(self, status: int, content_type: str | None, retry_after: str | None) -> str:
        """Record the response head; returns what to do with the body: ``stream``
        (decode events), ``body`` (keep, capped) or ``drain`` (read and drop)."""
        self.status = status
        self.content_type = content_type or ""
        self.retry_after = retry_after if status == 429 else None
        if status >= 400 or not self.spec.stream:
            return "body"
        return "stream" if self.event_stream else "drain"

    @property
    def event_stream(self) -> bool:
        """Whether the answer's Content-Type is an event stream."""
        return EVENT_STREAM in (self.content_type or "").partition(";")[0].lower()

    def fail(self, error: str, kind: ErrorKind) -> None:
        """Record the first failure (a later one does not replace it)."""
        if self.error is None:
            self.error, self.kind = error, kind

    @property
    def nothing_received(self) -> bool:
        """No byte of a response arrived (a stale keep-alive connection, if reused)."""
        return self.kind is ErrorKind.TRANSPORT and self.headers_at is None


def classify_transport(
    exc: Exception, timeout: Timeout, *, deadline_hit: bool = False, received: int = 0
) -> tuple[str, ErrorKind]:
    """A one-line message and the kind of a transport exception (by type, never text)."""
    if isinstance(exc, httpx.TimeoutException) and (
        deadline_hit or (isinstance(exc, httpx.ReadTimeout) and timeout.total <= timeout.read)
    ):
        got = f" ({received:,} bytes received)" if received else ""
        return (
            f"deadline: no complete response within the total deadline of {timeout.total:g}s{got}",
            ErrorKind.DEADLINE,
        )
    if isinstance(exc, httpx.ReadTimeout):
        if not received:  # what a hung server does: it took the request, and nothing came
            return (
                f"read timeout: the connection was accepted but no byte came in {timeout.read:g}s",
                ErrorKind.READ_TIMEOUT,
            )
        return f"read timeout: no data for {timeout.read:g}s", ErrorKind.READ_TIMEOUT
    if isinstance(exc, httpx.ConnectTimeout):
        return f"connect timeout after {timeout.connect:g}s", ErrorKind.CONNECT_TIMEOUT
    if isinstance(exc, httpx.PoolTimeout):
        return (
            "pool timeout: too many concurrent requests for the connection pool",
            ErrorKind.CONNECT_TIMEOUT,
        )
    if isinstance(exc, httpx.TimeoutException):  # a write timeout
        return f"{type(exc).__name__}: {one_line(str(exc))}", ErrorKind.READ_TIMEOUT
    before = received == 0
    if isinstance(exc, httpx.RemoteProtocolError):
        if before:
            return f"connection closed before any byte of the response: {exc}", ErrorKind.TRANSPORT
        return f"connection broken mid-response: {exc}", ErrorKind.BROKEN
    kind = (
        ErrorKind.TRANSPORT if before or isinstance(exc, httpx.ConnectError) else ErrorKind.BROKEN
    )
    return f"{type(exc).__name__}: {one_line(str(exc)) or 'no detail'}", kind
