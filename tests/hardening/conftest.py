"""Fixtures of the hardening tests: a hostile server of our own on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ._hostile import HostileServer


@pytest.fixture
def hostile() -> Iterator[Callable[..., HostileServer]]:
    """Start hostile servers with given options; all are stopped after the test."""
    started: list[HostileServer] = []

    def start(mode: str = "healthy", **options: Any) -> HostileServer:
        server = HostileServer(mode, **options).start()
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.__exit__()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytester runs must use the server each test names, whatever the shell configures
    for var in (
        "DDTREE_ENDPOINT",
        "OPENAI_BASE_URL",
        "DDTREE_API_KEY",
        "OPENAI_API_KEY",
        "DDTREE_BASELINE_ENDPOINT",
        "DDTREE_TOKENIZER",
        "DDTREE_TIMEOUT",
    ):
        monkeypatch.delenv(var, raising=False)
    # an inner run must not inherit this process's xdist worker identity
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
