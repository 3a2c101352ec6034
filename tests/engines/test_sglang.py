"""The plugin against SGLang's own HTTP server (0.5.23, CPU engine), on SGLang's own bytes.

SmolLM2-135M-Instruct in bf16 at temperature 0, one thread, target only: SGLang's n-gram
speculation needs kernels that PyPI's ``sgl_kernel`` build lacks, so these tests are about
what SGLang sends without speculation (its dialect, ``/tokenize``, ``matched_stop``). The
server (``sglang_target`` in ``conftest.py``) is shared by the session; every request is
short.

Stops are chosen from the engine's own answer (a word it said, a token id it produced), so
each test holds for whatever the pinned engine answers, and asserts what SGLang says about it.
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

SHORT_PROMPT = "How many legs does a spider have?"
PROSE_PROMPT = "Describe how bread is baked in a small kitchen."
EOS_PROMPT = "What is the capital of France?"  # answered in one sentence, then end-of-sequence
SMOLLM2_EOS_ID = 2  # <|im_end|>

pytestmark = pytest.mark.real_engine


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=120, trust_env=False) as client:
        yield client


def client_for(server: engines.EngineProcess, http: httpx.Client) -> DDTreeClient:
    """The plugin's client, counting tokens with SGLang's own ``/v1/tokenize``."""
    counter = ServerCounter(server.root_url, http, shape="sglang", model=server.model)
    return DDTreeClient(
        server.base_url,
        model=server.model,
        budget_mode="none",
        counter=counter,
        # a shared, loaded machine has kept a first answer waiting over 60 s
        timeout=Timeout(connect=10, read=300, total=600),
    )


def test_tokenize_and_detokenize_shapes(
    sglang_target: engines.EngineProcess, http: httpx.Client
) -> None:
    root, model = sglang_target.root_url, sglang_target.model
    text = "Bread rises in a warm kitchen."
    body = {"model": model, "prompt": text, "add_special_tokens": False}
    answers = [
        http.post(f"{root}{path}", json=body).json() for path in ("/tokenize", "/v1/tokenize")
    ]
    assert answers[0] == answers[1]
    answer = answers[0]
    assert set(answer) == {"tokens", "count", "max_model_len"}, answer
    assert answer["count"] == len(answer["tokens"]) and answer["max_model_len"] == 2048
    back = http.post(f"{root}/v1/detokenize", json={"model": model, "tokens": answer["tokens"]})
    assert back.json() == {"text": text}
    # whichever shape the plugin settles on counts exactly what SGLang counts
    probe = detect_tokenize_shape(root, http, model=model)
    assert probe.shape is not None and probe.warning is None, probe
    detected = ServerCounter(root, http, shape=probe.shape, model=model)
    assert detected.encode(text) == answer["tokens"]
    counter = ServerCounter(root, http, shape="sglang", model=model)
    assert counter.count(text) == answer["count"]
    first = answer["tokens"][0]
    piece = http.post(f"{root}/v1/detokenize", json={"model": model, "tokens": [first]}).json()
    assert counter.decode_token(first) == piece["text"] and text.startswith(piece["text"])


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_dialect_is_detected_and_counts_are_exact(
    stream: bool, sglang_target: engines.EngineProcess, http: httpx.Client
) -> None:
    client = client_for(sglang_target, http)
    try:
        c = client.chat(PROSE_PROMPT, max_tokens=24, stream=stream)
    finally:
        client.close()
    assert c.ok, c.error
    # told by matched_stop, which only SGLang sends
    assert client.detected_dialect == "sglang"
    assert c.finish_reason == "length"
    assert c.usage is not None and c.usage.completion_tokens == 24
    # the plugin's counter (the engine's own /tokenize) counts the text as the engine did,
    # and the usage check, which compares the two, raises nothing
    assert client.counter is not None and client.counter.count(c.text) == 24, c.text
    assert "usage-mismatch" not in [v.code for v in check(c, counter=client.counter)]


def test_end_of_sequence_is_an_integer_matched_stop(
    sglang_target: engines.EngineProcess, http: httpx.Client
) -> None:
    client = client_for(sglang_target, http)
    try:
        c = client.chat(EOS_PROMPT, max_tokens=40, stream=False)
    finally:
        client.close()
    assert c.ok, c.error
    assert c.finish_reason == "stop", c.text
    # SGLang names the model's own end-of-sequence by its id (vLLM says null)
    assert (c.stop_reason, c.stop_field) == (SMOLLM2_EOS_ID, "choices[0].matched_stop")


def _first_answer(client: DDTreeClient) -> str:
    c = client.chat(SHORT_PROMPT, max_tokens=16, stream=False)
    assert c.ok and c.text, (c.error, c.text)
    return c.text


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_stop_string_is_named(
    stream: bool, sglang_target: engines.EngineProcess, http: httpx.Client
) -> None:
    client = client_for(sglang_target, http)
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
    assert (c.stop_reason, c.stop_field) == (word, "choices[0].matched_stop")
    # the stop string is cut from the text
    assert word not in c.text and text.startswith(c.text)


def test_a_stop_token_id_is_an_integer_matched_stop(
    sglang_target: engines.EngineProcess, http: httpx.Client
) -> None:
    client = client_for(sglang_target, http)
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
    assert (c.stop_reason, c.stop_field) == (stop_id, "choices[0].matched_stop")
    assert text.startswith(c.text)
