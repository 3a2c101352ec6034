"""Losslessness in distribution on llama.cpp: draft-model speculation against its target-only twin.

llama.cpp verifies a draft by sampling the target at each drafted position and keeping the
draft while it agrees: at one seed it gives exactly the target-only answer (checked below), so
its sampled answers are distributed as target-only decoding's and the distribution test must
not raise a false alarm at temperature 0.7. Both servers run SmolLM2-135M with one thread; N
and max_tokens are kept modest: both tests take about a minute on two cores.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from pytest_ddtree import engines
from pytest_ddtree.checks.distribution import request_seeds, run_distribution
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.tokens import ServerCounter

pytestmark = pytest.mark.real_engine

PROMPT = "Describe how bread is baked in a small kitchen."
SAMPLES = 24
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60) as client:
        yield client


def _client(server: engines.LlamaCppServer, http: httpx.Client) -> DDTreeClient:
    return DDTreeClient(
        server.base_url,
        model=server.model,
        budget_mode="none",
        counter=ServerCounter(server.root_url, http, shape="llamacpp"),
        transport=httpx.HTTPTransport(limits=httpx.Limits(max_keepalive_connections=0)),
    )


def test_draft_speculation_is_lossless_in_distribution_at_0_7(
    draft: engines.LlamaCppServer, target: engines.LlamaCppServer, http: httpx.Client
) -> None:
    client, baseline = _client(draft, http), _client(target, http)
    try:
        run = run_distribution(
            client,
            baseline,
            PROMPT,
            temperature=0.7,
            samples=SAMPLES,
            alpha=0.05,
            max_tokens=MAX_TOKENS,
        )
    finally:
        client.close()
        baseline.close()
    assert run.not_comparable is None, run.not_comparable
    assert run.result is not None
    # the engine honours seed and temperature: distinct seeds give distinct answers
    assert len({c.text for c in run.server}) > SAMPLES // 2
    assert len({c.text for c in run.baseline}) > SAMPLES // 2
    # the server really speculated
    assert any(
        c.stats is not None and (c.stats.num_accepted_draft_tokens or 0) > 0 for c in run.server
    )
    print(run.result.summary())
    assert not run.result.differs, run.result.summary()


def test_draft_speculation_samples_what_the_target_samples_at_the_same_seed(
    draft: engines.LlamaCppServer, target: engines.LlamaCppServer, http: httpx.Client
) -> None:
    # why no false alarm is possible here: llama.cpp samples the target at every drafted
    # position and keeps the draft while it agrees, so one seed gives one answer on both
    client, baseline = _client(draft, http), _client(target, http)
    try:
        for seed in request_seeds(7, 8):
            ours = client.request(PROMPT, max_tokens=MAX_TOKENS, temperature=0.7, seed=seed)
            theirs = baseline.request(PROMPT, max_tokens=MAX_TOKENS, temperature=0.7, seed=seed)
            assert ours.text and ours.text == theirs.text, seed
    finally:
        client.close()
        baseline.close()
