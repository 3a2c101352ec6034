"""What llama.cpp says about its stops and its acceptance, read through the plugin: no stop
field on its OpenAI routes (so no ``stop`` evidence, never a guess), its ``timings`` without a
per-response histogram, and its ``/detokenize`` naming a token."""

from __future__ import annotations

import httpx
import pytest

from pytest_ddtree import engines
from pytest_ddtree.checks.invariants import check
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.tokens import ServerCounter

ESSAY = "Write a long essay about rivers and the valleys they shape."


def test_detokenize_names_a_token(target: engines.LlamaCppServer) -> None:
    with httpx.Client() as http:
        counter = ServerCounter(target.root_url, http, shape="llamacpp", model=target.model)
        assert counter.decode_token(2) == "<|im_end|>"  # SmolLM2's end of turn
        assert counter.decode_token(10**9) is None  # out of the vocabulary: no text, no error


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_no_stop_field_on_openai_routes(ngram: engines.LlamaCppServer, stream: bool) -> None:
    with httpx.Client() as http, DDTreeClient(ngram.base_url, budget_mode="none") as client:
        counter = ServerCounter(ngram.root_url, http, shape="llamacpp", model=ngram.model)
        c = client.chat(ESSAY, max_tokens=64, stream=stream, stop=["."])
        assert c.finish_reason == "stop"
        assert (c.stop_reason, c.stop_field) == (None, None)
        assert c.stats is not None and c.stats.dialect == "llamacpp"
        assert c.stats.acceptance_histogram is None and c.stats.depth_source is None
        found = [v for v in check(c, counter=counter, min_tokens=32) if v.code == "early-stop"]
        assert len(found) == 1
        assert "stop" not in found[0].evidence and "stop_kind" not in found[0].evidence


# the bundled suite's 'list-stop' prompt: SmolLM2 writes "1. Stay hydrated\n2. Eat a balanced
# diet\n3. Get enough sleep\n" and the stop "4." fires on the fourth item's number
TIPS = "Write a numbered list of 10 tips for staying healthy."


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_stop_sequence_ends_the_answer_and_passes_the_check(
    ngram: engines.LlamaCppServer, stream: bool
) -> None:
    with httpx.Client() as http, DDTreeClient(ngram.base_url, budget_mode="none") as client:
        counter = ServerCounter(ngram.root_url, http, shape="llamacpp", model=ngram.model)
        c = client.chat(TIPS, max_tokens=96, stream=stream, stop=["4."])
        assert c.finish_reason == "stop" and "4." not in c.text
        assert c.text.rstrip("\n").splitlines()[-1].startswith("3. "), c.text
        assert check(c, counter=counter, min_tokens=8) == []
        # llama.cpp counts the matched stop's own tokens, never a token past it
        assert c.usage is not None and c.usage.completion_tokens is not None
        text = counter.count(c.text)
        assert text <= c.usage.completion_tokens <= text + counter.count("4."), c.usage
