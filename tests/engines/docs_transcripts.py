"""The engine pages' transcripts, checked against a new run of their scenarios.

``docs/transcripts.py`` names the scenarios that need an engine (``Scenario.engine``); each
starts its engine with ``python -m pytest_ddtree.engines``, one at a time, and runs a few tests
of the bundled suite against it. Every line a page shows must still be printed, numbers masked;
``python docs/generate.py --engine NAME`` rewrites the blocks. The checks take minutes beside
the tier's own, so each engine's runs only when asked (``DDTREE_DOCS_LLAMACPP=1``,
``DDTREE_DOCS_VLLM=1``, ``DDTREE_DOCS_SGLANG=1``): the CI gate's time goes to the tiers'
verdict tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.docs import load_transcripts

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


transcripts = load_transcripts.transcripts()


def asked(engine: str) -> pytest.MarkDecorator:
    """Skip unless ``DDTREE_DOCS_<ENGINE>=1`` asks for ``engine``'s transcript checks."""
    variable = f"DDTREE_DOCS_{engine.upper()}"
    return pytest.mark.skipif(
        os.environ.get(variable) != "1",
        reason=f"the {engine} transcripts of the docs are checked when asked: {variable}=1",
    )


def scenarios(engine: str) -> list[str]:
    """The scenarios of ``docs/transcripts.py`` that start ``engine``."""
    return [name for name, s in transcripts.SCENARIOS.items() if s.engine == engine]


def assert_current(name: str) -> None:
    """Run scenario ``name`` and fail on every block of the pages that drifted from it."""
    problems = transcripts.check([name], PAGES)
    assert not problems, "\n".join(problems)
