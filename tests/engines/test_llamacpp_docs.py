"""The llama.cpp transcripts of the docs are what their runs print now.

``first-run`` is docs/first-run.md's worked example, run as the page says: llama.cpp's server
with n-gram speculation started by ``python -m pytest_ddtree.engines`` on port 8080, the whole
bundled suite against it from an empty directory (about 5 minutes, a whole-suite run beside
the tier's own). ``llamacpp-stop`` is docs/llamacpp.md's stop-string evidence and its
``/metrics`` line (seconds). ``llamacpp-baseline``, ``llamacpp-seed-1`` and
``llamacpp-temperatures`` are that page's runs with a target-only baseline: two llama.cpp
servers at once, one thread each (about 6.5, 2 and 6 minutes on a shared 2-core machine).
They run only when asked (``DDTREE_DOCS_LLAMACPP=1``; ``tests/engines/docs_transcripts.py``).
"""

from __future__ import annotations

import pytest

from pytest_ddtree import engines
from tests.engines.docs_transcripts import asked, assert_current, scenarios

SCENARIOS = scenarios("llamacpp")


def test_the_llamacpp_scenarios_are_known() -> None:
    assert {
        "first-run",
        "llamacpp-stop",
        "llamacpp-baseline",
        "llamacpp-seed-1",
        "llamacpp-temperatures",
    } <= set(SCENARIOS)


@asked("llamacpp")
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_llamacpp_transcripts_are_current(scenario: str, user_env_cleared: None) -> None:
    assert engines.missing() is None  # the tier's setup skips (or fails) without llama.cpp
    assert_current(scenario)
