"""Above temperature 0 on llama.cpp: the sampling check finds temperature and seed honored."""

from __future__ import annotations

import pytest

from pytest_ddtree import engines
from pytest_ddtree.checks.sampling import PROBE_TOKENS, check_sampling
from pytest_ddtree.pytest_plugin.fixtures._sampling import PROBE_PROMPT
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion

pytestmark = pytest.mark.real_engine


@pytest.mark.parametrize("temperature", [0.7, 0.2])
def test_llamacpp_honors_temperature_and_seed(
    draft: engines.LlamaCppServer, temperature: float
) -> None:
    """No false 'ignores' verdict on a healthy engine, at a low temperature either (a peaked
    model answers alike whatever the seed there; the check asks again at 1 before judging)."""
    client = DDTreeClient(draft.base_url, model=draft.model, budget_mode="none")

    def send(seed: int | None, t: float) -> Completion:
        extra = {} if seed is None else {"seed": seed}
        return client.request(
            PROBE_PROMPT, max_tokens=PROBE_TOKENS, temperature=t, prompt_id="check", **extra
        )

    try:
        check = check_sampling(send, temperature, 0)
    finally:
        client.close()
    assert not check.problem, check.problem
    assert (check.temperature_honored, check.seed_honored) == (True, True), check.line()
    assert check.violations() == []
