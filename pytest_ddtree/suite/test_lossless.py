"""Speculation must change nothing: the same temperature-0 request always gets the same answer.

``ddtree_determinism`` sends the first prompt twice, then a different prompt, then the first
again, at one budget: every answer to the first must be identical. A server that samples
when it should not fails with ``nondeterministic``; a drafter whose state leaks from one
request into the next fails with ``state-leak``.

``ddtree_lossless`` sends a prompt at temperature 0 at every budget and to the target-only
baseline (the embedded server's twin, or ``--ddtree-baseline-endpoint``; without one the
lowest budget is the reference) and fails with ``not-lossless`` at the first divergence: the
token index and character offset, both continuations around it, and which budgets diverge.
At the divergence the target's margin between its token and the speculative path's tells
a numerical near-tie (batched bf16 verification flipping two tokens a fraction of a nat
apart) from a token the target would not produce: ``--ddtree-lossless near-tie[:MARGIN]``
(the default) makes a near-tie a warning and keeps the budget timed, ``exact`` fails it too,
``prefix:N`` tolerates divergence after N tokens; ``off`` skips the losslessness tests.

Above temperature 0 speculation need only keep the *distribution* of answers:
``ddtree_distribution`` samples ``--ddtree-distribution-samples`` answers from the server and
as many from the baseline, each with its own seed, and fails with
``not-lossless-in-distribution`` when a permutation test tells them apart at
``--ddtree-distribution-alpha``. It runs on the first sweep prompt (long prose, where a
verifier that favours the drafter shows most), at the largest budget, at each temperature of
``--ddtree-temperatures`` above 0 (0.7 when there is none).

``test_logprobs`` asks the first prompt for its log-probabilities (two alternatives per
token) at the largest budget: streamed, they must be there, one per generated token, finite,
at most 0 and not all 0.0 (``logprobs``); then ``ddtree_lossless`` asks the server and the
baseline for them at temperature 0, and where both chose the same token they must agree
within the tolerance measured on real engines.

A server's prefix cache and its batching must not change an answer either:
``ddtree_cold_warm_batched`` sends the first sweep prompt at temperature 0, at the largest
budget, cold (opened by a session line no cache has seen), warm (the same request again) and
batched (again, while other requests stream beside it), and fails with ``cold-warm-batched``
when the answers differ where the target was sure (a near-tie is numerics, as above).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from pytest_ddtree import DDTreeClient, Settings

if TYPE_CHECKING:
    from pytest_ddtree import Prompt


def test_deterministic_and_stateless(
    prompts: list[Prompt],
    tree_budget: int | None,
    ddtree_determinism: Callable[..., None],
) -> None:
    first, other = prompts[0], prompts[-1]
    ddtree_determinism(first.messages, other.messages, tree_budget=tree_budget)


def test_lossless(prompt: Prompt, ddtree_lossless: Callable[..., Any]) -> None:
    ddtree_lossless(prompt.messages, prompt_id=prompt.id, **prompt.params)


def test_lossless_in_distribution(
    sampled_temperature: float,
    sweep_prompts: list[Prompt],
    ddtree_distribution: Callable[..., Any],
) -> None:
    if not sweep_prompts:
        pytest.skip("no sweep prompt to sample")
    prompt = sweep_prompts[0]
    ddtree_distribution(
        prompt.messages, temperature=sampled_temperature, prompt_id=prompt.id, **prompt.params
    )


def test_logprobs(
    prompts: list[Prompt],
    ddtree_client: DDTreeClient,
    ddtree_settings: Settings,
    ddtree_check: Callable[..., None],
    ddtree_lossless: Callable[..., Any],
) -> None:
    prompt = prompts[0]
    numbered = [b for b in ddtree_settings.budgets if b is not None]
    budget = max(numbered) if numbered else None
    asked: dict[str, Any] = (
        {"logprobs": True, "top_logprobs": 2} if ddtree_settings.api == "chat" else {"logprobs": 2}
    )
    fields = {**prompt.params, **asked}
    completion = ddtree_client.request(
        prompt.messages,
        api=ddtree_settings.api,
        max_tokens=ddtree_settings.max_tokens,
        tree_budget=budget,
        stream=True,
        prompt_id=prompt.id,
        **fields,
    )
    ddtree_check(completion, **prompt.expectations(ddtree_settings.max_tokens))
    ddtree_lossless(
        prompt.messages,
        prompt_id=prompt.id,
        budgets=None if budget is None else [budget],
        **fields,
    )


def test_cold_warm_batched(
    sweep_prompts: list[Prompt], ddtree_cold_warm_batched: Callable[..., Any]
) -> None:
    if not sweep_prompts:
        pytest.skip("no sweep prompt to send")
    prompt = sweep_prompts[0]
    ddtree_cold_warm_batched(prompt.messages, prompt_id=prompt.id, **prompt.params)
