"""``docs/transcripts.py`` (the docs' scenarios, excerpts and drift check), loaded once.

The docs script is no package module: the tests that check its blocks (the docs tiers, the
engine pages, the fault matrix) load it from its file through this one function, which keeps
a single module object per process (its dataclasses look their module up by name).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
NAME = "ddtree_docs_transcripts"


def transcripts() -> ModuleType:
    """The loaded ``docs/transcripts.py``."""
    if NAME not in sys.modules:
        spec = importlib.util.spec_from_file_location(NAME, ROOT / "docs" / "transcripts.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[NAME] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[NAME]
