"""The reference server's acceptance histogram (exactly its own rounds) and its
vLLM-style ``stop_reason`` (the ``early-eos`` fault names the id that fired), read
through the plugin's client, streamed and not."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from pytest_ddtree.checks.diagnose import Diagnoser
from pytest_ddtree.checks.invariants import check
from pytest_ddtree.reference import ReferenceServer, start_reference_server
from pytest_ddtree.reference.model import ReferenceModel
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion
from pytest_ddtree.wire.tokens import ServerCounter

from ._helpers import LONG, SHORT

STREAMING = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
BLOCK = 16  # the server's default block size


def own_rounds(model: ReferenceModel, prompt: str, max_tokens: int, budget: int) -> list[int]:
    """Drafts accepted in each round of the model's own decoding loop, as committed: the
    end-of-turn token dropped, the last round cut at ``max_tokens``, a round left with no
    token not counted."""
    plan = model.plan(prompt, model.render_chat([("user", prompt)], False))
    accepted, produced = [], 0
    for rd in model.generate(plan, max_tokens, budget, BLOCK):
        toks = rd.tokens[: rd.tokens.index(model.eos)] if model.eos in rd.tokens else rd.tokens
        toks = toks[: max_tokens - produced]
        produced += len(toks)
        if toks:
            accepted.append(len(toks) - 1)
        if produced >= max_tokens or model.eos in rd.tokens:
            break
    return accepted


@pytest.fixture(scope="module")
def plugin_client(ref_server: ReferenceServer) -> Iterator[DDTreeClient]:
    with DDTreeClient(ref_server.base_url) as c:
        yield c


@STREAMING
@pytest.mark.parametrize("budget", [4, 32, 256])
@pytest.mark.parametrize("prompt", [LONG, SHORT])
def test_histogram_is_the_servers_own_rounds(
    plugin_client: DDTreeClient, model: ReferenceModel, stream: bool, budget: int, prompt: str
) -> None:
    c = plugin_client.chat(prompt, max_tokens=96, tree_budget=budget, stream=stream)
    rounds = own_rounds(model, prompt, 96, budget)
    expected = [0] * BLOCK
    for n in rounds:
        expected[n] += 1
    s = c.stats
    assert s is not None and s.depth_source == "ddtree_stats.acceptance_histogram"
    assert s.acceptance_histogram == tuple(expected)
    assert s.decode_rounds == len(rounds)
    assert sum((k + 1) * n for k, n in enumerate(expected)) == c.completion_tokens
    assert s.histogram_acceptance_length == pytest.approx(s.mean_acceptance_length, abs=1e-4)
    assert [v for v in check(c) if v.code.startswith("stats")] == []


def test_deeper_trees_are_accepted_deeper(plugin_client: DDTreeClient) -> None:
    small = plugin_client.chat(LONG, max_tokens=128, tree_budget=2, stream=False).stats
    large = plugin_client.chat(LONG, max_tokens=128, tree_budget=256, stream=False).stats
    assert small is not None and large is not None
    assert len(large.rounds_reaching) > len(small.rounds_reaching)


@pytest.fixture(scope="module")
def vllm_server() -> Iterator[ReferenceServer]:
    with start_reference_server(simulated_latency=False, stats_dialect="vllm") as server:
        yield server


@STREAMING
def test_vllm_dialect_histogram(vllm_server: ReferenceServer, stream: bool) -> None:
    with DDTreeClient(vllm_server.base_url) as client:
        c = client.chat(LONG, max_tokens=96, tree_budget=32, stream=stream)
    s = c.stats
    assert s is not None and s.dialect == "vllm"
    assert s.num_spec_tokens == BLOCK - 1
    assert s.acceptance_histogram is not None and len(s.acceptance_histogram) == BLOCK
    assert s.depth_source == "metrics.speculative_decoding.acceptance_histogram"
    assert sum(s.acceptance_histogram) == s.decode_rounds
    hist = s.acceptance_histogram
    assert sum(k * n for k, n in enumerate(hist)) == s.num_accepted_draft_tokens
    assert [v for v in check(c) if v.code.startswith("stats")] == []


def test_vllm_dialect_target_only_reports_no_speculation_as_vllm_does() -> None:
    # vLLM without a speculative config answers "metrics": null, and its counters stay at 0:
    # the target-only twin claimed k drafts a step that its own /metrics never counted
    with (
        start_reference_server(
            simulated_latency=False, stats_dialect="vllm", target_only=True
        ) as server,
        DDTreeClient(server.base_url) as client,
    ):
        c = client.chat(LONG, max_tokens=32, stream=False)
    assert c.ok and c.stats is None, c.raw
    assert '"metrics": null' in json.dumps(c.raw)


# ---------------------------------------------------------------- stop_reason


def _stop(c: Completion) -> tuple[object, str | None]:
    return c.stop_reason, c.stop_field


@STREAMING
def test_stop_reason_as_vllm_reports_it(plugin_client: DDTreeClient, stream: bool) -> None:
    # length: null
    c = plugin_client.chat(LONG, max_tokens=16, stream=stream)
    assert c.finish_reason == "length" and _stop(c) == (None, "choices[0].stop_reason")
    # the model's own end-of-turn: null
    c = plugin_client.chat(SHORT, max_tokens=200, stream=stream)
    assert c.finish_reason == "stop" and _stop(c) == (None, "choices[0].stop_reason")
    # a stop string: the string
    word = c.text.split()[2]
    c = plugin_client.chat(SHORT, max_tokens=200, stream=stream, stop=[word])
    assert c.finish_reason == "stop" and _stop(c) == (word, "choices[0].stop_reason")


@STREAMING
def test_early_eos_names_the_id_that_fired(
    ref_server: ReferenceServer, model: ReferenceModel, stream: bool
) -> None:
    fault = {"X-DDTree-Fault": "early-eos"}
    with httpx.Client() as http, DDTreeClient(ref_server.base_url) as client:
        counter = ServerCounter(ref_server.root_url, http)
        c = client.chat(LONG, max_tokens=96, stream=stream, headers=fault)
        assert c.finish_reason == "stop" and _stop(c) == (model.eos, "choices[0].stop_reason")
        found = check(c, counter=counter)
        (early,) = [v for v in found if v.code == "early-stop"]
        d = Diagnoser(None).diagnose(c, found, lambda x: check(x, counter=counter))
    assert early.evidence["stop"] == f"token {model.eos} '<|im_end|>' (choices[0].stop_reason)"
    assert early.evidence["stop_kind"] == "template-token"
    assert d.blame == "template"
    assert "ended the answer: the stop list holds a template token" in d.reason


def test_detokenize(
    client: httpx.Client, ref_server: ReferenceServer, model: ReferenceModel
) -> None:
    root = ref_server.root_url
    r = client.post(f"{root}/detokenize", json={"tokens": model.encode("Hello there")})
    assert r.status_code == 200 and r.json() == {"prompt": "Hello there"}
    bad = client.post(f"{root}/detokenize", json={"tokens": [10**9]})
    assert bad.status_code == 400 and "'tokens' must be a list of token ids" in bad.text
    counter = ServerCounter(root, client)
    assert counter.decode_token(10**9) is None  # a 400: no text, no exception
