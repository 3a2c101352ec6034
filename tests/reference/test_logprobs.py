"""The reference server's log-probabilities and its near-tie fault.

The target at temperature 0 decodes greedily: the log-probabilities it reports are the
log-softmax of its logits, whose best token is always the one it chose; a token a faulty
verifier commits outside its candidates has none (``-9999.0``, as vLLM writes minus
infinity) and a near-tie flip commits the runner-up within 0.15 nats of the best.
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


@pytest.mark.parametrize("target_only", [False, True], ids=["speculative", "target-only"])
def test_temperature_zero_chooses_the_best_token_it_reports(
    client: httpx.Client, target_client: httpx.Client, target_only: bool
) -> None:
    # greedy decoding: wherever alternatives are listed, the chosen token is the first of
    # them, free prose, list numbers and reasoning-free code alike (a rule's token is certain)
    c = target_client if target_only else client
    prompts = (*PROMPTS, "List 12 steps for planting a vegetable garden.")
    judged = 0
    for prompt in prompts:
        choice = _choice(post(c, prompt, max_tokens=96, logprobs=True, top_logprobs=5))
        for e in choice["logprobs"]["content"]:
            best = e["top_logprobs"][0]
            assert (best["token"], best["logprob"]) == (e["token"], e["logprob"])
            judged += len(e["top_logprobs"]) > 1
    assert judged >= 50  # a choice among alternatives, not only certain tokens
    # above temperature 0 the target samples: a token below the best is chosen somewhere
    sampled = _choice(
        post(c, LONG, max_tokens=96, temperature=1.0, seed=5, logprobs=True, top_logprobs=5)
    )
    assert any(
        e["top_logprobs"][0]["logprob"] > e["logprob"] for e in sampled["logprobs"]["content"]
    )


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


def test_near_tie_flips_a_near_tie_once(client: httpx.Client, target_client: httpx.Client) -> None:
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
        # where they part, the target's runner-up within 0.15 nats of its best token
        other = flipped["message"]["content"]
        at = next(i for i, (a, b) in enumerate(zip(base, other, strict=False)) if a != b)
        text, entry = "", None
        for e in flipped["logprobs"]["content"]:
            if len(text.encode()) + len(e["bytes"]) > len(base[:at].encode()):
                entry = e
                break
            text += bytes(e["bytes"]).decode("utf-8", "replace")
        assert entry is not None
        tops = [(t["token"], t["logprob"]) for t in entry["top_logprobs"]]
        assert tops[1] == (entry["token"], entry["logprob"])
        assert 0 < tops[0][1] - entry["logprob"] <= 0.15
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
