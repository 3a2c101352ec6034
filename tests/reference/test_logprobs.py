"""The reference server's log-probabilities and its near-tie fault.

The target at temperature 0 samples from its counts squared; the log-probabilities it
reports are that distribution's, so a token a faulty verifier commits outside it has none
(``-9999.0``, as vLLM writes minus infinity) and a near-tie flip is exactly tied.
"""

from __future__ import annotations

import math

import httpx
import pytest

from ._helpers import LONG, post, stream

PROMPTS = (LONG, "Explain in detail how trains cross the mountains.", "Write an essay on bees.")


def _choice(r: httpx.Response) -> dict:
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_chat_logprobs_spell_the_answer(client: httpx.Client) -> None:
    plain = _choice(post(client, LONG, max_tokens=32))
    assert plain["logprobs"] is None  # not asked for
    choice = _choice(post(client, LONG, max_tokens=32, logprobs=True, top_logprobs=3))
    entries = choice["logprobs"]["content"]
    assert choice["message"]["content"] == plain["message"]["content"]
    assert b"".join(bytes(e["bytes"]) for e in entries).decode() == plain["message"]["content"]
    for e in entries:
        assert len(e["top_logprobs"]) <= 3 and e["logprob"] <= 0
        tops = [t["logprob"] for t in e["top_logprobs"]]
        assert tops == sorted(tops, reverse=True)
        # the answer's token is the target's own: listed unless three others are likelier
        assert e["token"] in [t["token"] for t in e["top_logprobs"]] or e["logprob"] <= tops[-1]
        assert sum(math.exp(t) for t in tops) <= 1 + 1e-9


def test_text_completion_logprobs_are_in_the_legacy_shape(client: httpx.Client) -> None:
    r = client.post("/completions", json={"prompt": "Rivers", "max_tokens": 8, "logprobs": 2})
    lp = _choice(r)["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
    assert "".join(lp["tokens"]) == _choice(r)["text"]
    assert all(len(t) <= 2 for t in lp["top_logprobs"])


@pytest.mark.parametrize(
    ("body", "param"),
    [({"logprobs": "yes"}, "logprobs"), ({"logprobs": True, "top_logprobs": 21}, "top_logprobs")],
)
def test_bad_logprob_requests_are_rejected(client: httpx.Client, body: dict, param: str) -> None:
    r = post(client, LONG, max_tokens=4, **body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param


def test_near_tie_flips_an_exact_tie_once(
    client: httpx.Client, target_client: httpx.Client
) -> None:
    for prompt in PROMPTS:
        base = _choice(post(target_client, prompt, max_tokens=64))["message"]["content"]
        flipped = _choice(
            post(
                client,
                prompt,
                fault="near-tie",
                max_tokens=64,
                tree_budget=256,
                logprobs=True,
                top_logprobs=20,
            )
        )
        assert flipped["message"]["content"] != base
        # where they part, the target gives both tokens the same probability
        other = flipped["message"]["content"]
        at = next(i for i, (a, b) in enumerate(zip(base, other, strict=False)) if a != b)
        text, entry = "", None
        for e in flipped["logprobs"]["content"]:
            if len(text.encode()) + len(e["bytes"]) > len(base[:at].encode()):
                entry = e
                break
            text += bytes(e["bytes"]).decode("utf-8", "replace")
        assert entry is not None
        tops = {t["token"]: t["logprob"] for t in entry["top_logprobs"]}
        assert entry["token"] in tops and list(tops.values()).count(entry["logprob"]) >= 2
        # above temperature 0 it changes nothing
        sampled = dict(temperature=0.7, seed=3, max_tokens=48, tree_budget=256)
        assert _choice(post(client, prompt, fault="near-tie", **sampled)) == _choice(
            post(client, prompt, **sampled)
        )


def test_streamed_logprobs_come_with_the_finish_chunk(client: httpx.Client) -> None:
    plain = _choice(post(client, LONG, max_tokens=32, logprobs=True, top_logprobs=2))
    s = stream(client, LONG, max_tokens=32, logprobs=True, top_logprobs=2)
    carried = [ev["choices"][0] for ev in s.events if ev.get("choices")]
    entries = [e for ch in carried if ch["logprobs"] for e in ch["logprobs"]["content"]]
    assert entries == plain["logprobs"]["content"]
    # every entry at once, on the chunk that carries the finish
    assert [ch["finish_reason"] for ch in carried if ch["logprobs"]] == ["length"]
