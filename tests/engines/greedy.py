"""What the engine tiers share about greedy decoding's log-probabilities."""

from __future__ import annotations

from pytest_ddtree.checks.invariants import check
from pytest_ddtree.core.settings import DEFAULT_NEAR_TIE
from pytest_ddtree.wire.client import DDTreeClient

PROSE_PROMPT = "Describe how bread is baked in a small kitchen."

# prose, code and a list: greedy paths through confident and uncertain tokens alike
GREEDY_PROMPTS = (
    PROSE_PROMPT,
    "Write a Python function that merges two sorted lists, and explain the code in detail.",
    "List 12 steps for planting a vegetable garden.",
)


def assert_chooses_the_best_alternative(client: DDTreeClient, *, stream: bool) -> None:
    """At temperature 0, wherever alternatives are listed, the chosen token is the best of
    them within the near-tie margin, on the greedy prompts (96 tokens each): the logprobs
    rule judges every answer, withholds nothing and raises no false alarm."""
    judged, worst = 0, 0.0
    for prompt in GREEDY_PROMPTS:
        kw = {"logprobs": True, "top_logprobs": 5, "temperature": 0}
        c = client.chat(prompt, max_tokens=96, stream=stream, **kw)
        assert c.ok and c.logprobs, c.error or c.raw
        found = check(c, counter=client.counter)
        assert [v.message for v in found if v.code == "logprobs"] == [], c.text
        assert not [w for w in found.withheld if w.code == "logprobs"], found.withheld
        for e in c.logprobs:
            if e.top:
                judged += 1
                worst = max(worst, max(alt[1] for alt in e.top) - e.logprob)
    assert judged >= 100 and worst <= DEFAULT_NEAR_TIE, (judged, worst)
