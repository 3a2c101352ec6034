"""The client's own health while a request streamed: was the client running?

A client process that the machine deschedules (a busy CI runner, a shared box, a
stopped process) reads the chunks late: they pile up in the kernel's receive buffer
and are stamped when the client runs again. The stamps then say more about the
client than about the server, and a check that compares the server's own figures
with them (its tokens/s against the client-measured decode rate) would blame the
server for the client's trouble.

The evidence is a ticker: something that asks to wake every few milliseconds and
notes how late it woke. A late wake-up means the process (or, for the load runner,
its event loop) did not run for that long; the chunks that arrived meanwhile waited
too. ``StallLog`` keeps those late intervals (perf_counter stamps); ``ClientStall``
is what one request's decode window overlapped with them.

- The sync client uses ``ThreadTicker``: one daemon thread for the process, ticking
  only while a request is in flight (``with TICKER.watching():``).
- The load runner's event loop has its own lag timer; it feeds a ``StallLog`` too,
  so a loop that is late for its own reasons counts as well.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pytest_ddtree.core import jsonmodel

#: the thread ticker's period, seconds
TICK = 0.002
#: lateness below this is timer slack (and the interpreter's thread switching), not a stall
SLACK = 0.002
#: a request's client-timed figures are judged only when the client stalled for at most
#: this share of its decode window: the decode time is then at most 1 / (1 - 0.1) = 1.11x
#: what an unstalled client would have measured, far inside any rate tolerance
CLEAN_SHARE = 0.10


@dataclass(frozen=True)
class ClientStall:
    """How long the client itself was not running during one request's decode window.

    ``window`` is the decode window (first to last content event, as the client stamped
    them), ``stalled`` the part of it during which the client's ticker ran late (the
    process or its event loop did not run), ``longest`` the longest single stall in
    it, ``source`` the ticker (``thread`` for the sync client, ``event-loop`` for the
    load runner). A window the ticker did not watch from its start counts as stalled
    from its start to the first tick (unobserved time is not healthy time).
    """

    stalled: float
    window: float
    longest: float
    source: str

    @property
    def share(self) -> float:
        """The stalled share of the decode window (0 for an empty window)."""
        return self.stalled / self.window if self.window > 0 else 0.0

    @property
    def clean(self) -> bool:
        """Whether the client ran for (nearly) all of the decode window."""
        return self.stalled <= CLEAN_SHARE * self.window

    def describe(self) -> str:
        """``client stalled 0.11 s of a 0.17 s decode``."""
        return f"client stalled {self.stalled:.2f} s of a {self.window:.2f} s decode"

    def to_json(self) -> dict[str, object]:
        """Plain JSON (seconds to 0.1 ms)."""
        return jsonmodel.to_json(self)


_TENTH_MS = jsonmodel.override(unstruct_hook=lambda x: round(x, 4))
jsonmodel.register(ClientStall, stalled=_TENTH_MS, window=_TENTH_MS, longest=_TENTH_MS)


class StallLog:
    """Intervals during which a ticker of this process woke late (thread-safe).

    ``tick(due, now)`` records one wake-up; ``since`` is when the ticker started
    watching (None while it does not). ``pending`` (optional) is the stamp of the last
    tick of a ticker that is still running: a query made while it is overdue counts
    the overdue time as stalled, since the ticker may simply not have run yet.
    """

    def __init__(self, source: str, maxlen: int = 16384) -> None:
        self.source = source
        self._spans: deque[tuple[float, float]] = deque(maxlen=maxlen)
        self._lock = threading.Lock()
        self.since: float | None = None
        self.last: float | None = None
        self.period = TICK

    def start(self, now: float) -> None:
        """The ticker watches from ``now``."""
        with self._lock:
            self.since = self.last = now

    def stop(self) -> None:
        """The ticker stopped watching (its old intervals stay queryable)."""
        with self._lock:
            self.since = self.last = None

    def tick(self, due: float, now: float) -> None:
        """A wake-up at ``now`` that was due at ``due``."""
        with self._lock:
            if now - due > SLACK:
                self._spans.append((due, now))
            self.last = now

    def stall(self, start: float, end: float, now: float | None = None) -> ClientStall:
        """The stalls that overlapped ``[start, end]``."""
        window = max(0.0, end - start)
        with self._lock:
            spans = list(self._spans)
            since, last = self.since, self.last
        if now is not None and last is not None and now - last > self.period + SLACK:
            spans.append((last + self.period, now))  # overdue: not run yet, or not running
        if since is not None and since > start:
            spans.append((start, since))  # not watched yet
        total = longest = 0.0
        for a, b in spans:
            lo, hi = max(a, start), min(b, end)
            if hi > lo:
                total += hi - lo
                longest = max(longest, hi - lo)
        return ClientStall(min(total, window), window, longest, self.source)


class ThreadTicker:
    """One daemon thread that ticks while any request is in flight (``watching``).

    Idle between requests, so it costs nothing to a run that does not use the sync
    client (the load runner's event loop has its own timer). Every thread of the
    process stops when the process is stopped or descheduled, so the ticker's late
    wake-ups are the main thread's too.
    """

    def __init__(self) -> None:
        self.log = StallLog("thread")
        self._cond = threading.Condition()
        self._active = 0
        self._thread: threading.Thread | None = None

    @contextmanager
    def watching(self) -> Iterator[StallLog]:
        """Tick while the block runs; yields the log to query."""
        with self._cond:
            if self._active == 0:
                # a window opens at the request's own stamps, which follow this one
                self.log.start(time.perf_counter())
            self._active += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="ddtree-stall-ticker", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        try:
            yield self.log
        finally:
            with self._cond:
                self._active -= 1

    def _run(self) -> None:
        perf, sleep = time.perf_counter, time.sleep
        while True:
            with self._cond:
                if self._active == 0:
                    self.log.stop()
                    while self._active == 0:
                        self._cond.wait()
            due = perf() + TICK
            sleep(TICK)
            self.log.tick(due, perf())


#: the process's one thread ticker (the sync client's)
TICKER = ThreadTicker()
