"""The one decision rule: which arm to deploy, for the serial sweep and every load point.

Every path of the measurement ends in the race's verdict on its arms
(:mod:`pytest_ddtree.measure.sweep.race`): the serial sweep and each load point, raced
(``--ddtree-sweep adaptive``) or measured in full (an exhaustive run is judged by
:func:`~pytest_ddtree.measure.sweep.race.judge`, the same rule at one look). Each arm
stands against the leader as ``leader``, ``as fast``, ``out`` (clearly slower),
``in contention`` or ``excluded``; :func:`decide` reads those standings the one way and
returns a typed :class:`Decision` with no sentence in it (the report words it):

- **recommended**: no arm is in contention; the smallest arm as fast as the leader
  within the margin is named (a bigger tree costs more verification under load).
- **tied**: arms are still in contention, but each arm that cannot be told apart from
  the leader had the rule's minimum n and every other valid arm is clearly slower: the
  set is the answer (deploy either), though the rule names no single arm.
- **undecided**: arms are still in contention; none is named (no winner is forced).
- **nothing valid**: no arm had valid timed requests.

The figure the rule judges is the decode rate of each request (tokens/s after the first
content event, ``wire.completion.decode_rate``) on the serial sweep, on a load point run in
full and on a raced load point (``measure.load.race``) alike: the same samples give the same
decision whichever path reads them, and the load's tables show its inverse, TPOT.
No pytest here, and no words.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic, Literal, TypeVar

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep.race import (
    Judgement,
    Mode,
    RaceRecord,
    RaceRule,
    Standing,
    Why,
    exhaustive_record,
    judge,
)

__all__ = ["Decision", "Flags", "Status", "decide", "decide_record", "judge_samples"]

K = TypeVar("K", bound=Hashable)

Status = Literal["recommended", "tied", "undecided", "nothing valid"]


@dataclass(frozen=True)
class Flags:
    """What qualifies a decision without changing the rule's verdict."""

    #: the server changed while the arms were measured (the drift check)
    drifting: bool = False
    #: the run was interrupted: the decision covers what ran
    partial: bool = False
    #: the client was saturated or stalled while some of the timings were taken
    client_saturated: bool = False
    #: no answer carried the speculative statistics asked for (is speculation on?)
    no_speculative_statistics: bool = False
    #: the server does not use the tree budget it is sent: no budget can be recommended
    budget_ignored: bool = False


def _order(key: object) -> tuple[int, object]:
    # None (the server's own budget) sorts first, as the race orders its keys
    return (0, 0) if key is None else (1, key)


@dataclass(frozen=True)
class Decision(Generic[K]):
    """The rule's answer among a set of arms, as data.

    ``arms`` are the arms the decision names: the recommended one (``recommended``), the
    set to deploy either of, smallest first (``tied``), the leader and the arms still in
    contention with it (``undecided``), or none (``nothing valid``). ``as_fast`` are the
    other arms within the margin of the leader (the leader among them when it is not the
    recommended arm); ``slower`` those clearly slower; ``excluded`` those with a request
    against them. ``n`` counts the timed values behind the first named arm (the leader
    when none is named). ``margin``, ``confidence`` and ``min_n`` are the rule's.
    """

    status: Status
    arms: tuple[K, ...]
    leader: K | None
    n: int
    margin: float
    confidence: float
    min_n: int
    mode: Mode = "exhaustive"
    as_fast: tuple[K, ...] = ()
    slower: tuple[K, ...] = ()
    excluded: tuple[K, ...] = ()
    #: requests the decision spent, of its request budget (None: no budget, run in full)
    requests: int = 0
    max_requests: int | None = None
    #: the request budget was spent before the rule could decide
    spent: bool = False
    flags: Flags = field(default_factory=Flags)

    @property
    def names_one(self) -> bool:
        """The rule named one arm to deploy (and nothing set it aside: the budget is used)."""
        return self.status == "recommended" and not self.flags.budget_ignored

    @property
    def chosen(self) -> K | None:
        """The recommended arm (None when none is: ``names_one`` tells it from the server's
        own budget, whose key is None)."""
        return self.arms[0] if self.names_one else None

    @property
    def has_leader(self) -> bool:
        """Some arm had valid timings (its key may be None)."""
        return self.status != "nothing valid"

    @property
    def decisive(self) -> bool:
        """One arm is named, on a whole run with a steady server."""
        return self.names_one and not (self.flags.partial or self.flags.drifting)

    def flagged(self, **flags: bool) -> Decision[K]:
        """The same decision with ``flags`` set (``partial=True``, ...)."""
        return replace(self, flags=replace(self.flags, **flags))


jsonmodel.register(Flags, read=False)
jsonmodel.register(
    Decision,
    read=False,  # recomputed from the samples when a file is read
    derived={"decisive": lambda d: d.decisive},
)


def _tie_set(standings: Sequence[Standing[K]], rule: RaceRule) -> tuple[K, ...]:
    """The arms an undecided rule can still name together: the leader and those in
    contention with it, when each had the minimum n and every other valid arm was left as
    clearly slower (so the set excludes something); else ()."""
    open_ = [s for s in standings if s.status == "in contention"]
    rest = [s for s in standings if s.status in ("as fast", "out")]
    if not open_ or not rest or any(s.status != "out" for s in rest):
        return ()
    lead = [s for s in standings if s.status == "leader"]
    if any(s.n < rule.min_n for s in (*lead, *open_)):
        return ()
    return tuple(sorted((s.key for s in (*lead, *open_)), key=_order))


def decide(
    judgement: Judgement[K],
    *,
    mode: Mode = "exhaustive",
    requests: int = 0,
    spent: bool = False,
    flags: Flags | None = None,
) -> Decision[K]:
    """The decision of ``judgement`` (a race's last look, or an exhaustive run's verdict)."""
    rule, st = judgement.rule, judgement.standings

    def keys(*status: str) -> tuple[K, ...]:
        return tuple(s.key for s in st if s.status in status)

    base: Decision[K] = Decision(
        "nothing valid",
        (),
        None,
        0,
        rule.equivalence,
        rule.confidence,
        rule.min_n,
        mode,
        slower=keys("out"),
        excluded=keys("excluded"),
        requests=requests,
        max_requests=rule.max_requests,
        spent=spent,
        flags=flags or Flags(),
    )
    lead = [s for s in st if s.status == "leader"]
    if not lead:
        return base
    leader = lead[0]
    if not keys("in contention"):
        pool = sorted(keys("leader", "as fast"), key=_order)
        best = next(s for s in st if s.key == pool[0])
        return replace(
            base,
            status="recommended",
            arms=(best.key,),
            leader=leader.key,
            n=best.n,
            as_fast=tuple(pool[1:]),
        )
    tied = _tie_set(st, rule)
    if tied:
        return replace(base, status="tied", arms=tied, leader=leader.key, n=leader.n)
    return replace(
        base,
        status="undecided",
        arms=(leader.key, *keys("in contention")),
        leader=leader.key,
        n=leader.n,
        as_fast=keys("as fast"),
    )


def decide_record(record: RaceRecord[K], flags: Flags | None = None) -> Decision[K]:
    """The decision of a race's record (adaptive or exhaustive)."""
    return decide(
        record.judgement,
        mode=record.mode,
        requests=record.requests,
        spent=record.spent,
        flags=flags,
    )


def judge_samples(
    samples: Sequence[Sample], rule: RaceRule | None = None
) -> RaceRecord[int | None]:
    """The exhaustive verdict on timed samples, arms by requested tree budget.

    Each budget's valid decode rates race by prompt; a budget with a request held against
    it (``Sample.against_budget``) is excluded. The serial sweep and a load point measured
    in full are judged by this one function.
    """
    values: dict[int | None, list[tuple[float, str]]] = {}
    bad: dict[int | None, int] = {}
    for s in samples:
        if s.against_budget:
            bad[s.tree_budget] = bad.get(s.tree_budget, 0) + 1
        elif s.valid and s.decode_tokens_per_second is not None:
            values.setdefault(s.tree_budget, []).append((s.decode_tokens_per_second, s.prompt_id))
    excluded = {b: Why("invalid", count=n) for b, n in bad.items()}
    timed = {b: v for b, v in values.items() if b not in excluded}
    return exhaustive_record(judge(timed, rule, excluded=excluded))
