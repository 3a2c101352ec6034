"""The vLLM transcripts of the docs are what their runs print now.

``vllm-sweep``: vLLM's CPU server with n-gram speculation started by ``python -m
pytest_ddtree.engines --engine vllm`` on port 8000, the bundled suite's timed sweep against it
(docs/vllm.md's server line and its sweep); minutes, most of them vLLM's start and its slow
decoding on a CPU. Runs only when asked (``DDTREE_DOCS_VLLM=1``;
``tests/engines/docs_transcripts.py``).
"""

from __future__ import annotations

import pytest

from pytest_ddtree import engines
from tests.engines.docs_transcripts import asked, assert_current, scenarios

SCENARIOS = scenarios("vllm")


def test_the_vllm_scenarios_are_known() -> None:
    assert "vllm-sweep" in SCENARIOS


@asked("vllm")
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_vllm_transcripts_are_current(scenario: str) -> None:
    assert engines.vllm_missing() is None  # the tier's setup skips (or fails) without it
    assert_current(scenario)
