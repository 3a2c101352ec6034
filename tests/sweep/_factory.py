"""Builders of realistic Completion and Sample values for the sweep tests."""

from __future__ import annotations

import random

from pytest_ddtree.measure.sweep import Sample
from pytest_ddtree.wire.completion import Completion, RequestSpec, SpecStats, Timings, Usage


def make_completion(
    *,
    tree_budget: int | None = 64,
    prompt_id: str = "essay",
    tokens: int = 128,
    ttft: float = 0.05,
    decode_rate: float = 800.0,
    acceptance: float = 4.0,
    server_rate: float | None = None,
    echoed: int | None = -1,
    text: str = "A long answer.",
) -> Completion:
    """A streamed completion whose timings give exactly ``decode_rate`` tokens/s."""
    sent = 100.0
    first = sent + ttft
    # 8 content events: the first carries one token, the rest share the others.
    later = tokens - 1
    per = later / 7
    span = later / decode_rate
    times = tuple(first + span * i / 7 for i in range(8))
    counts = (1, *(round(per * (i + 1)) - round(per * i) for i in range(7)))
    spec = RequestSpec(
        api="chat",
        url="http://127.0.0.1:1/v1/chat/completions",
        body={"model": "m"},
        tree_budget=tree_budget,
        stream=True,
        max_tokens=tokens,
        temperature=0.0,
        prompt_id=prompt_id,
    )
    rounds = max(1, round(tokens / acceptance))
    return Completion(
        request=spec,
        status_code=200,
        text=text,
        reasoning_text="",
        finish_reason="length",
        usage=Usage(prompt_tokens=10, completion_tokens=tokens, total_tokens=tokens + 10),
        stats=SpecStats(
            dialect="ddtree",
            tree_budget=tree_budget if echoed == -1 else echoed,
            decode_rounds=rounds,
            mean_acceptance_length=acceptance,
            server_tokens_per_second=decode_rate if server_rate is None else server_rate,
            block_size=16,
        ),
        timings=Timings(
            sent=sent,
            headers=sent + 0.001,
            first_content=first,
            # a length stop: the last byte comes with the last content event
            done=times[-1],
            chunk_times=times,
            chunk_tokens=counts,
        ),
        raw=[],
    )


def synthetic_sweep(
    means: dict[int, float],
    *,
    prompts: tuple[str, ...] = ("essay", "code", "list"),
    rounds: int = 3,
    spread: float = 20.0,
    seed: int = 0,
) -> list[Sample]:
    """Valid samples with normally distributed decode rates around ``means``."""
    rng = random.Random(seed)
    out = []
    for budget, mu in means.items():
        for r in range(rounds):
            for p in prompts:
                out.append(
                    Sample(
                        tree_budget=budget,
                        prompt_id=p,
                        round=r,
                        valid=True,
                        completion_tokens=128,
                        ttft=0.04 + rng.random() * 0.01,
                        decode_tokens_per_second=rng.gauss(mu, spread),
                        mean_acceptance_length=1.0 + budget**0.3,
                        decode_rounds=40,
                        server_tokens_per_second=mu,
                    )
                )
    return out
