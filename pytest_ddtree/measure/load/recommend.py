"""The best tree budget at each load point, and the schedule they make.

At each load point the valid budgets (every request valid, none excluded) are
ranked by median TPOT, lower first: at a fixed concurrency the per-request
decode rate and the aggregate throughput rank budgets the same way. The best
budget comes with a bootstrap confidence interval of its median TPOT, and with
the relative difference to the runner-up; when that interval includes zero the
choice is a tie at this noise and says so, and so it does below the race's
minimum n (no claim of a faster budget on a handful of requests). Statistics
reuse ``sweep``'s seeded bootstrap helpers, so the same samples always give the
same schedule.

Where the budgets were raced (``--ddtree-sweep adaptive``, see ``load.race``)
the choice is the race's: the smallest budget within the practical margin of
the leader once the race is decided, and none ("undecided") when the point's
request budget was spent first.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.measure.load.arrivals import LoadPoint
from pytest_ddtree.measure.load.metrics import PointStats
from pytest_ddtree.measure.load.race import PointRace
from pytest_ddtree.measure.sweep import bootstrap_median_ci, bootstrap_median_difference
from pytest_ddtree.measure.sweep.race import DEFAULT_MIN_N

__all__ = ["Choice", "Schedule", "recommend"]


@dataclass(frozen=True)
class Choice:
    """The recommendation at one load point.

    ``tree_budget`` None is the server's own budget (``--ddtree-budget-mode none``)
    when ``chosen``; ``chosen`` False means no budget had every request valid
    there. The runner-up is told apart the same way by ``has_runner_up``.
    """

    point: LoadPoint
    tree_budget: int | None
    tpot_ms: float | None
    ci_ms: tuple[float, float] | None
    runner_up: int | None = None
    margin: tuple[float, float, float] | None = None
    excluded: tuple[int | None, ...] = ()
    unreliable: bool = False
    chosen: bool = True
    has_runner_up: bool = False
    #: TPOT values behind the chosen budget's interval, and behind the runner-up's
    n: int = 0
    runner_up_n: int = 0
    #: the race at this point (``--ddtree-sweep adaptive``); None when run in full
    race: PointRace | None = None
    #: why no budget was chosen (empty when one was): the summary says it as it is
    why_none: str = ""

    @property
    def undecided(self) -> bool:
        """The point's race spent its request budget (or was interrupted) without a winner."""
        return self.race is not None and not self.race.decided

    @property
    def label(self) -> str | None:
        """The chosen budget as tables name it (``64``, ``server-default``); None if none."""
        return budget_label(self.tree_budget) if self.chosen else None

    @property
    def runner_up_label(self) -> str | None:
        """The runner-up as tables name it; None when there is none."""
        return budget_label(self.runner_up) if self.has_runner_up else None

    @property
    def decisive(self) -> bool:
        """True when the runner-up is slower beyond the confidence interval (or absent)."""
        if not self.has_runner_up:
            return self.chosen
        if min(self.n, self.runner_up_n) < DEFAULT_MIN_N:
            return False  # too few requests for any claim
        return self.margin is not None and self.margin[1] > 0

    def to_json(self) -> dict[str, Any]:
        """Plain JSON."""
        return {
            "point": jsonmodel.to_json(self.point),
            "label": self.point.label,
            "chosen": self.chosen,
            "tree_budget": self.tree_budget,
            "budget_label": self.label,
            "tpot_ms": self.tpot_ms,
            "ci_ms": list(self.ci_ms) if self.ci_ms else None,
            "n": self.n,
            "runner_up": self.runner_up,
            "runner_up_label": self.runner_up_label,
            "runner_up_slower": list(self.margin) if self.margin else None,
            "runner_up_n": self.runner_up_n,
            "decisive": self.decisive,
            "excluded": list(self.excluded),
            "unreliable": self.unreliable,
            "undecided": self.undecided,
            "race": self.race.to_json() if self.race is not None else None,
            "why_none": self.why_none or None,
        }


@dataclass(frozen=True)
class Schedule:
    """Choices per load point, in load order, and the schedule string."""

    choices: tuple[Choice, ...]

    @property
    def changes_with_load(self) -> bool:
        """True when the best budget is not the same at every load point."""
        return len({c.label for c in self.choices if c.chosen}) > 1

    def how(self) -> str:
        """How the choice varies with load, in words: ``changes with load``, ``same at every
        load point``, or how many points the race left undecided."""
        undecided = sum(1 for c in self.choices if c.undecided and not c.chosen)
        points = sum(1 for c in self.choices if c.chosen or c.undecided)
        if points == 0:
            return "no point has a valid budget"
        if self.changes_with_load:
            what = "changes with load"
        elif undecided == points:
            return "undecided at every load point"
        else:
            what = "same at every decided load point" if undecided else "same at every load point"
        return f"{what}; undecided at {undecided} of {points}" if undecided else what

    def text(self) -> str:
        """``C<=4: 128, C<=16: 64, C>16: 16`` (``rate<=2/s: ...`` for rates); one per mode."""
        parts: list[str] = []
        for mode in ("concurrency", "rate"):
            picks = [c for c in self.choices if c.point.mode == mode and (c.chosen or c.undecided)]
            if not picks:
                continue
            name, unit = ("C", "") if mode == "concurrency" else ("rate", "/s")
            groups: list[tuple[float, str | None]] = []  # (highest value, budget label)
            for c in picks:
                label = c.label or "undecided"
                if groups and groups[-1][1] == label:
                    groups[-1] = (c.point.value, label)
                else:
                    groups.append((c.point.value, label))
            if len(groups) == 1:
                parts.append(f"all {name}: {groups[0][1]}")
                continue
            for i, (top, budget) in enumerate(groups):
                if i < len(groups) - 1:
                    parts.append(f"{name}<={top:g}{unit}: {budget}")
                else:
                    parts.append(f"{name}>{groups[i - 1][0]:g}{unit}: {budget}")
        return ", ".join(parts) if parts else "no valid budget"

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
        return {
            "schedule": self.text(),
            "changes_with_load": self.changes_with_load,
            "points": [c.to_json() for c in self.choices],
        }


def _eligible(s: PointStats) -> bool:
    return s.invalid == 0 and s.tpot is not None and len(s.tpot_values) >= 1


def recommend(
    stats: Sequence[PointStats], *, seed: int = 0, races: Sequence[PointRace] = ()
) -> Schedule:
    """The best budget at each load point (see the module docstring)."""
    by_point: dict[LoadPoint, list[PointStats]] = {}
    for s in stats:
        by_point.setdefault(s.point, []).append(s)
    raced = {r.point: r for r in races}
    choices: list[Choice] = []
    for point in sorted(by_point, key=lambda p: (p.mode, p.value, p.burstiness)):
        group = by_point[point]
        ok = [s for s in group if _eligible(s)]
        excluded = tuple(s.tree_budget for s in group if not _eligible(s))
        unreliable = any(s.unreliable for s in group)
        race = raced.get(point)
        ranked = sorted(ok, key=_by_median)
        if race is not None:
            ranked = [s for s in ok if s.tree_budget == race.recommended] if race.decided else []
            ranked += sorted((s for s in ok if s not in ranked), key=_by_median)
        if not ranked or (race is not None and not race.decided):
            choices.append(
                Choice(
                    point,
                    None,
                    None,
                    None,
                    excluded=excluded,
                    unreliable=unreliable,
                    chosen=False,
                    race=race,
                    why_none=_why_none(group) if not ranked else "",
                )
            )
            continue
        choices.append(_choice(point, ranked, excluded, unreliable, race, seed))
    return Schedule(tuple(choices))


#: why no budget is best at a point, by what the budgets lacked
NO_VALID = "no budget had every request valid"
NO_COUNTS = "no token counts: the server sent no usage and no token counter counted the answers"
NO_TPOT = "no TPOT: no valid answer had a token after its first event"


def _why_none(group: Sequence[PointStats]) -> str:
    """Why none of a point's budgets could be ranked (none was eligible)."""
    whole = [s for s in group if s.invalid == 0]
    if not whole:
        return NO_VALID
    why = NO_COUNTS if all(s.valid and s.uncounted == s.valid for s in whole) else NO_TPOT
    if len(whole) < len(group):
        why += f"; the other {len(group) - len(whole)} budget(s) had invalid requests"
    return why


def _by_median(s: PointStats) -> tuple[float, int]:
    return statistics.median(s.tpot_values), -(s.tree_budget or 0)


def _choice(
    point: LoadPoint,
    ranked: Sequence[PointStats],
    excluded: tuple[int | None, ...],
    unreliable: bool,
    race: PointRace | None,
    seed: int,
) -> Choice:
    """The choice of ``ranked[0]``, its median's interval, and its difference to ``ranked[1]``."""
    best = ranked[0]
    med = statistics.median(best.tpot_values)
    ci = bootstrap_median_ci(best.tpot_values, seed=seed, salt=("load", point.label))
    runner = ranked[1] if len(ranked) > 1 else None
    margin = None
    if runner is not None:
        margin = bootstrap_median_difference(
            best.tpot_values,
            runner.tpot_values,
            seed=seed,
            relative=True,
            salt=("load-diff", point.label),
        )
    return Choice(
        point,
        best.tree_budget,
        med * 1000,
        (ci[0] * 1000, ci[1] * 1000) if ci else None,
        runner.tree_budget if runner is not None else None,
        margin,
        excluded,
        unreliable,
        has_runner_up=runner is not None,
        n=len(best.tpot_values),
        runner_up_n=len(runner.tpot_values) if runner is not None else 0,
        race=race,
    )
