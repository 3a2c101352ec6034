"""The sweep's order of its samples (``measure.sample.Sample``, one per timed request)."""

from __future__ import annotations

from collections.abc import Iterable

from pytest_ddtree.core.budget import budget_order
from pytest_ddtree.measure.sample import Sample


def merge_samples(*groups: Iterable[Sample]) -> list[Sample]:
    """Merge samples from several processes (e.g. pytest-xdist workers).

    The result is in a canonical order (round, budget, prompt, worker) so a
    merged report does not depend on which worker finished first; the sort is
    stable, so samples that tie keep their original relative order.
    """
    merged = [s for group in groups for s in group]
    merged.sort(
        key=lambda s: (
            s.round,
            s.temperature,
            budget_order(s.tree_budget),
            s.prompt_id,
            s.worker or "",
        )
    )
    return merged
