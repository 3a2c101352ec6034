"""llama.cpp's real ``/metrics``: its speculative counters against the per-request statistics.

llama.cpp counts every draft token it proposes and accepts
(``llamacpp:spec_decode_num_draft_tokens_total``, ``..._num_accepted_tokens_total``) and
reports the same per request as ``timings.draft_n`` / ``draft_n_accepted``. Over the same
requests, sent one at a time by the only client of the engine, the deltas must equal the sums
exactly, under n-gram and under draft-model speculation.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from pytest_ddtree import engines
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.servermetrics import (
    GroupWatch,
    MetricsReader,
    RequestSums,
    ServerMetricsLog,
    default_metrics_url,
)
from pytest_ddtree.wire.tokens import ServerCounter

pytestmark = pytest.mark.real_engine

# n-gram speculation (llama.cpp's default: a 12-token match drafts up to 48 tokens) drafts
# when the answer copies a long run of the prompt; a draft model drafts on any prompt
COPY = (
    "Copy this sentence exactly: The quick brown fox jumps over the lazy dog while the small "
    "cat sleeps under the old wooden table in the kitchen."
)
PROMPTS = (COPY, "Count from 1 to 20, separated by commas.", "How many legs does a spider have?")


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60) as client:
        yield client


def _client(server: engines.LlamaCppServer, http: httpx.Client) -> DDTreeClient:
    counter = ServerCounter(server.root_url, http, shape="llamacpp")
    return DDTreeClient(server.base_url, model=server.model, budget_mode="none", counter=counter)


@pytest.mark.parametrize("kind", ["ngram", "draft"])
def test_counter_deltas_equal_the_per_request_draft_counts(
    kind: str,
    ngram: engines.LlamaCppServer,
    draft: engines.LlamaCppServer,
    http: httpx.Client,
) -> None:
    server = ngram if kind == "ngram" else draft
    log = ServerMetricsLog(MetricsReader(default_metrics_url(server.base_url)))
    first = log.reader.probe()
    assert first is not None and first.prefix == "llamacpp", log.reader.status
    watch = GroupWatch(log, kind, scope="benchmark")
    client = _client(server, http)
    try:
        watch.start(0, None)
        done = [client.chat(p, max_tokens=64, stream=s) for p in PROMPTS for s in (True, False)]
        watch.end(0, None, done)
    finally:
        client.close()
    assert all(c.ok for c in done)
    [record] = watch.records
    sums = RequestSums.of(c.stats for c in done)
    d = record.delta
    assert sums.draft_tokens is not None and sums.accepted_tokens is not None
    assert sums.draft_tokens > 0  # speculation drafted: the comparison is not 0 == 0
    assert (d.draft_tokens, d.accepted_tokens) == (sums.draft_tokens, sums.accepted_tokens)
    assert d.drafts is not None and 0 < d.drafts <= d.draft_tokens
    # the per-position counters appear with the first speculative request: absent is 0
    assert sum(d.accepted_per_position.values()) == d.accepted_tokens
    assert d.requests is None  # llama.cpp has no finished-requests counter
    assert (d.running_before, d.waiting_before) == (0, 0)
    assert record.shared is None and record.inconsistent == ()


SWEEP = f"""
PROMPT = {COPY!r}

def test_bench(ddtree_benchmark):
    ddtree_benchmark(PROMPT, max_tokens=64, rounds=3, warmup_rounds=1)
"""


def test_the_plugin_reads_llamacpps_counters(
    ngram: engines.LlamaCppServer, pytester: pytest.Pytester, user_env_cleared: None
) -> None:
    """Through the plugin: the header names the page, extra_info holds the deltas, no alarm."""
    import json

    pytester.makepyfile(test_bench=SWEEP)
    saved = pytester.path / "bench.json"
    result = pytester.runpytest_subprocess(
        "-p",
        "no:xdist",
        "-p",
        "no:cacheprovider",
        "--ddtree-endpoint",
        ngram.base_url,
        "--ddtree-budget-mode",
        "none",
        "--ddtree-model",
        ngram.model,
        f"--benchmark-json={saved}",
        timeout=600,
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"ddtree: server metrics: {ngram.root_url}/metrics (llamacpp)"])
    out = result.stdout.str()
    assert "shared server" not in out and "stats-inconsistent" not in out, out
    [bench] = json.loads(saved.read_text())["benchmarks"]
    info = bench["extra_info"]["server_counters"]
    assert info["prefix"] == "llamacpp" and info["draft_tokens"] > 0, info
    assert 0 <= info["accepted_tokens"] <= info["draft_tokens"]
