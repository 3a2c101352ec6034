"""Shared fixtures: real reference servers on loopback, simulated latency off."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from socketserver import BaseServer

import pytest

from pytest_ddtree.reference import ReferenceServer, start_reference_server, tokenizer_path
from pytest_ddtree.wire.tokens import TokenCounter, load_counter


@pytest.fixture(scope="session")
def reference_server() -> Iterator[ReferenceServer]:
    """A healthy DDTree reference server answering as fast as it can."""
    with start_reference_server(simulated_latency=False) as server:
        yield server


@pytest.fixture(scope="session")
def baseline_server() -> Iterator[ReferenceServer]:
    """The target-only twin of ``reference_server``."""
    with start_reference_server(simulated_latency=False, target_only=True) as server:
        yield server


@pytest.fixture
def loopback() -> Iterator[Callable[[BaseServer], str]]:
    """Serve a test's own HTTP server (bound to 127.0.0.1) on a thread until the test ends:
    ``loopback(server)`` starts it and returns its ``http://127.0.0.1:PORT``."""
    started: list[BaseServer] = []

    def serve(server: BaseServer) -> str:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        host, port = server.server_address[:2]  # type: ignore[misc]
        return f"http://{host}:{port}"

    yield serve
    for server in started:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def _not_an_xdist_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner pytest runs must not inherit this process's xdist worker identity.

    pytest-benchmark reads ``PYTEST_XDIST_WORKER`` and disables itself when it is set, which
    would turn every inner run into a "worker" when this suite itself runs under ``-n``.
    """
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def reference_counter() -> TokenCounter:
    """Exact token counts with the reference server's own tokenizer.json."""
    return load_counter(str(tokenizer_path()))


# the marker expression of pyproject.toml's addopts: the default run
DEFAULT_RUN = "not slow and not real_engine"


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    """Say, in the header, that the default run leaves tiers out and how to run them."""
    if config.getoption("markexpr") != DEFAULT_RUN:
        return None
    return (
        "default run: the slow and engine tiers are left out "
        "(-m slow, -m llamacpp, -m vllm, -m sglang run one; -m '' runs all)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist the timing-sensitive tests (marker ``serial``) skip with the command that
    runs them alone: beside another worker a race rightly ends undecided, and a test that
    expects a verdict then fails for the machine, not for the code."""
    if not hasattr(config, "workerinput"):
        return
    skip = pytest.mark.skip(
        reason="timing-sensitive (marker serial): runs alone, outside xdist "
        "(python -m pytest tests -m serial)"
    )
    for item in items:
        if item.get_closest_marker("serial") is not None:
            item.add_marker(skip)
