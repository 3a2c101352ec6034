"""docs/first-run.md's transcript is what its llama.cpp run prints now.

The page's worked example, run as the page says: llama.cpp's server with n-gram speculation
started by ``python -m pytest_ddtree.engines`` on port 8080, the whole bundled suite against
it from an empty directory (``docs/transcripts.py``, scenario ``first-run``). Every line the
page shows must still be printed, numbers masked; ``python docs/generate.py --only first-run``
rewrites it. A few minutes: the only whole-suite run of this tier with the page's command.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from pytest_ddtree import engines

ROOT = Path(__file__).resolve().parents[2]


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
