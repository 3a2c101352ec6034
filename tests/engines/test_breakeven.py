"""The break-even map on llama.cpp: n-gram speculation against its target-only twin
(``breakeven_map.run_map`` says what the map must be, whatever the answer)."""

from __future__ import annotations

import pytest

from pytest_ddtree import engines

from .breakeven_map import run_map

pytestmark = pytest.mark.real_engine


def test_llamacpp_map_measures_each_depth_against_the_target_alone(
    ngram: engines.LlamaCppServer,
    target: engines.LlamaCppServer,
    pytester: pytest.Pytester,
    user_env_cleared: None,
) -> None:
    run_map(pytester, ngram.base_url, target.base_url, ngram.model, (64, 512), max_tokens=32)
