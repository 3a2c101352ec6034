"""A load ``Sample`` from the figures a load test measures (the runner builds it from a
``Completion``; these tests from the figures alone)."""

from __future__ import annotations

from typing import Any

from pytest_ddtree.measure.load import LoadPoint
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.wire.completion import decode_rate


def load_sample(
    point: LoadPoint,
    tree_budget: int | None,
    start: float,
    end_to_end: float,
    ttft: float | None,
    gaps: tuple[float, ...],
    completion_tokens: int | None,
    valid: bool,
    codes: tuple[str, ...] = (),
    **kw: Any,
) -> Sample:
    """The sample of one request sent at ``start`` (its decode rate by the one formula, the
    first event taken as one token; its acceptance rate from its draft counts)."""
    seconds = end_to_end - ttft if ttft is not None and gaps else None
    drafted, accepted = kw.get("drafted_tokens"), kw.get("accepted_tokens")
    if drafted and accepted is not None:
        kw.setdefault("acceptance_rate", accepted / drafted)
    kw.setdefault("prompt_id", "prompt")
    kw.setdefault("round", 0)
    kw.setdefault("worker", "main")
    return Sample(
        tree_budget=tree_budget,
        valid=valid,
        codes=codes,
        point=point,
        start=start,
        end_to_end=end_to_end,
        ttft=ttft,
        gaps=gaps,
        completion_tokens=completion_tokens,
        decode_tokens_per_second=decode_rate(completion_tokens, None, seconds),
        **kw,
    )
