"""The stall guard (``StallGuard``): stop sending to an endpoint that stalls or runs away."""

from __future__ import annotations

from urllib.parse import urlsplit

from pytest_ddtree.wire.completion import (
    STALL_KINDS,
    Completion,
    ErrorKind,
)

#: failures on the server's side of the exchange: no connection, a broken one, a stall
_SERVER_SIDE = frozenset(
    {ErrorKind.TRANSPORT, ErrorKind.CONNECT_TIMEOUT, ErrorKind.BROKEN, *STALL_KINDS}
)


class StallGuard:
    """Stop sending to an endpoint that stalls, or that streams without end.

    After ``limit`` requests in a row that got no complete answer in time
    (``STALL_KINDS``), or ``limit`` answers in a row cut at the byte cap, later
    requests are not sent: they fail at once with a ``not-sent`` error that says
    why, so a hanging or runaway endpoint fails a session in seconds instead of
    one deadline (or one byte cap) per request. Any other answer resets the count.
    ``limit`` 0 turns the guard off.

    ``dead_limit`` requests in a row that failed on the server's side (an HTTP 5xx, no
    connection, a broken one, a stall) before the endpoint ever answered (any 2xx or 4xx)
    also trip it (``dead``): a server that has never answered is down, and every later
    request would only repeat that. Once it has answered, failures are each a finding
    for their own test (an overloaded or flaky server), never a reason to stop. 0 (the
    default) leaves this rule off; the session's client turns it on.

    ``stops_run`` (the session's client sets it) says that a trip on stalls ends the run
    too (``stopped``): ``limit`` requests in a row with no complete answer and nothing
    between them that answered, on the session's own endpoint, leave every later test
    nothing to measure. The reason names the endpoint's host and what was observed.
    """

    def __init__(self, limit: int = 2, dead_limit: int = 0, *, stops_run: bool = False) -> None:
        self.limit = limit
        self.dead_limit = dead_limit
        self.stops_run = stops_run
        self._stalls: list[str] = []
        self._cuts: list[str] = []
        self._reason: str | None = None
        self._runaway = False
        self._stalled = False
        self._where: str | None = None
        self._answered = False
        self._failures: list[str] = []
        self._dead = False

    def blocked(self) -> str | None:
        """The error of a request that must not be sent, or None to send it."""
        if not self.limit:
            return None
        if self._reason is None:
            if len(self._stalls) >= self.limit:
                self._stalled = True
                at = f" at {self._where}" if self._where else ""
                self._reason = (
                    f"the endpoint{at} stalled on {len(self._stalls)} requests in a row "
                    f"({self._stalls[-1]})"
                )
            elif self.dead_limit and not self._answered and len(self._failures) >= self.dead_limit:
                self._dead = True
                self._reason = (
                    f"the endpoint answered none of its first {len(self._failures)} requests "
                    f"({self._failures[-1]})"
                )
            elif len(self._cuts) >= self.limit:
                self._runaway = True
                self._reason = (
                    f"the endpoint sent {len(self._cuts)} answers in a row past the byte cap "
                    f"({self._cuts[-1]})"
                )
        if self._reason is None:
            return None
        return f"not sent: {self._reason}; later requests fail at once"

    @property
    def tripped(self) -> bool:
        """Whether later requests are refused."""
        return self.blocked() is not None

    def trip(self, reason: str) -> None:
        """Refuse every later request, for ``reason`` (a load point that found a dead server)."""
        if self._reason is None:
            self._reason = reason

    @property
    def reason(self) -> str | None:
        """Why later requests are refused (None while they are sent)."""
        self.blocked()
        return self._reason

    def answered(self) -> None:
        """The endpoint answered (a 2xx or 4xx, on any path: the load runner's too)."""
        self._answered = True
        self._failures.clear()

    @property
    def dead(self) -> bool:
        """Whether the guard tripped on an endpoint that has never answered."""
        return self.tripped and self._dead

    @property
    def stalled(self) -> bool:
        """Whether the guard tripped on requests that got no complete answer in time."""
        return self.tripped and self._stalled

    @property
    def stopped(self) -> bool:
        """Whether the run stops here: a dead endpoint, or (``stops_run``) a stalled one."""
        return self.dead or (self.stops_run and self.stalled)

    @property
    def runaway(self) -> bool:
        """Whether the guard tripped on answers cut at the byte cap."""
        return self.tripped and self._runaway

    def record(self, completion: Completion) -> None:
        """Count one answer (or its absence)."""
        where = urlsplit(completion.request.url).netloc or None
        self.note(completion.error_kind, completion.error, completion.status_code, where=where)

    def note(
        self, kind: ErrorKind | None, error: str | None, status: int, *, where: str | None = None
    ) -> None:
        """Count one answer from its kind, its error and its HTTP status (``where``: the
        host the request went to, named when the stalls trip the guard)."""
        if self._reason is not None:  # tripped for good: what follows changes nothing
            return
        if not self._answered:
            if status and status < 500:
                self.answered()
            elif status >= 500 or kind in _SERVER_SIDE:
                self._failures.append(error or (f"HTTP {status}" if status else str(kind)))
            # the client's own failure (not sent, its parser, its size cap) counts for neither
        if kind in STALL_KINDS:
            self._stalls.append(error or str(kind))
            self._where = where
            self._cuts.clear()
        elif kind == ErrorKind.TOO_LARGE:
            self._cuts.append(error or str(kind))
            self._stalls.clear()
        elif kind != ErrorKind.NOT_SENT and status:
            self._stalls.clear()
            self._cuts.clear()
