"""The best tree budget at each load point, and the schedule they make.

Each load point is decided by the one rule (:mod:`pytest_ddtree.measure.sweep.decision`),
as the serial sweep is: the budgets' decode rates (whose inverse the tables show as TPOT)
are judged by the race's rule, a point measured in full at one look
(:func:`~pytest_ddtree.measure.sweep.decision.judge_samples`) and a raced point
(``--ddtree-sweep adaptive``, see ``load.race``) by its race's last look. Among the budgets
with every request valid, the smallest as fast as the leader within the margin is
recommended; below the rule's minimum n, or while a budget's interval still crosses the
margin, no budget is named (undecided, never a forced winner). The same samples give the
same decision on the serial and the loaded path. No words here: ``report.decision_text``
says them.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.measure.arm import ArmStats
from pytest_ddtree.measure.load.arrivals import LoadPoint
from pytest_ddtree.measure.load.race import PointRace
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep import bootstrap_median_ci
from pytest_ddtree.measure.sweep.decision import Decision, Flags, decide, judge_samples
from pytest_ddtree.measure.sweep.race import (
    DEFAULT_EQUIVALENCE,
    Judgement,
    RaceRule,
    Standing,
)

__all__ = ["Choice", "NoneWhy", "Schedule", "recommend"]


@dataclass(frozen=True)
class NoneWhy:
    """Why no budget could be ranked at a load point: none had every request valid (``no
    valid``), the valid ones had no token counts (``no counts``) or no token after their first
    event (``no tpot``); ``invalid`` other budgets had invalid requests."""

    kind: Literal["no valid", "no counts", "no tpot"]
    invalid: int = 0


@dataclass(frozen=True)
class Choice:
    """The decision at one load point, with the figures of the budget it names.

    ``decision`` is the one rule's; ``tpot_ms`` and ``ci_ms`` the median TPOT of the budget
    it names (the leader's when it names none) and its interval; ``standings`` each
    budget's place against the leader (a point run in full; a raced point's are in
    ``race``); ``why_none`` why no budget could be ranked at all.
    """

    point: LoadPoint
    decision: Decision[int | None]
    tpot_ms: float | None = None
    ci_ms: tuple[float, float] | None = None
    unreliable: bool = False
    #: the race at this point (``--ddtree-sweep adaptive``); None when run in full
    race: PointRace | None = None
    #: why no budget could be ranked at all (None when one could); the report words it
    why_none: NoneWhy | None = None
    standings: tuple[Standing[int | None], ...] = ()

    @property
    def chosen(self) -> bool:
        """The rule named one budget here."""
        return self.decision.names_one

    @property
    def tree_budget(self) -> int | None:
        """The chosen budget (None: the server's own, or none: see ``chosen``)."""
        return self.decision.chosen

    @property
    def n(self) -> int:
        """The timed values behind the named budget (the leader's when none is named)."""
        return self.decision.n

    @property
    def excluded(self) -> tuple[int | None, ...]:
        """Budgets with a request against them here."""
        return self.decision.excluded

    @property
    def undecided(self) -> bool:
        """Valid budgets that the rule could not tell apart yet (a tied set included)."""
        return self.decision.status in ("undecided", "tied")

    @property
    def label(self) -> str | None:
        """The answer as tables name it: ``64``, ``server-default``, ``16 or 64`` (a tied
        set); None when no budget is named."""
        d = self.decision
        if d.names_one:
            return budget_label(d.chosen)
        if d.status == "tied":
            return " or ".join(budget_label(b) for b in d.arms)
        return None

    @property
    def decisive(self) -> bool:
        """One budget named, on a whole run with a steady server and client."""
        return self.decision.decisive and not self.unreliable

    def to_json(self) -> dict[str, Any]:
        """Plain JSON."""
        return dict(jsonmodel.to_json(self))


jsonmodel.register(
    Choice,
    read=False,
    # sweep.json's "why_none" is its words, written by the report
    why_none=jsonmodel.override(omit=True),
    # generic records: written by their own registered form
    decision=jsonmodel.override(unstruct_hook=jsonmodel.to_json),
    standings=jsonmodel.override(unstruct_hook=lambda xs: [jsonmodel.to_json(x) for x in xs]),
    derived={
        "label": lambda c: c.point.label,
        "chosen": lambda c: c.chosen,
        "tree_budget": lambda c: c.tree_budget,
        "budget_label": lambda c: c.label,
        "n": lambda c: c.n,
        "decisive": lambda c: c.decisive,
        "excluded": lambda c: list(c.excluded),
        "undecided": lambda c: c.undecided,
    },
    order=(
        *("point", "label", "chosen", "tree_budget", "budget_label", "tpot_ms", "ci_ms", "n"),
        *("decisive", "excluded", "unreliable", "undecided", "decision", "standings", "race"),
    ),
)


@dataclass(frozen=True)
class Schedule:
    """Choices per load point, in load order (``report/load_text.py`` words the schedule:
    ``schedule_text``, ``schedule_how``)."""

    choices: tuple[Choice, ...]

    @property
    def changes_with_load(self) -> bool:
        """True when the best budget is not the same at every load point."""
        return len({c.label for c in self.choices if c.chosen}) > 1

    def choice(self, point: LoadPoint) -> Choice:
        """The choice at ``point``."""
        for c in self.choices:
            if c.point == point:
                return c
        raise KeyError(point.label)

    def best(self, point: LoadPoint) -> int | None:
        """The chosen budget at ``point``: None for the server's own budget, and also when
        no budget was valid there (``choice(point).chosen`` tells the two apart)."""
        return self.choice(point).tree_budget

    def to_json(self) -> dict[str, Any]:
        """Plain JSON."""
        return dict(jsonmodel.to_json(self))


jsonmodel.register(
    Schedule,
    read=False,
    choices=jsonmodel.override(rename="points"),
    # sweep.json's "schedule" (its words) is written first by the report
    derived={"changes_with_load": lambda s: s.changes_with_load},
    order=("changes_with_load", "points"),
)


def _race_judgement(race: PointRace) -> Judgement[int | None]:
    """A raced point's last look, from its record (the race is over: its standings hold)."""
    rule = RaceRule(
        equivalence=race.equivalence,
        min_n=race.min_n,
        confidence=race.confidence,
        max_requests=race.max_requests or None,
    )
    standings = tuple(
        Standing(b, n, None, status, None, reason)  # type: ignore[arg-type]
        for b, n, status, reason in race.standing
    )
    decided = race.outcome != "undecided" and race.recommended is not None
    return Judgement(standings, race.leader, decided, race.recommended, rule)


def _decision(
    point: LoadPoint,
    group: Sequence[Sample],
    race: PointRace | None,
    rule: RaceRule,
    flags: Flags,
) -> tuple[Decision[int | None], tuple[Standing[int | None], ...]]:
    if race is not None:
        d = decide(
            _race_judgement(race),
            mode="adaptive",
            requests=race.requests,
            spent=race.outcome == "undecided",
            flags=flags,
        )
        return d, ()
    record = judge_samples(group, rule)
    return decide(record.judgement, requests=record.requests, flags=flags), (
        record.judgement.standings
    )


def recommend(
    stats: Sequence[ArmStats],
    samples: Sequence[Sample],
    *,
    seed: int = 0,
    races: Sequence[PointRace] = (),
    equivalence: float = DEFAULT_EQUIVALENCE,
) -> Schedule:
    """The decision at each load point (see the module docstring)."""
    by_point: dict[LoadPoint, list[ArmStats]] = {}
    for s in stats:
        by_point.setdefault(s.point, []).append(s)
    raced = {r.point: r for r in races}
    rule = RaceRule(equivalence=equivalence)
    choices: list[Choice] = []
    for point in sorted(by_point, key=lambda p: (p.mode, p.value, p.burstiness)):
        group = by_point[point]
        race = raced.get(point)
        flags = Flags(
            partial=race is not None and race.outcome == "interrupted",
            client_saturated=any(s.unreliable for s in group),
            no_speculative_statistics=all(s.no_spec_stats for s in group),
        )
        mine = [s for s in samples if s.load_point == point]
        d, standings = _decision(point, mine, race, rule, flags)
        named = d.arms[0] if d.status == "recommended" else d.leader
        best = next((s for s in group if s.tree_budget == named), None)
        tpot, ci = _tpot(best, seed) if d.has_leader and best is not None else (None, None)
        why = None if d.has_leader else _why_none(group)
        choices.append(Choice(point, d, tpot, ci, flags.client_saturated, race, why, standings))
    return Schedule(tuple(choices))


def _tpot(best: ArmStats, seed: int) -> tuple[float | None, tuple[float, float] | None]:
    """The median TPOT of ``best`` (ms) and its interval."""
    if not best.tpot_values:
        return None, None
    med = statistics.median(best.tpot_values)
    ci = bootstrap_median_ci(best.tpot_values, seed=seed, salt=("load", best.point.label))
    return med * 1000, (ci[0] * 1000, ci[1] * 1000) if ci else None


def _why_none(group: Sequence[ArmStats]) -> NoneWhy:
    """Why none of a point's budgets could be ranked (none had valid timings)."""
    whole = [s for s in group if s.invalid == 0]
    if not whole:
        return NoneWhy("no valid")
    counted = not all(s.valid and s.uncounted == s.valid for s in whole)
    return NoneWhy("no tpot" if counted else "no counts", len(group) - len(whole))
