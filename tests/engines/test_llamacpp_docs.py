"""docs/first-run.md's transcript is what its llama.cpp run prints now.

The page's worked example, run as the page says: llama.cpp's server with n-gram speculation
started by ``python -m pytest_ddtree.engines`` on port 8080, the whole bundled suite against
it from an empty directory (``docs/transcripts.py``, scenario ``first-run``). Every line the
page shows must still be printed, numbers masked; ``python docs/generate.py --only first-run``
rewrites it. About 4.5 minutes, a whole-suite run beside the tier's own, so it runs only when
asked (``DDTREE_DOCS_LLAMACPP=1``): the CI gate's time goes to the tier's verdict tests.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from pytest_ddtree import engines

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    os.environ.get("DDTREE_DOCS_LLAMACPP") != "1",
    reason="the llama.cpp first-run transcript is checked when asked: DDTREE_DOCS_LLAMACPP=1",
)
def test_the_first_run_transcript_is_current(user_env_cleared: None) -> None:
    assert engines.missing() is None  # the tier's setup skips (or fails) without llama.cpp
    spec = importlib.util.spec_from_file_location(
        "ddtree_docs_transcripts", ROOT / "docs" / "transcripts.py"
    )
    assert spec is not None and spec.loader is not None
    transcripts = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = transcripts
    spec.loader.exec_module(transcripts)
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    problems = transcripts.check(["first-run"], pages)
    assert not problems, "\n".join(problems)
