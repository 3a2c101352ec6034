"""Shared fixtures of the sweep tests: reference servers on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytest_ddtree.reference import start_reference_server


@pytest.fixture(scope="module")
def healthy_server() -> Iterator[Any]:
    """A healthy reference server without simulated latency (fast)."""
    server = start_reference_server(simulated_latency=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def server_factory() -> Iterator[Any]:
    """Start reference servers with given options; all are stopped after the test."""
    started: list[Any] = []

    def start(**options: Any) -> Any:
        server = start_reference_server(**options)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()
