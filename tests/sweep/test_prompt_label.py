"""The prompt label of a timed test's requests: one rule at every budget and on every server."""

from __future__ import annotations

import pytest

TIMED = """
import pytest

def test_gen(ddtree_benchmark, tree_budget):
    ddtree_benchmark("Write a long essay about rivers.", max_tokens=48, rounds=1)

@pytest.mark.parametrize("name", ["long-essay"])
def test_named(ddtree_benchmark, tree_budget, name):
    ddtree_benchmark("Write a long essay about rivers.", max_tokens=48, rounds=1)
"""


@pytest.mark.parametrize(
    ("budgets", "test", "label"),
    [
        ("--ddtree-budgets=16", "test_gen", "test_gen"),
        ("--ddtree-budget-mode=none", "test_gen", "test_gen"),
        ("--ddtree-budget-mode=none", "test_named", "long-essay"),
    ],
)
def test_the_smoke_requests_prompt_label_is_the_tests_own_at_every_budget_mode(
    pytester: pytest.Pytester, budgets: str, test: str, label: str
) -> None:
    # a server budget (tree_budget=server-default) is one id, not "...=server" and "default"
    pytester.makepyfile(test_timed=TIMED)
    result = pytester.runpytest(
        budgets,
        "-k",
        test,
        "--ddtree-reference-fault=early-eos",
        "--ddtree-reference-latency=off",
        "-p",
        "no:randomly",
    )
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "smoke request before timing (tree_budget=" in out, out
    requests = [ln.strip() for ln in out.splitlines() if "request: POST" in ln]
    assert requests and all(ln.endswith(f", prompt={label})") for ln in requests), out
