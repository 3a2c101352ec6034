"""The Python sessions in the docs (```pycon blocks) print what the page shows.

Each block runs as a doctest, in a fresh namespace, output compared as written (whitespace
normalised). A session that drifts (a renamed function, another optimum, a changed table)
fails here, with the block's page and line.
"""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```pycon\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def _sessions() -> list[tuple[str, int, str]]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start(1)) + 1
            found.append((page.name, line, match.group(1)))
    return found


SESSIONS = _sessions()


def test_the_docs_have_python_sessions() -> None:
    # the pages this file guards: a fence renamed away would leave nothing to check
    assert {page for page, _, _ in SESSIONS} >= {"reference-server.md"}


@pytest.mark.parametrize(
    "page,line,source", SESSIONS, ids=[f"{page}:{line}" for page, line, _ in SESSIONS]
)
def test_a_python_session_prints_what_the_page_shows(page: str, line: int, source: str) -> None:
    test = doctest.DocTestParser().get_doctest(source, {}, f"{page}:{line}", page, line - 1)
    assert test.examples, f"{page}:{line}: a pycon block without a >>> line"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
