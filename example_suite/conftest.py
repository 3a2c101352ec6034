"""Shared set-up of the example suite: the prompt set and what each answer must look like.

The prompts live in ``prompts.json`` next to this file (data, not code): edit that file to
gate your own deployment on your own prompts. Any test that asks for the ``prompt`` fixture
runs once per prompt (ids like ``essay-rivers``); ``sweep_prompt`` runs once per prompt marked
``"sweep": true``. Combined with ``tree_budget`` a test runs for every prompt at every budget
(``test_invariants[essay-rivers-tree_budget=64]``).

Tests run in the order a person would check a new deployment: smoke first (look at one output
per prompt before anything else), then every budget, determinism and losslessness, streaming,
the timed sweep, then latency under load last.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_ddtree.invariants import Expectation

PROMPTS_FILE = Path(__file__).with_name("prompts.json")

# pytest collects files alphabetically; a deploy gate reads better in this order.
_ORDER = (
    "test_smoke",
    "test_invariants",
    "test_lossless",
    "test_streaming",
    "test_sweep",
    "test_load",
)

_EXPECT_KEYS = frozenset(Expectation.__dataclass_fields__)


@dataclass(frozen=True)
class Prompt:
    """One prompt of the set and what a correct answer to it looks like."""

    id: str
    kind: str
    text: str
    expect: dict[str, Any]
    sweep: bool

    def expectations(self, max_tokens: int) -> dict[str, Any]:
        """Keyword arguments for ``ddtree_check`` at this ``max_tokens``.

        A minimum length above ``max_tokens`` can never be met, so it is capped there.
        """
        out = dict(self.expect)
        if isinstance(out.get("min_tokens"), int):
            out["min_tokens"] = min(out["min_tokens"], max_tokens)
        return out


def load_prompts(path: Path = PROMPTS_FILE) -> list[Prompt]:
    """Read and validate the prompt set; a bad entry raises one line naming it and the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise pytest.UsageError(f"prompt set {path}: cannot read it as JSON ({exc})") from None
    entries = data.get("prompts") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise pytest.UsageError(f"prompt set {path}: expected an object with a 'prompts' list")
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"prompt set {path}, entry {i}"
        if not isinstance(entry, dict):
            raise pytest.UsageError(f"{where}: expected an object, got {entry!r}")
        pid, text = entry.get("id"), entry.get("prompt")
        if not isinstance(pid, str) or not pid or pid in seen:
            raise pytest.UsageError(f"{where}: id {pid!r} is missing, not a string or repeated")
        if not isinstance(text, str) or not text.strip():
            raise pytest.UsageError(f"{where} ({pid}): 'prompt' must be a non-empty string")
        expect = entry.get("expect", {})
        if not isinstance(expect, dict):
            raise pytest.UsageError(f"{where} ({pid}): 'expect' must be an object")
        unknown = sorted(set(expect) - _EXPECT_KEYS)
        if unknown:
            raise pytest.UsageError(
                f"{where} ({pid}): unknown expectation {unknown[0]!r}; "
                f"use keyword arguments of ddtree_check such as min_tokens"
            )
        seen.add(pid)
        prompts.append(
            Prompt(
                id=pid,
                kind=str(entry.get("kind", "")),
                text=text,
                expect=expect,
                sweep=bool(entry.get("sweep", False)),
            )
        )
    return prompts


_PROMPTS = pytest.StashKey[list[Prompt]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_PROMPTS] = load_prompts()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    prompts = metafunc.config.stash[_PROMPTS]
    if "prompt" in metafunc.fixturenames:
        metafunc.parametrize("prompt", prompts, ids=[p.id for p in prompts])
    if "sweep_prompt" in metafunc.fixturenames:
        chosen = [p for p in prompts if p.sweep] or prompts[:3]
        metafunc.parametrize("sweep_prompt", chosen, ids=[p.id for p in chosen])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        module = item.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")
        return _ORDER.index(module) if module in _ORDER else len(_ORDER)

    items.sort(key=rank)  # stable: keeps the order within a file


@pytest.fixture(scope="session")
def prompts(pytestconfig: pytest.Config) -> list[Prompt]:
    """The whole prompt set (for tests that walk it themselves)."""
    return pytestconfig.stash[_PROMPTS]
