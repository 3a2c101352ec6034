"""Run-level guards: SIGTERM handled like Ctrl-C, and the transport counters made visible.

* ``install`` makes SIGTERM (what CI's ``timeout`` sends) and SIGINT raise
  ``KeyboardInterrupt`` once, so pytest stops the run as interrupted and the
  session-finish hooks still write the partial report, the JUnit XML and the
  benchmark JSON. A second signal while they are written is recorded, not
  raised, so it cannot cut a file short or make a partial run look complete;
  a third one ends the process at once for a user who really wants out.
* ``transport_lines`` and ``transport_metadata`` show every retry, 429 and
  token-counter failure in the summary and the report.

No pytest here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from pytest_ddtree.core.wording import Note

if TYPE_CHECKING:
    from pytest_ddtree.measure.sweep import RunMetadata

_SIGNALS = tuple(s for s in (signal.SIGINT, getattr(signal, "SIGTERM", None)) if s is not None)

_received: list[int] = []
_previous: dict[int, Any] = {}


def _handler(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    if len(_received) == 1:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")
    if len(_received) >= 3:
        # asked three times: stop now, whatever is being written
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def install() -> None:
    """Handle SIGINT and SIGTERM as described above (main thread only; idempotent)."""
    if threading.current_thread() is not threading.main_thread() or _previous:
        return
    _received.clear()
    for sig in _SIGNALS:
        try:
            _previous[sig] = signal.signal(sig, _handler)
        except (OSError, ValueError):  # not allowed here: leave that signal alone
            continue


def restore() -> None:
    """Put back the handlers ``install`` replaced."""
    for sig, old in list(_previous.items()):
        with contextlib.suppress(OSError, ValueError, TypeError):
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
    _previous.clear()


def interrupted() -> bool:
    """Whether a signal interrupted this run (whatever pytest's exit status says)."""
    return bool(_received)


def signal_names() -> list[str]:
    """The signals received, in order."""
    return [signal.Signals(s).name for s in _received]


def _clients(runtime: Any) -> list[tuple[str, Any]]:
    out = [("", getattr(runtime, "client", None))]
    baseline = getattr(runtime, "baseline", None)
    if baseline is not None:
        out.append(("baseline: ", baseline))
    return [(label, c) for label, c in out if c is not None]


def transport_notes(runtime: Any, *, benign: bool = True) -> list[Note]:
    """One note per retry kind, 429 count or counter failure of each client (none when
    clean), the baseline's labelled; ``benign=False``: only those that qualify the run's
    results."""
    out: list[Note] = []
    for label, client in _clients(runtime):
        notes: Callable[..., list[Note]] | None = getattr(client, "transport_notes", None)
        if notes is not None:
            out.extend(note.labelled(label) for note in notes(benign=benign))
    return out


def transport_lines(runtime: Any, *, benign: bool = True) -> list[str]:
    """:func:`transport_notes` as the terminal's lines."""
    return [f"ddtree: {note}" for note in transport_notes(runtime, benign=benign)]


def transport_metadata(metadata: RunMetadata, runtime: Any) -> None:
    """Add the counts (and the summary lines, as report notes) to a report's metadata."""
    counts = {}
    for label, client in _clients(runtime):
        get = getattr(client, "transport_counts", None)
        if get is not None:
            counts["baseline" if label else "endpoint"] = get()
    if counts:
        metadata.extra["transport"] = counts
    lines = [str(note) for note in transport_notes(runtime)]
    if interrupted():
        lines.append(f"interrupted by {', '.join(signal_names())}")
    metadata.notes.extend(line for line in lines if line not in metadata.notes)
