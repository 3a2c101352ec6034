"""One clock for both I/O shells: when a request went on the wire, and what connecting cost.

The sync client (``wire/client.py``) and the load runner (``measure/load/runner.py``) hand
httpcore the same ``WireClock`` as the request's ``trace`` extension, so ``sent`` is the same
event in both: the request's first byte on the wire (its headers starting to go out, HTTP/1.1
or HTTP/2). Waiting for a pooled connection and building the request come before it; a new
connection's setup (TCP, and TLS for ``https://``) also comes before it and is kept apart
(``connect_start``/``connect_end``), never inside TTFT. ``began`` is when the call began:
the request's deadline runs from there, so a timeout still bounds the whole call.

No I/O here; no pytest.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_ddtree.wire.completion import Completion

__all__ = ["WireClock", "with_connect"]

# httpcore names its trace events "<logger>.<step>.<started|complete|failed>"; the logger
# is ``http11`` or ``http2`` for the request, ``connection`` (``proxy``, ``socks`` behind a
# proxy) for the connection's setup
_SEND = ".send_request_headers.started"
_CONNECT = (".connect_tcp.started", ".connect_unix_socket.started")
_CONNECTED = (".connect_tcp.complete", ".connect_unix_socket.complete", ".start_tls.complete")


@dataclass
class WireClock:
    """The ``perf_counter`` stamps of one attempt, from httpcore's trace events.

    ``sent`` is None until the headers start to go out (never, when the transport does not
    trace: a mock transport; then ``sent_at`` falls back to ``began``). The latest event
    wins: httpcore may open a second connection within one attempt (and a proxy tunnel
    sends its own CONNECT first), and what counts is the request that got the answer.
    """

    began: float = field(default_factory=time.perf_counter)
    sent: float | None = None
    connect_start: float | None = None
    connect_end: float | None = None

    def event(self, name: str, info: Mapping[str, Any] | None = None) -> None:
        """Note one trace event (``info`` unused: the stamp is all the clock needs)."""
        now = time.perf_counter()
        if name.endswith(_SEND):
            self.sent = now
        elif name.endswith(_CONNECT):
            self.connect_start, self.connect_end = now, None
        elif name.endswith(_CONNECTED):
            self.connect_end = now

    def trace(self, name: str, info: Mapping[str, Any]) -> None:
        """The sync client's ``trace`` extension."""
        self.event(name, info)

    async def atrace(self, name: str, info: Mapping[str, Any]) -> None:
        """The async client's ``trace`` extension (httpcore awaits it)."""
        self.event(name, info)

    @property
    def sent_at(self) -> float:
        """``sent``, or ``began`` when no request went out (failed to connect, mock)."""
        return self.began if self.sent is None else self.sent

    @property
    def connected(self) -> tuple[float, float] | None:
        """(start, end) of the new connection's setup; None when one was reused (or none
        was made: the attempt failed before it connected)."""
        if self.connect_start is None or self.connect_end is None:
            return None
        return self.connect_start, self.connect_end


def with_connect(completion: Completion, connected: tuple[float, float] | None) -> Completion:
    """``completion`` with its new connection's setup stamped on its timings (unchanged
    when the connection was reused)."""
    if connected is None:
        return completion
    start, end = connected
    return replace(
        completion, timings=replace(completion.timings, connect_start=start, connect_end=end)
    )
