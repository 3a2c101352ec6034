"""The timed budget sweep: gated pytest-benchmark timings for every sweep prompt and budget.

Every round's response is validated inside the timed call: an invalid round fails the test
and leaves no timing behind, so the table at the end, ``--benchmark-autosave`` and
``--benchmark-compare-fail`` only ever see valid runs. Before the first timing each prompt is
sent once untimed; if that smoke request fails, no benchmark of the session runs.

At the end of the session the plugin prints the sweep table (one row per budget) and a
recommendation; ``--ddtree-report DIR`` also writes ``sweep.json`` and ``sweep.html``.
Rounds and warm-up rounds come from ``--ddtree-rounds`` / ``--ddtree-warmup-rounds``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pytest_ddtree import Completion, Settings

if TYPE_CHECKING:
    from pytest_ddtree import Prompt


def test_sweep(
    sweep_prompt: Prompt,
    tree_budget: int | None,
    ddtree_benchmark: Callable[..., Completion],
    ddtree_settings: Settings,
) -> None:
    completion = ddtree_benchmark(
        sweep_prompt.messages,
        prompt_id=sweep_prompt.id,
        **sweep_prompt.expectations(ddtree_settings.max_tokens),
    )
    assert completion.request.tree_budget == tree_budget
