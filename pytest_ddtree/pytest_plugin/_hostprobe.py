"""Sent to each xdist worker's host by execnet (``gateway.remote_exec``) before its worker
starts: says which pytest-ddtree the host runs, and leaves a channel that answers each
message with the host's wall clock, from execnet's receiver thread (the worker's main thread
stays free for pytest). Standard library only: this source runs on the other machine."""

from __future__ import annotations

import time
from typing import Any


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
    channel.send({"version": version, "hostname": socket.gethostname(), "clock": clock})


if __name__ == "__channelexec__":
    serve(channel)  # type: ignore[name-defined]  # noqa: F821
