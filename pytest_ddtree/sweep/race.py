"""Racing: spend requests where they decide.

A race compares *arms* (tree budgets, or the budgets of one load point) by the
median of one per-request figure (decode tokens/s, higher is better; TPOT,
lower is better). Every arm first gets :attr:`RaceRule.min_n` requests. From
then on, after each round, every arm is compared with the *leader* (the arm
with the best median) by a seeded bootstrap interval of the relative
difference of the medians, expressed as a *slowdown* (positive: the arm is
slower than the leader):

- **out**: the arm is clearly slower (the whole interval lies above zero)
  and by more than the practical margin (the estimate lies above it). It
  leaves the race and gets no more requests.
- **as fast**: the whole interval lies within plus or minus the margin - the
  arm is as fast as the leader for every practical purpose.
- **in contention**: anything else; it gets the next round.

The race is *decided* when no arm is in contention. It then recommends the
**smallest** budget among the leader and the arms as fast as it: a win inside
the margin is no reason to deploy a bigger tree, which costs more verification
under load. When the request budget is spent first, the race is *undecided*
and says which arms were still in contention; it never forces a winner.

The same rule judges an exhaustive sweep (:func:`judge` on all its samples),
so both modes recommend by one rule. Nothing here knows about pytest, HTTP or
budgets' meaning: keys are opaque (a budget, or None for the server's own).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pytest_ddtree.sweep.statistics import bootstrap_median_difference

__all__ = [
    "DEFAULT_EQUIVALENCE",
    "DEFAULT_MIN_N",
    "Exit",
    "Judgement",
    "Race",
    "RaceRule",
    "Standing",
    "judge",
]

K = TypeVar("K", bound=Hashable)

#: The practical margin: budgets within 2% of the best are as fast.
DEFAULT_EQUIVALENCE = 0.02
#: Requests an arm gets before any claim about it (and the least n behind a "faster").
DEFAULT_MIN_N = 6
#: Resamples per comparison inside a race (looks happen every round, so fewer than a report's).
RACE_RESAMPLES = 1000

Status = Literal["leader", "as fast", "out", "in contention", "excluded"]


@dataclass(frozen=True)
class RaceRule:
    """The parameters of a race: margin, minimum n, confidence, and the request budget.

    ``equivalence`` is a fraction (0.02 is 2%), within (0, 0.5).
    ``max_requests`` None means no budget (an exhaustive sweep).
    """

    equivalence: float = DEFAULT_EQUIVALENCE
    min_n: int = DEFAULT_MIN_N
    confidence: float = 0.95
    max_requests: int | None = None
    higher_is_better: bool = True
    resamples: int = RACE_RESAMPLES

    def __post_init__(self) -> None:
        e = self.equivalence
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 < e < 0.5:
            raise ValueError(f"race: equivalence must be within (0, 0.5), got {e!r}")
        if isinstance(self.min_n, bool) or not isinstance(self.min_n, int) or self.min_n < 2:
            raise ValueError(f"race: min_n must be an integer >= 2, got {self.min_n!r}")
        if not 0.5 < self.confidence < 1:
            raise ValueError(f"race: confidence must be within (0.5, 1), got {self.confidence!r}")
        if self.max_requests is not None and self.max_requests < 1:
            raise ValueError(f"race: max_requests must be >= 1, got {self.max_requests!r}")


@dataclass(frozen=True)
class Standing(Generic[K]):
    """Where one arm stands: its n, its median, and its slowdown against the leader.

    ``slowdown`` is ``(estimate, low, high)`` of the relative difference of the
    medians, positive when this arm is slower (None for the leader, or below
    two values on either side).
    """

    key: K
    n: int
    median: float | None
    status: Status
    slowdown: tuple[float, float, float] | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON."""
        return {
            "key": self.key,
            "n": self.n,
            "median": self.median,
            "status": self.status,
            "slowdown": None if self.slowdown is None else list(self.slowdown),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Exit(Generic[K]):
    """An arm that left the race: when (after how many requests in all, which round) and why."""

    key: K
    round: int
    after_requests: int
    n: int
    status: Status
    slowdown: tuple[float, float, float] | None
    leader: K | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        """Plain JSON."""
        return {
            "key": self.key,
            "round": self.round,
            "after_requests": self.after_requests,
            "n": self.n,
            "status": self.status,
            "slowdown": None if self.slowdown is None else list(self.slowdown),
            "leader": self.leader,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Judgement(Generic[K]):
    """The state of a race (or the verdict on an exhaustive sweep).

    ``recommended`` is the smallest key among the leader and the arms as fast
    as it, set only when ``decided``. ``standings`` are in key order.
    """

    standings: tuple[Standing[K], ...]
    leader: K | None
    decided: bool
    recommended: K | None
    rule: RaceRule

    @property
    def contending(self) -> tuple[K, ...]:
        """Arms still in contention (the leader is not counted)."""
        return tuple(s.key for s in self.standings if s.status == "in contention")

    @property
    def as_fast(self) -> tuple[K, ...]:
        """Arms as fast as the leader within the margin (the leader not counted)."""
        return tuple(s.key for s in self.standings if s.status == "as fast")

    def standing(self, key: K) -> Standing[K]:
        """The standing of one arm."""
        for s in self.standings:
            if s.key == key:
                return s
        raise KeyError(key)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON."""
        return {
            "leader": self.leader,
            "decided": self.decided,
            "recommended": self.recommended,
            "equivalence": self.rule.equivalence,
            "min_n": self.rule.min_n,
            "confidence": self.rule.confidence,
            "standings": [s.to_json() for s in self.standings],
        }


def _order(key: Any) -> tuple[int, Any]:
    # None (the server's own budget) sorts first; otherwise the keys' own order
    return (0, 0) if key is None else (1, key)


@dataclass
class _Arm:
    values: list[float] = field(default_factory=list)
    strata: list[str] = field(default_factory=list)
    excluded: str | None = None


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def _interval(d: tuple[float, float, float]) -> str:
    return f"{_pct(d[0])} [{_pct(d[1])}, {_pct(d[2])}]"


def _slowdown(
    arm: _Arm, leader: _Arm, rule: RaceRule, seed: int, salt: str
) -> tuple[float, float, float] | None:
    diff = bootstrap_median_difference(
        leader.values,
        arm.values,
        seed=seed,
        resamples=rule.resamples,
        confidence=rule.confidence,
        relative=True,
        salt=salt,
        strata_a=leader.strata,
        strata_b=arm.strata,
    )
    if diff is None:
        return None
    est, lo, hi = diff  # median(arm) / median(leader) - 1
    if rule.higher_is_better:
        return -est, -hi, -lo
    return est, lo, hi


def _judge(
    arms: Mapping[K, _Arm], rule: RaceRule, *, seed: int, frozen: Mapping[K, Standing[K]]
) -> Judgement[K]:
    """Judge every arm against the leader; ``frozen`` arms keep the standing they left with."""
    live = {k: a for k, a in arms.items() if a.excluded is None and a.values and k not in frozen}
    sign = 1.0 if rule.higher_is_better else -1.0
    leader: K | None = None
    if live:
        leader = min(live, key=lambda k: (-sign * statistics.median(live[k].values), _order(k)))
    standings: list[Standing[K]] = []
    for key in sorted(arms, key=_order):
        arm = arms[key]
        median = statistics.median(arm.values) if arm.values else None
        if key in frozen:
            standings.append(frozen[key])
            continue
        if arm.excluded is not None:
            standings.append(Standing(key, len(arm.values), median, "excluded", None, arm.excluded))
            continue
        if key == leader:
            standings.append(Standing(key, len(arm.values), median, "leader"))
            continue
        if leader is None or not arm.values:
            standings.append(Standing(key, len(arm.values), median, "in contention"))
            continue
        standings.append(_standing(key, arm, arms[leader], leader, rule, seed))
    decided = leader is not None and not any(s.status == "in contention" for s in standings)
    recommended: K | None = None
    if decided:
        pool = [s.key for s in standings if s.status in ("leader", "as fast")]
        recommended = min(pool, key=_order)
    return Judgement(tuple(standings), leader, decided, recommended, rule)


def _standing(key: K, arm: _Arm, lead: _Arm, leader: K, rule: RaceRule, seed: int) -> Standing[K]:
    n = len(arm.values)
    median = statistics.median(arm.values)
    if n < rule.min_n or len(lead.values) < rule.min_n:
        return Standing(key, n, median, "in contention", None, f"n={n} below the minimum")
    d = _slowdown(arm, lead, rule, seed, f"race:{leader}:{key}:{n}:{len(lead.values)}")
    m = rule.equivalence
    if d is None or not all(math.isfinite(x) for x in d):
        return Standing(key, n, median, "in contention", d, "no interval")
    conf = f"{round(100 * rule.confidence)}%"
    if d[1] > 0 and d[0] > m:
        why = f"slower than the leader by {_interval(d)} ({conf}), more than the {m:.0%} margin"
        return Standing(key, n, median, "out", d, why)
    if -m < d[1] and d[2] < m:
        why = f"within the {m:.0%} margin of the leader: {_interval(d)} ({conf})"
        return Standing(key, n, median, "as fast", d, why)
    return Standing(
        key, n, median, "in contention", d, f"{_interval(d)} ({conf}) crosses the margin"
    )


def judge(
    samples: Mapping[K, Sequence[tuple[float, str]]],
    rule: RaceRule | None = None,
    *,
    seed: int = 0,
    excluded: Mapping[K, str] | None = None,
) -> Judgement[K]:
    """Judge arms measured in full (an exhaustive sweep) by the race's rule.

    ``samples`` maps each key to its ``(value, stratum)`` pairs (the stratum is
    the prompt id: resampling stays within prompts); ``excluded`` maps keys to
    why they may not win (an invalid request).
    """
    rule = rule or RaceRule()
    arms = {k: _Arm([v for v, _ in vs], [s for _, s in vs]) for k, vs in samples.items()}
    for k, why in (excluded or {}).items():
        arms.setdefault(k, _Arm()).excluded = why
    return _judge(arms, rule, seed=seed, frozen={})


class Race(Generic[K]):
    """A race in progress: which arms get the next round, and the log of who left when.

    The driver asks :meth:`next_round` for the arms to measure, measures each
    ``per_round`` times (once per prompt), :meth:`add` s the values, and asks
    again; an empty answer ends the race. :meth:`judgement` is the verdict.
    """

    def __init__(
        self,
        keys: Iterable[K],
        rule: RaceRule | None = None,
        *,
        per_round: int = 1,
        seed: int = 0,
    ) -> None:
        self.rule = rule or RaceRule()
        if per_round < 1:
            raise ValueError(f"race: per_round must be >= 1, got {per_round!r}")
        self.per_round = per_round
        self.seed = seed
        self._arms: dict[K, _Arm] = {k: _Arm() for k in keys}
        if not self._arms:
            raise ValueError("race: no arm to race")
        self._frozen: dict[K, Standing[K]] = {}
        self.exits: list[Exit[K]] = []
        self.requests = 0
        self.rounds = 0
        self.spent = False
        self._last: Judgement[K] | None = None

    @property
    def min_rounds(self) -> int:
        """Rounds every arm gets before any arm may leave."""
        return -(-self.rule.min_n // self.per_round)

    def add(self, key: K, value: float, stratum: str = "") -> None:
        """One measured request of arm ``key`` (a valid one; see :meth:`exclude`)."""
        arm = self._arms[key]
        arm.values.append(float(value))
        arm.strata.append(stratum)
        self.requests += 1
        self._last = None

    def count(self, n: int = 1) -> None:
        """Requests that were spent without a value (invalid answers): they use the budget."""
        self.requests += n

    def exclude(self, key: K, reason: str) -> None:
        """Arm ``key`` had an invalid request: it leaves the race and may not win."""
        arm = self._arms[key]
        if arm.excluded is None and key not in self._frozen:
            arm.excluded = reason
            self._leave(Standing(key, len(arm.values), None, "excluded", None, reason), None)
        self._last = None

    def judgement(self) -> Judgement[K]:
        """The verdict on what was measured so far."""
        if self._last is None:
            self._last = _judge(self._arms, self.rule, seed=self.seed, frozen=self._frozen)
        return self._last

    def _leave(self, s: Standing[K], leader: K | None) -> None:
        self._frozen[s.key] = s
        self.exits.append(
            Exit(s.key, self.rounds, self.requests, s.n, s.status, s.slowdown, leader, s.reason)
        )

    def next_round(self) -> list[K]:
        """The arms to measure next (in key order); empty when the race is over."""
        live = [k for k in sorted(self._arms, key=_order) if k not in self._frozen]
        if self.rounds < self.min_rounds:
            keys = live
        else:
            j = self.judgement()
            if j.decided or not live:
                return []
            for s in j.standings:
                if s.status == "out" and s.key not in self._frozen:
                    self._leave(s, j.leader)
            self._last = None
            j = self.judgement()
            if j.decided:
                return []
            keys = [
                s.key for s in j.standings if s.status in ("leader", "in contention", "as fast")
            ]
        cost = len(keys) * self.per_round
        if self.rule.max_requests is not None and self.requests + cost > self.rule.max_requests:
            self.spent = True
            return []
        self.rounds += 1
        return keys
