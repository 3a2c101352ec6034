"""The SGLang transcripts of the docs are what their runs print now.

``sglang-invariants``: SGLang's CPU server started by ``python -m pytest_ddtree.engines
--engine sglang`` on port 30000, the bundled suite's invariants test against it with two
prompts (docs/sglang.md's run and its ``matched_stop`` evidence, and the same evidence in
docs/llamacpp.md); about 2.5 minutes, most of it the server's start. Runs only when asked
(``DDTREE_DOCS_SGLANG=1``; ``tests/engines/docs_transcripts.py``).
"""

from __future__ import annotations

import pytest

from pytest_ddtree import engines
from tests.engines.docs_transcripts import asked, assert_current, scenarios

SCENARIOS = scenarios("sglang")


def test_the_sglang_scenarios_are_known() -> None:
    assert "sglang-invariants" in SCENARIOS


@asked("sglang")
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_sglang_transcripts_are_current(scenario: str) -> None:
    assert engines.sglang_missing() is None  # the tier's setup skips (or fails) without it
    assert_current(scenario)
