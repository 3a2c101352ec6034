"""Every prompt at every tree budget, streamed: each answer must pass every invariant.

This is the heart of the gate. A budget that makes the server stop early, leak a chat
role, lie in ``finish_reason`` or ``usage``, or report impossible speculation statistics
fails here with the violation's code and evidence, before any timing is trusted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pytest_ddtree import DDTreeClient, Settings

if TYPE_CHECKING:
    from pytest_ddtree import Prompt


def test_invariants(
    prompt: Prompt,
    tree_budget: int | None,
    ddtree_client: DDTreeClient,
    ddtree_settings: Settings,
    ddtree_check: Callable[..., None],
) -> None:
    completion = ddtree_client.request(
        prompt.messages,
        api=ddtree_settings.api,
        max_tokens=ddtree_settings.max_tokens,
        tree_budget=tree_budget,
        stream=True,
        prompt_id=prompt.id,
        **prompt.params,
    )
    ddtree_check(completion, **prompt.expectations(ddtree_settings.max_tokens))
