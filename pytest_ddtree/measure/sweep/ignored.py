"""A sweep whose server ignores the tree budget: the check across the sweep, and the
verdict that recommends no budget.

No pytest here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pytest_ddtree.core.violation import Violation
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep.statistics import SweepSummary


def budget_ignored(samples: Sequence[Sample], skip_checks: Sequence[str]) -> list[Violation]:
    """The sweep-level check: does the server's speed depend on the budget at all?"""
    if "budget-ignored" in skip_checks:
        return []
    from pytest_ddtree.checks.invariants import BudgetSample, check_budget_ignored

    usable = [
        BudgetSample(
            tree_budget=s.tree_budget,
            decode_tokens_per_second=s.decode_tokens_per_second,
            mean_acceptance_length=s.mean_acceptance_length,
            prompt_id=s.prompt_id,
            echoed_tree_budget=s.echoed_tree_budget,
        )
        for s in samples
        if s.valid and s.tree_budget is not None and s.round >= 0
    ]
    return list(check_budget_ignored(usable))


def ignoring_budget(summary: SweepSummary) -> SweepSummary:
    """A sweep whose server ignores the budget recommends none: its table keeps what was
    measured, and no budget's cell calls it best (the budgets are one configuration)."""
    rec = summary.recommendation
    budgets = tuple(
        replace(st, place="budget ignored") if st.all_valid else st for st in summary.budgets
    )
    verdict = replace(rec.flagged(budget_ignored=True), decode_median=None, decode_ci=None)
    return replace(summary, budgets=budgets, recommendation=verdict)
