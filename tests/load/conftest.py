"""Fixtures of the load tests: reference servers in their own processes, on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytest_ddtree.reference import spawn_reference_server


@pytest.fixture(scope="module")
def fast_server() -> Iterator[Any]:
    """A healthy reference server without simulated latency, in a subprocess."""
    with spawn_reference_server(simulated_latency=False) as server:
        yield server


@pytest.fixture(scope="module")
def timed_server() -> Iterator[Any]:
    """A healthy reference server with simulated (batched) accelerator time."""
    with spawn_reference_server() as server:
        yield server
