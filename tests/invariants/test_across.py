"""check_determinism and check_budget_ignored."""

from __future__ import annotations

import random

import pytest

from pytest_ddtree.checks.invariants import BudgetSample, check_budget_ignored, check_determinism

from .factories import HEALTHY_TEXT, completion

BUDGETS = [16, 32, 64, 128, 256, 512, 1024]
PROMPTS = ["essay", "code", "list"]


def test_identical_runs_are_deterministic():
    assert check_determinism(completion(), completion()) == []


def test_different_text_is_reported_with_the_first_difference():
    a = completion(HEALTHY_TEXT)
    b = completion(HEALTHY_TEXT[:50] + "X" + HEALTHY_TEXT[51:])
    (v,) = check_determinism(a, b)
    assert v.code == "nondeterministic"
    assert "character 50" in v.message
    assert "»X«" in v.evidence["second_run"]


def test_different_finish_reason_is_nondeterministic():
    (v,) = check_determinism(completion(finish="stop"), completion(finish="length"))
    assert "'stop'" in v.message and "'length'" in v.message


def test_sampling_without_seed_is_not_judged():
    a, b = completion(temperature=0.7), completion("Something else entirely.", temperature=0.7)
    assert check_determinism(a, b) == []


def test_failed_requests_are_not_judged():
    assert check_determinism(completion(), completion("x", status=500)) == []


def sweep(accept, tps, *, rounds=2, seed=0, echo=False):
    rng = random.Random(seed)
    out = []
    for _ in range(rounds):
        for p_i, prompt in enumerate(PROMPTS):
            for b in BUDGETS:
                out.append(
                    BudgetSample(
                        tree_budget=b,
                        decode_tokens_per_second=tps(b, p_i) * rng.uniform(0.95, 1.05),
                        mean_acceptance_length=accept(b, p_i),
                        prompt_id=prompt,
                        echoed_tree_budget=b if echo else None,
                    )
                )
    return out


def honoured_accept(b, p):
    return (2.0 + p) * (1 + 0.25 * BUDGETS.index(b) / 6) ** 1.5


def honoured_tps(b, p):
    # throughput peaks at an interior budget
    return (400 + 50 * p) * (1 - (BUDGETS.index(b) - 3) ** 2 / 20)


def test_ignored_budget_is_reported():
    samples = sweep(lambda b, p: 3.0 + p, lambda b, p: 500 + 40 * p)
    (v,) = check_budget_ignored(samples)
    assert v.code == "budget-ignored"
    assert "16..1024" in v.message
    assert v.evidence["budgets"] == BUDGETS


@pytest.mark.parametrize("seed", range(5))
def test_honoured_budget_is_not_reported(seed):
    assert check_budget_ignored(sweep(honoured_accept, honoured_tps, seed=seed)) == []


def test_acceptance_alone_is_enough_to_show_the_budget_matters():
    samples = sweep(honoured_accept, lambda b, p: 500.0)
    assert check_budget_ignored(samples) == []


def test_timing_alone_is_enough_without_acceptance_stats():
    samples = [
        BudgetSample(s.tree_budget, s.decode_tokens_per_second, None, s.prompt_id)
        for s in sweep(honoured_accept, honoured_tps)
    ]
    assert check_budget_ignored(samples) == []
    flat = [
        BudgetSample(s.tree_budget, s.decode_tokens_per_second, None, s.prompt_id)
        for s in sweep(honoured_accept, lambda b, p: 500 + 40 * p)
    ]
    assert [v.code for v in check_budget_ignored(flat)] == ["budget-ignored"]


def test_echoed_budget_or_too_little_data_is_not_judged():
    flat_accept = lambda b, p: 3.0  # noqa: E731
    flat_tps = lambda b, p: 500.0  # noqa: E731
    assert check_budget_ignored(sweep(flat_accept, flat_tps, echo=True)) == []
    assert check_budget_ignored(sweep(flat_accept, flat_tps)[:5]) == []
    narrow = [s for s in sweep(flat_accept, flat_tps) if s.tree_budget in (16, 32)]
    assert check_budget_ignored(narrow) == []
    assert check_budget_ignored([]) == []


def test_budget_ignored_is_deterministic():
    samples = sweep(lambda b, p: 3.0, lambda b, p: 500.0, seed=3)
    assert check_budget_ignored(samples) == check_budget_ignored(samples)
