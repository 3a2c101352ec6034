"""Shared set-up of the example suite: the prompt set and what each answer must look like.

The prompts live in ``prompts.json`` next to this file (data, not code): edit that file, or
give your own with ``--ddtree-prompts FILE`` (JSON or JSON Lines), to gate your deployment on
your own workload. Any test that asks for the ``prompt`` fixture runs once per prompt (ids
like ``essay-rivers``); ``sweep_prompt`` runs once per prompt marked ``"sweep": true``.
Combined with ``tree_budget`` a test runs for every prompt at every budget
(``test_invariants[essay-rivers-tree_budget=64]``).

Tests run in the order a person would check a new deployment: smoke first (look at one output
per prompt before anything else), then every budget, determinism and losslessness, streaming,
the timed sweep, then latency under load last.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_ddtree import Prompt, PromptFileError, PromptSet, load_prompts, settings_of

PROMPTS_FILE = Path(__file__).with_name("prompts.json")

# pytest collects files alphabetically; a deploy gate reads better in this order.
_ORDER = (
    "test_smoke",
    "test_invariants",
    "test_lossless",
    "test_streaming",
    "test_sweep",
    "test_load",
    "test_breakeven",
)

_PROMPTS = pytest.StashKey[PromptSet]()


@pytest.hookimpl(trylast=True)  # after the plugin has resolved the settings
def pytest_configure(config: pytest.Config) -> None:
    chosen = settings_of(config).prompts  # --ddtree-prompts, validated when resolved
    if chosen is None:
        try:
            chosen = load_prompts(PROMPTS_FILE)
        except PromptFileError as exc:
            raise pytest.UsageError(str(exc)) from None
    config.stash[_PROMPTS] = chosen


def _usable(config: pytest.Config, prompts: tuple[Prompt, ...]) -> list[Prompt]:
    """The prompts the configured API can send: a conversation or tools need the chat API."""
    if settings_of(config).api == "chat":
        return list(prompts)
    return [p for p in prompts if p.needs_chat is None]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    config = metafunc.config
    prompt_set = config.stash[_PROMPTS]
    api = settings_of(config).api
    if "prompt" in metafunc.fixturenames:
        params = [
            pytest.param(
                p,
                id=p.id,
                marks=[pytest.mark.skip(reason=p.needs_chat)]
                if p.needs_chat is not None and api != "chat"
                else [],
            )
            for p in prompt_set.prompts
        ]
        metafunc.parametrize("prompt", params)
    if "sweep_prompt" in metafunc.fixturenames:
        chosen = _usable(config, prompt_set.sweep_prompts())
        metafunc.parametrize("sweep_prompt", chosen, ids=[p.id for p in chosen])
    if "sampled_temperature" in metafunc.fixturenames:
        # the temperatures users serve (--ddtree-temperatures above 0), else 0.7
        temps = [t for t in settings_of(config).temperatures if t > 0] or [0.7]
        metafunc.parametrize(
            "sampled_temperature", temps, ids=[f"temperature={t:g}" for t in temps]
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        module = item.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")
        return _ORDER.index(module) if module in _ORDER else len(_ORDER)

    items.sort(key=rank)  # stable: keeps the order within a file


@pytest.fixture(scope="session")
def prompts(pytestconfig: pytest.Config) -> list[Prompt]:
    """The whole prompt set the configured API can send (for tests that walk it themselves)."""
    return _usable(pytestconfig, pytestconfig.stash[_PROMPTS].prompts)


@pytest.fixture(scope="session")
def sweep_prompts(pytestconfig: pytest.Config) -> list[Prompt]:
    """The prompts of the timed sweep and the load test."""
    return _usable(pytestconfig, pytestconfig.stash[_PROMPTS].sweep_prompts())
