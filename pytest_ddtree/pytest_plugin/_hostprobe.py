"""Sent to each xdist worker's host by execnet (``gateway.remote_exec``) before its worker
starts: says which pytest-ddtree the host runs, and leaves a channel that answers each
message with the host's wall clock, from execnet's receiver thread (the worker's main thread
stays free for pytest), and a channel on which the controller sends the instant the load
starts (``wait_for_start``). Standard library only: this source runs on the other machine."""

from __future__ import annotations

import time
from typing import Any

#: the channel the controller's start instant comes on (set on a worker's host by ``serve``)
START: Any = None
#: seconds a worker waits for the start instant before it starts on its own
START_TIMEOUT = 20.0
#: never sleep longer than this for the start instant (a wrong clock must not hang a run)
LONGEST_WAIT = 5.0


def wait_for_start() -> float | None:
    """Once per worker, before its first load request: wait for the controller's start
    instant (on this host's clock), then until it. None when there is none to wait for."""
    global START
    channel, START = START, None
    if channel is None:
        return None
    try:
        at = float(channel.receive(timeout=START_TIMEOUT))
    except Exception:  # the controller chose none in time: start now, the skew shows it
        return None
    time.sleep(min(max(0.0, at - time.time()), LONGEST_WAIT))
    return at


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
        home.START = start
    except Exception:
        start = None
    channel.send(
        {"version": version, "hostname": socket.gethostname(), "clock": clock, "start": start}
    )


if __name__ == "__channelexec__":
    serve(channel)  # type: ignore[name-defined]  # noqa: F821
