"""Fixtures for the reference server tests: in-process servers with simulated latency off."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from pytest_ddtree.reference import ReferenceServer
from pytest_ddtree.reference.model import ReferenceModel, get_model


@pytest.fixture(scope="session")
def model() -> ReferenceModel:
    """The reference model, used directly for fast algorithmic checks."""
    return get_model()


@pytest.fixture(scope="session")
def ref_server(reference_server: ReferenceServer) -> ReferenceServer:
    """A healthy speculative server (the suite-wide one)."""
    return reference_server


@pytest.fixture(scope="session")
def ref_target(baseline_server: ReferenceServer) -> ReferenceServer:
    """A healthy target-only server (the suite-wide one)."""
    return baseline_server


@pytest.fixture(scope="session")
def client(ref_server: ReferenceServer) -> Iterator[httpx.Client]:
    """Client of ``ref_server``."""
    with httpx.Client(base_url=ref_server.base_url, timeout=30) as c:
        yield c


@pytest.fixture(scope="session")
def target_client(ref_target: ReferenceServer) -> Iterator[httpx.Client]:
    """Client of ``ref_target``."""
    with httpx.Client(base_url=ref_target.base_url, timeout=30) as c:
        yield c
