"""Is speculation worth it here? The break-even map, by prompt depth.

With ``--ddtree-context 512,2048,8192`` (or ``auto``: doubling up to the server's context
length) every depth gets five prompts of exactly that many tokens, each behind a prefix of its
own, sent at every tree budget and, where a target-only twin is known
(``--ddtree-baseline-endpoint``; the embedded server brings its own), with speculation off.
Each depth is raced: the answer names the budget to deploy there, or speculation off, with
its speedup over the target alone. At each depth a conversation's second turn is sent too,
with speculation off and at the best budget: how much of it the server's prefix cache held
(``usage.prompt_tokens_details.cached_tokens``) and its TTFT. Off unless ``--ddtree-context``
is given.
"""

from __future__ import annotations

from pytest_ddtree import BreakEvenMap, DDTreeBreakEven


def test_break_even(ddtree_breakeven: DDTreeBreakEven) -> None:
    found: BreakEvenMap = ddtree_breakeven(second_turn=True)
    assert found.cells  # an invalid answer not the target alone's has failed the test
