"""The adaptive sweep: the plan's budgets raced round by round (see :mod:`.race`);
each race lap is one round of the plan.

A round visits every budget still in the race once (every prompt at it), in the
plan's seeded shuffled order of that round, so drift spreads over the budgets
as in an exhaustive sweep. Warm-up rounds, the smoke requests and the drift
blocks are as in :func:`~pytest_ddtree.measure.sweep.plan.run_sweep` and do not count
against the request budget; every answer is validated, and a budget with an
invalid answer leaves the race (it may never win).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence

from pytest_ddtree.core.violation import Violation
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep.plan import GroupWatch, PlannedRequest, SweepPlan, seed_key
from pytest_ddtree.measure.sweep.race import Race, RaceRule, Why
from pytest_ddtree.wire.completion import Completion

#: ``--ddtree-sweep-requests auto``: what an exhaustive sweep of this many rounds sends.
#: A cap, not a target: at 5% noise a budget 6.5% slower than the best takes a median of
#: about 12 rounds to leave and at most about 35 (``benchmarks/bench_race.py``).
AUTO_ROUNDS = 30


def auto_requests(budgets: int, prompts: int) -> int:
    """The default request budget of an adaptive sweep."""
    return AUTO_ROUNDS * budgets * prompts


class _Runner:
    """Sends the requests of a race, validates and records them."""

    def __init__(
        self,
        request: Callable[[int, str], Completion],
        validate: Callable[[Completion], Sequence[Violation]],
        worker: str | None,
        on_sample: Callable[[Sample], None] | None,
        watch: GroupWatch | None,
        seeded: Callable[[int, str, str], Completion] | None = None,
    ) -> None:
        self.request, self.validate, self.seeded = request, validate, seeded
        self.drift_seen: dict[tuple[str, str], int] = {}
        self.worker, self.on_sample, self.watch = worker, on_sample, watch
        self.samples: list[Sample] = []

    def group(self, items: Iterable[PlannedRequest]) -> list[tuple[Sample, bool]]:
        """One round's visit of one budget (or a drift block); (sample, valid) for each."""
        items = list(items)
        if not items:
            return []
        key = (items[0].round, items[0].tree_budget)
        if self.watch is not None:
            self.watch.start(*key)
        sent: list[Completion] = []
        out: list[tuple[Sample, bool]] = []
        for planned in items:
            if self.seeded is None:
                completion = self.request(planned.tree_budget, planned.prompt_id)
            else:
                seed_at = seed_key(planned, self.drift_seen)
                completion = self.seeded(planned.tree_budget, planned.prompt_id, seed_at)
            sent.append(completion)
            violations = list(self.validate(completion))
            sample = Sample.from_completion(
                completion,
                violations,
                round=planned.round,
                worker=self.worker,
                prompt_id=planned.prompt_id,
            )
            if planned.drift_mark is not None:
                sample = dataclasses.replace(sample, drift_mark=planned.drift_mark)
            if not (planned.warmup and not violations):
                self.samples.append(sample)
                if self.on_sample is not None:
                    self.on_sample(sample)
            out.append((sample, not violations))
        if self.watch is not None:
            self.watch.end(*key, sent)
        return out


def _visit(plan: SweepPlan, rnd: int, budget: int, warmup: bool = False) -> list[PlannedRequest]:
    return [PlannedRequest(rnd, budget, p, warmup) for p in plan.prompts]


def run_adaptive_sweep(
    plan: SweepPlan,
    rule: RaceRule,
    request: Callable[[int, str], Completion],
    validate: Callable[[Completion], Sequence[Violation]],
    *,
    worker: str | None = None,
    on_sample: Callable[[Sample], None] | None = None,
    watch: GroupWatch | None = None,
    seeded: Callable[[int, str, str], Completion] | None = None,
    excluded: Mapping[int | None, Why] | None = None,
) -> tuple[list[Sample], Race[int | None]]:
    """Race ``plan.budgets`` under ``rule``; the samples and the finished race.

    ``plan.rounds`` is not used: the race stops when it is decided or when
    ``rule.max_requests`` would be exceeded. ``seeded`` is as in
    :func:`~pytest_ddtree.measure.sweep.plan.run_sweep`: each request's seed key. ``excluded``
    budgets (with why) leave before the first round.
    """
    run = _Runner(request, validate, worker, on_sample, watch, seeded)
    race: Race[int | None] = Race(plan.budgets, rule, per_lap=len(plan.prompts), seed=plan.seed)
    for budget, why in (excluded or {}).items():
        if budget in plan.budgets:  # e.g. not lossless: never timed, never a winner
            race.exclude(budget, why)
    for r in range(-plan.warmup_rounds, 0):
        for budget in plan.budget_order(r):
            for sample, ok in run.group(_visit(plan, r, budget, warmup=True)):
                if not ok:
                    race.exclude(budget, _invalid(sample))
    blocks = plan.drift_repeats
    start = [
        PlannedRequest(0, plan.first_budget, p, False, "start")
        for _ in range(blocks)
        for p in plan.prompts
    ]
    run.group(start)
    rnd = 0
    while keys := race.next_lap():
        for budget in (b for b in plan.budget_order(rnd) if b in keys):
            for sample, ok in run.group(_visit(plan, rnd, budget)):
                if not ok:
                    race.count()
                    race.exclude(budget, _invalid(sample))
                elif sample.decode_tokens_per_second is None:
                    race.count()  # valid but untimed (too short to time): spent, no value
                else:
                    race.add(budget, sample.decode_tokens_per_second, sample.prompt_id)
        rnd += 1
    end = [
        PlannedRequest(rnd, plan.first_budget, p, False, "end")
        for _ in range(blocks)
        for p in plan.prompts
    ]
    run.group(end)
    return run.samples, race


def _invalid(sample: Sample) -> Why:
    return Why("invalid", count=1, codes=sample.codes or ("invalid",), text=sample.prompt_id)
