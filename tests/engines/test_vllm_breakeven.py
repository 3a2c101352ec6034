"""The break-even map on vLLM: n-gram speculation (per-request statistics) against its
target-only twin, at two depths (``breakeven_map.run_map`` says what the map must be)."""

from __future__ import annotations

import pytest

from pytest_ddtree import engines

from .breakeven_map import run_map

pytestmark = pytest.mark.real_engine


def test_vllm_map_measures_two_depths_against_the_target_alone(
    vllm_ngram: engines.EngineProcess,
    vllm_target: engines.EngineProcess,
    pytester: pytest.Pytester,
    user_env_cleared: None,
) -> None:
    run_map(
        pytester,
        vllm_ngram.base_url,
        vllm_target.base_url,
        vllm_ngram.model,
        (64, 512),
        max_tokens=24,
    )
