"""Sent to each xdist worker's host by execnet (``gateway.remote_exec``) before its worker
starts: says which pytest-ddtree the host runs, and leaves a channel that answers each
message with the host's wall clock, from execnet's receiver thread (the worker's main thread
stays free for pytest), and a gate channel: before each run of a split load test the worker
sends where it is and the controller answers, once every host is there, with the instant
the run starts (``wait_at``). Standard library only: this source runs on the other machine."""

from __future__ import annotations

import time
from typing import Any

#: the gate channel to the controller (set on a worker's host by ``serve``)
GATE: Any = None
#: seconds a worker waits at a run for the other hosts before it starts alone (the start
#: skew then shows it): a host may be a whole test behind
GATE_TIMEOUT = 300.0
#: never sleep longer than this for a start instant (a wrong clock must not hang a run)
LONGEST_WAIT = 5.0


def wait_at(nodeid: str, call: int, run: int) -> float | None:
    """Before run ``run`` of call ``call`` of test ``nodeid``: wait until every host is
    there, then until the instant the controller chose (on this host's clock). None when
    there is no controller to ask, or it did not answer in time."""
    channel = GATE
    if channel is None:
        return None
    mark = [nodeid, call, run]
    deadline = time.monotonic() + GATE_TIMEOUT
    try:
        channel.send(mark)
        while True:  # an answer to an earlier mark (one this worker gave up on) is stale
            got, at = channel.receive(timeout=max(0.0, deadline - time.monotonic()))
            if list(got) == mark:
                break
    except Exception:
        return None
    time.sleep(min(max(0.0, float(at) - time.time()), LONGEST_WAIT))
    return float(at)


def serve(channel: Any) -> None:
    """Send the host's version and hostname, and a clock channel that answers every ping."""
    import socket

    try:
        import pytest_ddtree

        version = str(pytest_ddtree.__version__)
    except Exception as exc:  # reported as the version: the controller refuses the host
        version = f"not importable ({type(exc).__name__}: {exc})"
    clock = channel.gateway.newchannel()
    clock.setcallback(lambda _: clock.send(time.time()))
    start = channel.gateway.newchannel()
    try:  # where the worker's load tester finds it (this source runs apart from the module)
        import importlib

        home: Any = importlib.import_module("pytest_ddtree.pytest_plugin._hostprobe")
        home.GATE = start
    except Exception:
        start = None
    channel.send(
        {"version": version, "hostname": socket.gethostname(), "clock": clock, "start": start}
    )


if __name__ == "__channelexec__":
    serve(channel)  # type: ignore[name-defined]  # noqa: F821
