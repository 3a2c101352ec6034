"""What the timing fixtures send, and the refusals they raise, without pytest.

- ``Requester``: one fixture call's request, the same body at every budget; above temperature
  0 each (prompt, round) carries a seed of its own, the same at every budget;
- ``server_watch``: the server's counters around each group, when ``/metrics`` is read;
- the refusals: ``lossy_error`` (a budget not lossless at temperature 0), ``sampling_error``
  with its ``refused_sample`` record (a server that does not sample as asked),
  ``smoke_error`` (the request before timing broke an invariant), ``sweep_error`` (invalid
  responses in a sweep) and ``inconsistency_error`` (statistics against the counters).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_ddtree.checks.sampling import request_seed
from pytest_ddtree.core.violation import InvariantError, Violation
from pytest_ddtree.measure.sweep import Sample
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Api, Completion
from pytest_ddtree.wire.protocol import Messages
from pytest_ddtree.wire.servermetrics import GroupWatch, ServerMetricsLog

#: a completion and the invariants it broke
Failure = tuple[Completion, list[Violation]]


@dataclass(frozen=True)
class Requester:
    """The request one fixture call sends for a prompt id, at a budget, for a round."""

    client: DDTreeClient
    prompts: Mapping[str, Messages]
    max_tokens: int
    temperature: float
    seed: int
    api: Api | None = None
    stream: bool = True
    headers: Mapping[str, str] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def send(self, budget: int | None, pid: str, round_key: int | str = "smoke") -> Completion:
        extra = dict(self.extra)
        if self.temperature > 0:  # the same (prompt, round) samples alike at every budget
            extra.setdefault("seed", request_seed(self.seed, pid, round_key))
        return self.client.request(
            self.prompts[pid],
            api=self.api,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            tree_budget=budget,
            stream=self.stream,
            prompt_id=pid,
            headers=self.headers,
            **extra,
        )


def server_watch(
    log: ServerMetricsLog | None, nodeid: str, workers: int, scope: str
) -> GroupWatch | None:
    """Snapshots of the server's counters around each group, when ``/metrics`` is read."""
    if log is None or not log.reader.active:
        return None
    # several xdist workers on one server are each other's "other traffic": no verdict then
    log.judge = workers <= 1
    return GroupWatch(log, nodeid, scope=scope)


def inconsistency_error(watch: GroupWatch, skip_checks: Sequence[str]) -> InvariantError | None:
    """``stats-inconsistent`` when the responses' statistics do not add up to the counters."""
    lines = watch.inconsistencies()
    if not lines or "stats-inconsistent" in skip_checks:
        return None
    return InvariantError(
        [
            Violation(
                "stats-inconsistent",
                "the per-request speculation statistics do not add up to the server's own "
                "counters over the same requests",
                {"where": line, "metrics": watch.log.reader.url},
                "",
            )
            for line in lines
        ],
        header="server counters disagree with the responses' statistics",
    )


def refused_sample(
    found: list[Violation], budget: int | None, pid: str, temperature: float
) -> Sample:
    """The record of a budget not timed because the server does not sample as asked."""
    return Sample(
        tree_budget=budget,
        prompt_id=pid,
        round=0,
        valid=False,
        codes=tuple(v.code for v in found),
        messages=tuple(v.message for v in found),
        temperature=temperature,
    )


def collecting(
    validate: Callable[[Completion], list[Violation]],
) -> tuple[list[Failure], Callable[[Completion], list[Violation]]]:
    """A validator that also keeps each failing completion with what it broke."""
    failures: list[Failure] = []

    def checked(completion: Completion) -> list[Violation]:
        violations = validate(completion)
        if violations:
            failures.append((completion, violations))
        return violations

    return failures, checked


def prompt_ids(prompts: Mapping[str, Messages] | Sequence[str] | str) -> dict[str, Messages]:
    """A sweep's prompts by id; a plain list of strings gets the ids ``p0``, ``p1``, ..."""
    if isinstance(prompts, str):
        prompts = [prompts]
    if isinstance(prompts, Mapping):
        return dict(prompts)
    if not all(isinstance(p, str) for p in prompts):
        raise TypeError("ddtree_sweep takes {prompt_id: prompt} or a list of prompt strings")
    # ids from the list position, stable across runs and workers
    return {f"p{i}": p for i, p in enumerate(prompts)}
