"""The sweep plan: budgets x prompts x rounds in a seeded, interleaved order, and its runner."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from pytest_ddtree.core.settings import Settings
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep.drift import DRIFT_PAIRS
from pytest_ddtree.wire.completion import Completion

SweepOrder = Literal["shuffled", "fixed"]


@dataclass(frozen=True)
class PlannedRequest:
    """One request of a :class:`SweepPlan`; warm-up requests have ``warmup=True``.

    ``round`` counts measured rounds from 0; warm-up rounds count from
    ``-warmup_rounds`` up to -1 so every request has a distinct position.
    """

    round: int
    tree_budget: int
    prompt_id: str
    warmup: bool
    #: ``"start"``/``"end"``: the two measurements of the drift check (see ``SweepPlan.recheck``)
    drift_mark: str | None = None


@dataclass(frozen=True)
class SweepPlan:
    """Budgets x prompts x rounds, with warm-up rounds and an interleaved order.

    Each round visits every budget once (every prompt at that budget), in an
    order shuffled with ``seed`` and the round number, so slow drift of the
    server or the machine (heating, caches, background load) spreads over all
    budgets instead of favouring the ones measured first. ``order="fixed"``
    keeps the given budget order in every round (useful to reproduce a drift).
    With ``recheck``, the first budget is also measured in two extra blocks,
    one right after the warm-up (``drift_mark="start"``) and one after the
    last round (``"end"``), each :attr:`drift_repeats` passes over the
    prompts, so the drift check (:mod:`~pytest_ddtree.measure.sweep.drift`) has at
    least :data:`~pytest_ddtree.measure.sweep.drift.DRIFT_PAIRS` start/end pairs.
    Iteration is deterministic: the same plan always yields the same requests.
    """

    budgets: tuple[int, ...]
    prompts: tuple[str, ...]
    rounds: int = Settings.rounds
    warmup_rounds: int = Settings.warmup_rounds
    seed: int = Settings.sweep_seed
    order: SweepOrder = Settings.sweep_order
    recheck: bool = False

    def __post_init__(self) -> None:
        if not self.budgets:
            raise ValueError("sweep plan: budgets must not be empty")
        if any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in self.budgets):
            raise ValueError(f"sweep plan: budgets must be positive integers, got {self.budgets!r}")
        if len(set(self.budgets)) != len(self.budgets):
            raise ValueError(f"sweep plan: duplicate budgets in {self.budgets!r}")
        if not self.prompts:
            raise ValueError("sweep plan: prompts must not be empty")
        if len(set(self.prompts)) != len(self.prompts):
            raise ValueError(f"sweep plan: duplicate prompt ids in {self.prompts!r}")
        if self.rounds < 1:
            raise ValueError(f"sweep plan: rounds must be >= 1, got {self.rounds!r}")
        if self.warmup_rounds < 0:
            raise ValueError(f"sweep plan: warmup_rounds must be >= 0, got {self.warmup_rounds!r}")
        if self.order not in ("shuffled", "fixed"):
            raise ValueError(f"sweep plan: order must be 'shuffled' or 'fixed', got {self.order!r}")

    def budget_order(self, round: int) -> tuple[int, ...]:
        """The budgets of one round (warm-up rounds are negative) in visiting order."""
        if self.order == "fixed":
            return self.budgets
        order = list(self.budgets)
        # A string seed is hashed with SHA-512 by `random`, so the order is the
        # same in every process regardless of PYTHONHASHSEED.
        random.Random(f"ddtree-sweep:{self.seed}:{round}").shuffle(order)
        return tuple(order)

    @property
    def first_budget(self) -> int:
        """The budget measured first (the one the drift check measures again)."""
        return self.budget_order(0)[0]

    @property
    def drift_repeats(self) -> int:
        """Passes over the prompts in each drift block (0 without ``recheck``)."""
        return -(-DRIFT_PAIRS // len(self.prompts)) if self.recheck else 0

    def _drift_block(self, round: int, mark: str) -> Iterator[PlannedRequest]:
        for _ in range(self.drift_repeats):
            for prompt in self.prompts:
                yield PlannedRequest(round, self.first_budget, prompt, False, mark)

    def __iter__(self) -> Iterator[PlannedRequest]:
        for r in range(-self.warmup_rounds, self.rounds):
            if r == 0:
                yield from self._drift_block(0, "start")
            for budget in self.budget_order(r):
                for prompt in self.prompts:
                    yield PlannedRequest(
                        round=r, tree_budget=budget, prompt_id=prompt, warmup=r < 0
                    )
        yield from self._drift_block(self.rounds, "end")

    def __len__(self) -> int:
        blocks = 2 * self.drift_repeats * len(self.prompts)
        return (self.rounds + self.warmup_rounds) * len(self.budgets) * len(self.prompts) + blocks


def seed_key(planned: PlannedRequest, drift_seen: dict[tuple[str, str], int]) -> str:
    """The key of a request's sampling seed: its round (``"3"``, the same at every budget),
    or ``"drift-2"`` for the third request of a prompt in a drift block, so the end block
    samples as the start block did. ``drift_seen`` counts a run's drift requests so far."""
    if planned.drift_mark is None:
        return str(planned.round)
    k = drift_seen.get((planned.drift_mark, planned.prompt_id), 0)
    drift_seen[(planned.drift_mark, planned.prompt_id)] = k + 1
    return f"drift-{k}"


class GroupWatch(Protocol):
    """Told when a round's visit of one budget starts and ends (server counters)."""

    def start(self, round: int, tree_budget: int | None) -> None:
        """Before the group's first request."""

    def end(self, round: int, tree_budget: int | None, completions: Sequence[Completion]) -> None:
        """After the group's last request."""


def run_sweep(
    plan: SweepPlan,
    request: Callable[[int, str], Completion],
    validate: Callable[[Completion], Sequence[Violation]],
    *,
    worker: str | None = None,
    concurrent: bool = False,
    on_sample: Callable[[Sample], None] | None = None,
    watch: GroupWatch | None = None,
    seeded: Callable[[int, str, str], Completion] | None = None,
) -> list[Sample]:
    """Run ``plan`` with ``request(tree_budget, prompt_id)`` and validate each answer.

    Warm-up requests are validated too (an invalid warm-up is recorded as an
    invalid sample of round -1, -2, ..., so a broken server cannot hide in the
    warm-up) but valid warm-ups are not recorded. ``watch`` is told where each
    round's visit of a budget (every prompt at it) starts and ends. ``seeded``,
    when given, is called instead of ``request`` with a third argument, the key of
    the request's sampling seed: its round (``"3"``, the same at every budget), or
    ``"drift-2"`` for the third request of a prompt in a drift block, so the end
    block samples as the start block did.
    """
    samples: list[Sample] = []
    drift_seen: dict[tuple[str, str], int] = {}
    group: list[Completion] = []
    key: tuple[int, int] | None = None
    for planned in plan:
        if watch is not None and key != (planned.round, planned.tree_budget):
            if key is not None:
                watch.end(*key, group)
            key, group = (planned.round, planned.tree_budget), []
            watch.start(*key)
        if seeded is None:
            completion = request(planned.tree_budget, planned.prompt_id)
        else:
            key_ = seed_key(planned, drift_seen)
            completion = seeded(planned.tree_budget, planned.prompt_id, key_)
        group.append(completion)
        violations = list(validate(completion))
        if planned.warmup and not violations:
            continue
        sample = Sample.from_completion(
            completion,
            violations,
            round=planned.round,
            worker=worker,
            concurrent=concurrent,
            prompt_id=planned.prompt_id,
        )
        if planned.drift_mark is not None:
            sample = dataclasses.replace(sample, drift_mark=planned.drift_mark)
        samples.append(sample)
        if on_sample is not None:
            on_sample(sample)
    if watch is not None and key is not None:
        watch.end(*key, group)
    return samples
