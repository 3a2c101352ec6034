"""Racing the tree budgets of one load point (``--ddtree-sweep adaptive``).

At a load point every budget first gets a minimum batch of requests; from
then on only the budgets still in contention get more, a *chunk* at a time,
until the race is decided or the point's request budget is spent. The rule is
the sweep's (:mod:`pytest_ddtree.measure.sweep.race`) on the same figure, each request's
decode rate (higher better; the tables show its inverse, TPOT): a budget leaves once it
is clearly slower than the leader by more than the practical margin, and the smallest
budget as fast as the leader within the margin is recommended. A spent budget is
*undecided*: no winner is forced.

A chunk is sent as one run at the point's load, so it is at least C requests
at a concurrency C (fewer would never reach C in flight; the ``C seen`` column
shows what each budget got), and an eighth of the point's exhaustive requests:
with the default 8 × C requests a chunk is one wave of C, and the race's first
batch (two laps at least) a quarter of the exhaustive count. The request
budget of a point is what the exhaustive grid would send there (budgets ×
requests): racing never costs more.

A raced budget sends each prompt twice in a row (``LoadTester`` picks them), and
the i-th run of every budget the same prompts. A run is one value of the race
(its lap): its requests are in flight together and share the run's conditions,
so the race pairs budgets run by run, never request by request.

An invalid request excludes its budget at the point, as in the exhaustive grid;
a request that hit the client's own limits (a timeout, not sent) excludes it
too, said as that, never as a verdict on the server. No pytest here.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.measure.load.arrivals import LoadPoint
from pytest_ddtree.measure.load.runner import CLIENT_TIMEOUT, NOT_SENT
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep.race import Race, RaceRule, Standing, Why

__all__ = [
    "Left",
    "PointRace",
    "PointRacer",
    "Run",
    "Unraced",
    "chunk_size",
    "race_point",
    "race_rule",
]

Budget = int | None
Outcome = Literal["decided", "undecided", "interrupted"]
#: why an adaptive sweep ran a load test's points in full instead of racing them, as a kind
#: (``split`` over several processes, ``one budget``; empty: it raced, or the sweep is
#: exhaustive); ``report/load_text.py`` ``unraced_text`` words it
Unraced = Literal["", "split", "one budget"]

#: a chunk is at least this share of a point's exhaustive requests per budget (1/8)
CHUNKS_PER_BUDGET = 8


def chunk_size(point: LoadPoint, requests: int) -> int:
    """Requests sent in one run of one budget: at least C, and an eighth of ``requests``."""
    return max(point.concurrency or 1, -(-requests // CHUNKS_PER_BUDGET))


def race_rule(equivalence: float, budgets: int, requests: int) -> RaceRule:
    """The rule of a point's race: the decode rate, as the serial sweep's and a point run in
    full (higher is better), with the exhaustive cost as its request budget."""
    return RaceRule(equivalence=equivalence, max_requests=budgets * requests)


def _said(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """A row written before its reason was data (its words alone, ``reason``): the words kept
    as they were written."""
    if "why" in doc or not doc.get("reason"):
        return doc
    return {**doc, "why": {"kind": "said", "text": doc["reason"]}}


@dataclass(frozen=True)
class Left:
    """A budget that left a point's race: after how many requests at the point, and why."""

    tree_budget: Budget
    after_requests: int
    n: int
    status: str  # "out" (clearly slower) or "excluded" (an invalid or unanswered request)
    why: Why | None


jsonmodel.register(
    Left,
    derived={"budget_label": lambda x: budget_label(x.tree_budget)},
    order=("tree_budget", "budget_label"),
    upgrade=_said,
)


@dataclass(frozen=True)
class PointRace:
    """How the race at one load point went.

    ``requests`` were spent of ``max_requests``; ``recommended`` is set when
    ``outcome`` is ``decided``. ``standing`` holds every budget's last status
    (``leader``, ``as fast``, ``out``, ``in contention``, ``excluded``) with
    its n and reason; ``left`` the budgets that left, in order.
    """

    point: LoadPoint
    budgets: tuple[Budget, ...]
    chunk: int
    min_n: int
    equivalence: float
    confidence: float
    max_requests: int
    requests: int
    outcome: Outcome
    leader: Budget
    recommended: Budget
    left: tuple[Left, ...]
    standing: tuple[tuple[Budget, int, str, Why | None], ...]  # (budget, n, status, why)
    #: runs whose timings did not race: the client was saturated while they ran
    discarded: int = 0

    @property
    def decided(self) -> bool:
        """The race ended with a recommendation."""
        return self.outcome == "decided"

    @property
    def contending(self) -> tuple[Budget, ...]:
        """Budgets still in contention (with the leader) when the race stopped undecided."""
        if self.decided:
            return ()
        return tuple(
            b for b, _, status, _ in self.standing if status in ("leader", "in contention")
        )

    @property
    def saved(self) -> int:
        """Requests not spent against the point's budget (the exhaustive cost)."""
        return self.max_requests - self.requests

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (sweep.json and the xdist payload)."""
        return jsonmodel.to_json(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> PointRace:
        """Inverse of :meth:`to_json`; a bad value raises one ``ValueError`` line."""
        return jsonmodel.from_json(cls, doc, source="load race")


def _standing_json(
    standing: tuple[tuple[Budget, int, str, Why | None], ...],
) -> list[dict[str, Any]]:
    return [
        {"tree_budget": b, "n": n, "status": s, "why": None if w is None else jsonmodel.to_json(w)}
        for b, n, s, w in standing
    ]


def _read_standing(doc: Any, _: Any) -> tuple[tuple[Budget, int, str, Why | None], ...]:
    rows = [jsonmodel.from_json(_Standing, row, source="standing") for row in doc]
    return tuple((r.tree_budget, r.n, r.status, r.why) for r in rows)


@dataclass(frozen=True)
class _Standing:
    """One row of :attr:`PointRace.standing` as written."""

    tree_budget: Budget
    n: int
    status: str
    why: Why | None = None


jsonmodel.register(_Standing, upgrade=_said)


jsonmodel.register(
    PointRace,
    discarded=jsonmodel.override(rename="discarded_runs"),
    standing=jsonmodel.override(unstruct_hook=_standing_json, struct_hook=_read_standing),
    derived={
        "saved": lambda r: r.saved,
        "decided": lambda r: r.decided,
    },
    order=(
        *("point", "budgets", "chunk", "min_n", "equivalence", "confidence", "max_requests"),
        *("requests", "saved", "outcome", "decided", "leader", "recommended"),
        *("discarded_runs", "left", "standing"),
    ),
)


def _exclusion(samples: Sequence[Sample]) -> Why:
    """Why a run's invalid requests exclude its budget (the client's limits kept apart)."""
    bad = [s for s in samples if not s.valid]
    codes = tuple(sorted({c for s in bad for c in (s.codes or ("error",))}))
    if all(set(s.codes) & {CLIENT_TIMEOUT, NOT_SENT} for s in bad):
        return Why("client limits", count=len(bad), codes=codes)
    return Why("invalid", count=len(bad), codes=codes)


@dataclass(frozen=True)
class Run:
    """One run of one budget at a point: its validated samples, and whether the client was
    saturated meanwhile (its own queueing may then be in the timings)."""

    samples: Sequence[Sample]
    saturated: bool = False


#: sends ``count`` requests of one budget at the point, returns them validated
Measure = Callable[[Budget, int], Run]


class PointRacer:
    """The race at one load point in progress; :meth:`snapshot` says where it stands."""

    def __init__(
        self,
        point: LoadPoint,
        budgets: Sequence[Budget],
        requests: int,
        *,
        equivalence: float,
        seed: int = 0,
    ) -> None:
        self.point = point
        self.budgets = tuple(budgets)
        self.chunk = chunk_size(point, requests)
        rule = race_rule(equivalence, len(self.budgets), requests)
        self.race: Race[Budget] = Race(self.budgets, rule, per_lap=self.chunk, seed=seed)
        self._rng = random.Random(f"ddtree-load-race:{seed}:{point.label}")
        self.discarded = 0

    @property
    def first_batch(self) -> int:
        """Requests every budget gets before the race first looks."""
        return self.race.min_laps * self.chunk

    def run(self, measure: Measure) -> PointRace:
        """Race to the end: each lap, the budgets still in it in a shuffled order."""
        while keys := self.race.next_lap():
            self._rng.shuffle(keys)  # interleaved, so slow drift does not favour one budget
            for budget in keys:
                self.feed(budget, measure(budget, self.chunk))
        return self.snapshot()

    def feed(self, budget: Budget, run: Run) -> None:
        """One run's validated samples: their decode rates race, an invalid request excludes
        the budget.

        A run measured while the client was saturated counts against the point's budget
        but its timings do not race: the client's own queueing is no verdict on a budget
        (the budget gets another run; the table still shows every request).
        """
        samples = run.samples
        if run.saturated:
            self.discarded += 1
        for s in samples:
            rate = s.decode_tokens_per_second if s.valid and not run.saturated else None
            if rate is None:
                self.race.count()
            else:
                self.race.add(budget, rate, s.prompt_id or "")
        if any(not s.valid for s in samples):
            self.race.exclude(budget, _exclusion(samples))

    def snapshot(self, interrupted: bool = False) -> PointRace:
        """The race as it stands (``interrupted``: stopped before its end)."""
        race, j = self.race, self.race.judgement()
        outcome: Outcome = "decided" if j.decided and not interrupted else "undecided"
        if interrupted:
            outcome = "interrupted"
        left = [Left(x.key, x.after_requests, x.n, x.status, x.why) for x in race.exits]
        gone = {x.tree_budget for x in left}
        # the last look's losers: the race ended there, so they left after every request
        left += [
            Left(s.key, race.requests, s.n, s.status, s.why)
            for s in j.standings
            if s.status == "out" and s.key not in gone
        ]
        return PointRace(
            point=self.point,
            budgets=self.budgets,
            chunk=self.chunk,
            min_n=race.rule.min_n,
            equivalence=race.rule.equivalence,
            confidence=race.rule.confidence,
            max_requests=race.rule.max_requests or 0,
            requests=race.requests,
            outcome=outcome,
            leader=j.leader,
            recommended=j.recommended if outcome == "decided" else None,
            left=tuple(left),
            standing=tuple(_standing(s) for s in j.standings),
            discarded=self.discarded,
        )


def _standing(s: Standing[Budget]) -> tuple[Budget, int, str, Why | None]:
    return (s.key, s.n, s.status, s.why)


def race_point(
    point: LoadPoint,
    budgets: Sequence[Budget],
    requests: int,
    measure: Measure,
    *,
    equivalence: float,
    seed: int = 0,
) -> PointRace:
    """Race ``budgets`` at ``point`` (``requests``: the exhaustive per-budget count)."""
    return PointRacer(point, budgets, requests, equivalence=equivalence, seed=seed).run(measure)
