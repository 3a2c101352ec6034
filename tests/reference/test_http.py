"""The OpenAI-compatible wire of the reference server ("ddtree" dialect and the others)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from pytest_ddtree.reference import MODEL_ID, ReferenceServer, start_reference_server

from ._helpers import LONG, SHORT, counts, post, stream

STATS_KEYS = {"tree_budget", "cycles", "avg_acceptance", "tok_per_sec", "block_size"}


def test_models_health_tokenize(ref_server: ReferenceServer, client: httpx.Client) -> None:
    models = client.get("/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == [MODEL_ID]
    assert httpx.get(ref_server.root_url + "/health").status_code == 200
    tok = httpx.post(ref_server.root_url + "/tokenize", json={"prompt": "The river runs."}).json()
    assert tok["count"] == len(tok["tokens"]) > 0
    special = httpx.post(
        ref_server.root_url + "/tokenize", json={"prompt": "<|im_start|>user<|im_end|>"}
    ).json()
    assert special["tokens"][0] == 1 and special["tokens"][-1] == 2  # one id per special token


def test_prompt_tokens_match_the_chat_template(
    ref_server: ReferenceServer, client: httpx.Client
) -> None:
    r = post(client, "Tell me about rivers.", max_tokens=4).json()
    rendered = (
        "<|im_start|>user\nTell me about rivers.<|im_end|>\n<|im_start|>assistant\n"
        "<think>\n\n</think>\n\n"
    )
    count = httpx.post(ref_server.root_url + "/tokenize", json={"prompt": rendered}).json()["count"]
    assert r["usage"]["prompt_tokens"] == count


def test_non_stream_shape(client: httpx.Client) -> None:
    r = post(client, LONG, max_tokens=64, tree_budget=32).json()
    assert r["object"] == "chat.completion" and r["model"] == MODEL_ID and r["id"]
    (choice,) = r["choices"]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] == "length"
    u = r["usage"]
    assert u["completion_tokens"] == 64
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    s = r["ddtree_stats"]
    assert set(s) >= STATS_KEYS | {"draft_ms", "verify_ms"}
    assert s["tree_budget"] == 32 and s["block_size"] == 16
    assert s["avg_acceptance"] == pytest.approx(64 / s["cycles"], abs=1e-3)
    assert 1 <= s["avg_acceptance"] <= 17
    assert s["cycles"] < 64  # speculation commits several tokens per round
    assert s["tok_per_sec"] > 0


def test_stream_shape(client: httpx.Client) -> None:
    s = stream(client, LONG, max_tokens=64, stream_options={"include_usage": True})
    assert s.status == 200 and s.done
    chunks = s.chunks
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    finish = [i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and chunks[finish[0]]["choices"][0]["finish_reason"] == "length"
    # usage and statistics share the final chunk before [DONE], as llama.cpp and vLLM send them
    stats_chunk = chunks[finish[0] + 1]
    assert len(chunks) == finish[0] + 2
    assert stats_chunk["choices"] == [] and stats_chunk["usage"]["completion_tokens"] == 64
    assert set(stats_chunk["ddtree_stats"]) >= STATS_KEYS
    content_chunks = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content_chunks) == stats_chunk["ddtree_stats"]["cycles"]  # one chunk per round
    assert s.content == post(client, LONG, max_tokens=64).json()["choices"][0]["message"]["content"]


def test_stream_without_usage(client: httpx.Client) -> None:
    s = stream(client, LONG, max_tokens=16)
    assert s.done and s.usage is None and s.stats is not None
    # without include_usage the statistics come in a chunk of their own
    assert "usage" not in s.chunks[-1] and "ddtree_stats" in s.chunks[-1]


def test_openai_client_reads_usage_from_the_last_chunk(client: httpx.Client) -> None:
    """What the OpenAI Python client does: usage is read from the last chunk before [DONE]."""
    s = stream(client, LONG, max_tokens=16, stream_options={"include_usage": True})
    last = s.chunks[-1]
    assert last["usage"]["completion_tokens"] == 16 and "ddtree_stats" in last


def test_plugin_reads_both_layouts() -> None:
    from pytest_ddtree.wire import dialects

    stats = {"tree_budget": 8, "cycles": 4, "avg_acceptance": 4.0, "tok_per_sec": 9.0}
    usage = {"prompt_tokens": 3, "completion_tokens": 16, "total_tokens": 19}
    joined = [{"choices": []}, {"choices": [], "usage": usage, "ddtree_stats": stats}]
    split = [
        {"choices": []},
        {"choices": [], "usage": usage},
        {"choices": [], "ddtree_stats": stats},
    ]
    for chunks in (joined, split):
        found = dialects.extract_stats("auto", chunks)
        assert found is not None and found.decode_rounds == 4
        u = dialects.extract_usage(chunks)
        assert u is not None and u.completion_tokens == 16


def test_completions_endpoint(client: httpx.Client) -> None:
    body = {"model": MODEL_ID, "prompt": "The old river", "max_tokens": 24}
    r = client.post("/completions", json=body).json()
    assert r["object"] == "text_completion" and r["choices"][0]["finish_reason"] == "length"
    assert r["usage"]["completion_tokens"] == 24 and r["ddtree_stats"]["cycles"] >= 1
    s = stream(client, path="/completions", body={**body, "stream": True})
    assert s.done
    text = "".join(c["choices"][0]["text"] for c in s.chunks if c.get("choices"))
    assert text == r["choices"][0]["text"]


def test_thinking(client: httpx.Client) -> None:
    kw: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": True}, "max_tokens": 256}
    r = post(client, SHORT, **kw).json()
    msg = r["choices"][0]["message"]
    assert msg["reasoning_content"] and msg["content"]
    for text in (msg["reasoning_content"], msg["content"]):
        assert "<think>" not in text and "</think>" not in text
        assert text == text.strip()
    details = r["usage"]["completion_tokens_details"]
    assert 0 < details["reasoning_tokens"] < r["usage"]["completion_tokens"]
    s = stream(client, SHORT, **kw)
    assert s.reasoning == msg["reasoning_content"] and s.content == msg["content"]
    plain = post(client, SHORT, max_tokens=256).json()["choices"][0]["message"]
    assert "reasoning_content" not in plain


def test_stop_strings(client: httpx.Client) -> None:
    full = post(client, LONG, max_tokens=96).json()["choices"][0]["message"]["content"]
    word = full.split()[6]
    cut = full.index(word)
    r = post(client, LONG, max_tokens=96, stop=["zzz", word]).json()
    assert r["choices"][0]["finish_reason"] == "stop"
    assert r["choices"][0]["message"]["content"] == full[:cut]
    s = stream(client, LONG, max_tokens=96, stop=[word])
    assert s.content == full[:cut] and s.finish_reasons == ["stop"]


def test_long_and_short_prompts(client: httpx.Client) -> None:
    for prompt in (LONG, "Explain in detail how bees build a hive.", "List 20 facts about trains."):
        r = post(client, prompt, max_tokens=200).json()
        assert r["choices"][0]["finish_reason"] == "length", prompt
    for prompt in (SHORT, "What is a river?", "Who looks after the bees?"):
        r = post(client, prompt, max_tokens=200).json()
        assert r["choices"][0]["finish_reason"] == "stop", prompt
        assert 8 <= r["usage"]["completion_tokens"] < 100, prompt


def test_max_tokens_one(client: httpx.Client) -> None:
    r = post(client, LONG, max_tokens=1).json()
    assert r["usage"]["completion_tokens"] == 1 and r["choices"][0]["finish_reason"] == "length"


def test_lossless_over_http(client: httpx.Client, target_client: httpx.Client) -> None:
    for prompt in (LONG, SHORT, "Write a Python function that parses rows."):
        base = post(target_client, prompt, max_tokens=96).json()
        for budget in (1, 16, 128, 1024):
            r = post(client, prompt, max_tokens=96, tree_budget=budget).json()
            assert r["choices"][0]["message"] == base["choices"][0]["message"], (prompt, budget)
            assert counts(r["usage"]) == counts(base["usage"])


def test_seeded_sampling(client: httpx.Client, target_client: httpx.Client) -> None:
    def text(c: httpx.Client, **kw: Any) -> str:
        return str(post(c, LONG, max_tokens=64, **kw).json()["choices"][0]["message"]["content"])

    a = text(client, temperature=0.9, seed=1)
    assert a == text(client, temperature=0.9, seed=1, tree_budget=512)
    assert a == text(target_client, temperature=0.9, seed=1)
    assert a != text(client, temperature=0.9, seed=2)
    assert a != text(client, temperature=0)
    assert text(client, temperature=0.9, seed=1, top_p=0.3) != a


def test_target_only_stats(target_client: httpx.Client) -> None:
    r = post(target_client, LONG, max_tokens=40, tree_budget=256).json()
    s = r["ddtree_stats"]
    assert s["tree_budget"] == 0 and s["avg_acceptance"] == 1.0 and s["cycles"] == 40
    assert s["draft_ms"] == 0


@pytest.fixture(scope="module", params=["vllm", "omlx", "none"])
def dialect_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, httpx.Client]]:
    with (
        start_reference_server(simulated_latency=False, stats_dialect=request.param) as srv,
        httpx.Client(base_url=srv.base_url) as c,
    ):
        yield request.param, c


def test_stats_dialects(dialect_server: tuple[str, httpx.Client]) -> None:
    dialect, c = dialect_server
    r = post(c, LONG, max_tokens=48, tree_budget=32).json()
    s = stream(c, LONG, max_tokens=48, tree_budget=32, stream_options={"include_usage": True})
    assert "ddtree_stats" not in r and s.stats is None and s.done
    if dialect == "vllm":
        for m in (
            r["metrics"]["speculative_decoding"],
            s.chunks[-1]["metrics"]["speculative_decoding"],
        ):
            steps, accepted = m["num_spec_steps"], m["num_accepted_draft_tokens"]
            # as vLLM counts: the prefill's first token is no speculative step
            assert steps + accepted == 48 - 1
            assert m["mean_acceptance_length"] == pytest.approx(1 + accepted / steps)
            assert 0 < m["num_accepted_draft_tokens"] <= m["num_draft_tokens"]
    elif dialect == "omlx":
        for u in (r["usage"], s.usage):
            assert u is not None and u["dflash_ddtree_tree_budget"] == 32
            assert u["dflash_ddtree_avg_acceptance"] == pytest.approx(
                48 / u["dflash_ddtree_cycles_completed"], abs=1e-3
            )
            assert u["dflash_ddtree_tokens_per_second"] > 0
    else:
        assert "metrics" not in r and not any(k.startswith("dflash") for k in r["usage"])


def test_a_prompt_and_answer_past_the_context_are_refused_in_vllms_words() -> None:
    with (
        start_reference_server(
            simulated_latency=False, max_model_len=64, state_context=False
        ) as server,
        httpx.Client(base_url=server.base_url, timeout=30) as c,
    ):
        (model,) = c.get("/models").json()["data"]
        assert "max_model_len" not in model  # stated nowhere: --unstated-context
        prompt = post(c, "Hi.", max_tokens=8).json()["usage"]["prompt_tokens"]
        # the prompt and max_tokens may fill the context exactly, not one token more
        assert post(c, "Hi.", max_tokens=64 - prompt).status_code == 200
        assert post(c, "Hi.", max_tokens=65 - prompt).status_code == 400
        r = post(c, "river " * 80, max_tokens=8)
    assert r.status_code == 400, r.text
    message = r.json()["error"]["message"]
    assert message.startswith("This model's maximum context length is 64 tokens. However, ")
