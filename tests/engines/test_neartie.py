"""The target's margin read from a real engine: llama.cpp's own log-probabilities.

SmolLM2-135M (Q4_1) opens its answer to "What is the capital of France?" with "L" (then
"'Étoile, ..."), and ranks "The" (the opening of "The capital of France is Paris.", what
the same model answers in bf16 on vLLM) a few hundredths to tenths of a nat below it: a
numerical near-tie. Right after, its "'" is more than a nat ahead of every other token.
The plugin asks the engine for ``logprobs``/``top_logprobs``, reads them through the
protocol core, and names each divergence for what it is.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from pytest_ddtree import engines
from pytest_ddtree.checks.diagnose import run_lossless
from pytest_ddtree.checks.margin import classify, probe_fields
from pytest_ddtree.core.settings import DEFAULT_NEAR_TIE, Lossless, Timeout
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.tokens import ServerCounter

FRANCE = "What is the capital of France?"
# the answer vLLM 0.32 gives with SmolLM2-135M in bf16 (target only), quoted as text: the
# divergence is located in llama.cpp's answer and judged by llama.cpp's own numbers
BF16_ANSWER = "The capital of France is Paris."
PROSE = "Describe how bread is baked in a small kitchen."
# the bundled suite's first prompt; vLLM's n-gram speculation has been seen to leave the
# target's answer at its 7th token ("woven from the threads of rivers" / "with countless")
ESSAY = "Write a long essay about rivers and the valleys they shape."
ESSAY_TOKENS = 32

pytestmark = pytest.mark.real_engine


def _fresh() -> httpx.HTTPTransport:
    return httpx.HTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60, transport=_fresh()) as client:
        yield client


def _client(server: engines.LlamaCppServer, http: httpx.Client) -> DDTreeClient:
    return DDTreeClient(
        server.base_url,
        model=server.model,
        budget_mode="none",
        counter=ServerCounter(server.root_url, http, shape="llamacpp"),
        transport=_fresh(),
    )


@pytest.mark.parametrize("stream", [False, True])
def test_llamacpp_logprobs_spell_the_greedy_answer(
    stream: bool, target: engines.LlamaCppServer, http: httpx.Client
) -> None:
    with _client(target, http) as client:
        answer = client.chat(PROSE, max_tokens=24, stream=stream, **probe_fields("chat"))
    assert answer.ok and answer.logprobs, answer.error
    assert b"".join(e.data for e in answer.logprobs) == answer.text.encode()
    for e in answer.logprobs:
        # temperature 0: every token is the engine's own first choice, alternatives sorted
        assert e.top and e.top[0][2] == e.data, e
        assert [lp for _, lp, _ in e.top] == sorted((lp for _, lp, _ in e.top), reverse=True)
        assert len(e.top) == probe_fields("chat")["top_logprobs"]


def test_a_near_tie_and_a_sure_token_on_llamacpps_own_numbers(
    target: engines.LlamaCppServer, http: httpx.Client
) -> None:
    with _client(target, http) as client:
        answer = client.chat(FRANCE, max_tokens=16, stream=False, **probe_fields("chat"))
    assert answer.ok and answer.logprobs, answer.error
    if not answer.text.startswith("L'"):
        pytest.fail(f"the model's answer changed ({answer.text!r}); pick another near-tie")
    tie = classify(answer, answer.text, BF16_ANSWER, 0, DEFAULT_NEAR_TIE)
    assert tie.kind == "near-tie", tie
    assert (tie.position, tie.target_token, tie.speculative_token) == (0, "L", "The")
    assert tie.gap is not None and 0 < tie.gap < DEFAULT_NEAR_TIE
    assert "top two were" in tie.sentence() and "near-tie" in tie.sentence()
    # the second token: "'" ranks far above "ad", which a speculative path could only
    # produce by committing a token the target rejected
    sure = classify(answer, answer.text, "Lad", 1, DEFAULT_NEAR_TIE)
    assert sure.kind == "confident" and sure.position == 1, sure
    assert sure.gap is not None and sure.gap > 1.0
    assert "the target was sure" in sure.sentence()


@pytest.mark.parametrize("kind", ["ngram", "draft"])
def test_llamacpp_speculation_stays_lossless_in_near_tie_mode(
    kind: str, request: pytest.FixtureRequest, target: engines.LlamaCppServer, http: httpx.Client
) -> None:
    """llama.cpp verifies drafts in f32 without changing a greedy answer: nothing to excuse."""
    spec = request.getfixturevalue(kind)
    with _client(spec, http) as client, _client(target, http) as baseline:
        for prompt in (PROSE, FRANCE):
            result, violations = run_lossless(
                client,
                baseline,
                prompt,
                [None],
                Lossless("near-tie"),
                max_tokens=48,
                counter=client.counter,
            )
            assert not violations and not result.near_ties, [v.message for v in violations]
        # its speculative server returns log-probabilities too (the speculative side's view)
        own = client.chat(FRANCE, max_tokens=8, stream=False, **probe_fields("chat"))
    assert own.ok and own.logprobs and own.logprobs[0].token == "L"


# ------------------------------------------------------------------ vLLM (bf16)


def _vllm(server: engines.EngineProcess, http: httpx.Client) -> DDTreeClient:
    counter = ServerCounter(server.root_url, http, shape="vllm", model=server.model)
    return DDTreeClient(
        server.base_url,
        model=server.model,
        budget_mode="none",
        counter=counter,
        timeout=Timeout(read=300, total=900),
    )


@pytest.fixture(scope="module")
def vllm_http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=120, trust_env=False) as client:
        yield client


def test_vllm_logprobs_in_its_chat_and_text_shapes(
    vllm_target: engines.EngineProcess, vllm_http: httpx.Client
) -> None:
    with _vllm(vllm_target, vllm_http) as client:
        plain = client.chat(PROSE, max_tokens=12, stream=False, **probe_fields("chat"))
        streamed = client.chat(PROSE, max_tokens=12, stream=True, **probe_fields("chat"))
        text = client.complete(PROSE, max_tokens=12, stream=False, **probe_fields("completions"))
    for answer in (plain, streamed, text):
        assert answer.ok and answer.logprobs, answer.error
        assert b"".join(e.data for e in answer.logprobs) == answer.text.encode()
        for e in answer.logprobs:
            assert e.top and e.top[0][1] == pytest.approx(e.logprob), e  # greedy: its first
    assert streamed.logprobs == plain.logprobs or streamed.text != plain.text


def test_vllm_answers_france_from_a_near_tie(
    vllm_target: engines.EngineProcess, vllm_http: httpx.Client
) -> None:
    """bf16 holds these logits in steps of 0.125: "The" and "L" are one step apart, and
    which one leads has been seen to change from one vLLM start to another."""
    with _vllm(vllm_target, vllm_http) as client:
        answer = client.chat(FRANCE, max_tokens=8, stream=False, **probe_fields("chat"))
    assert answer.ok and answer.logprobs, answer.error
    openings = {"The": "The capital of France is Paris.", "L": "L'Étoile, la Marseillaise"}
    first = answer.logprobs[0].token
    if first not in openings:
        pytest.fail(f"the model's answer changed ({answer.text!r}); pick another near-tie")
    other = next(text for token, text in openings.items() if token != first)
    tie = classify(answer, answer.text, other, 0, DEFAULT_NEAR_TIE)
    assert tie.kind == "near-tie", tie
    assert {tie.target_token, tie.speculative_token} == {"The", "L"}, tie
    assert tie.gap is not None and 0 < tie.gap < DEFAULT_NEAR_TIE, tie


def test_vllm_ngram_speculation_diverges_only_at_near_ties(
    vllm_ngram: engines.EngineProcess, vllm_target: engines.EngineProcess, vllm_http: httpx.Client
) -> None:
    """Where vLLM's n-gram speculation leaves the target's greedy answer, the target was
    never sure: every divergence has a readable margin, and none is confident."""
    with _vllm(vllm_ngram, vllm_http) as client, _vllm(vllm_target, vllm_http) as baseline:
        result, violations = run_lossless(
            client,
            baseline,
            ESSAY,
            [None],
            Lossless("near-tie"),
            max_tokens=ESSAY_TOKENS,
            counter=client.counter,
        )
    assert not violations, [v.message for v in violations]
    for div in result.near_ties.values():
        assert div.margin is not None and div.margin.kind == "near-tie", div
