"""The break-even map: is speculation worth it, by prompt depth and load?

Each *cell* of the map is one prompt depth (``--ddtree-context``) at one load point. Its
arms are the tree budgets and, when a target-only twin is given
(``--ddtree-baseline-endpoint``; the embedded server brings its own), **speculation off**:
the twin timed with the same prompts, rounds and invariants, keyed :data:`OFF` (a tree of
no node). A cell is a race (:class:`~pytest_ddtree.measure.sweep.race.Race`): every arm
gets the minimum laps, then only the arms still in contention get more, and a decided cell
stops spending requests; its decision is the one rule's
(:func:`~pytest_ddtree.measure.sweep.decision.decide`).

Per cell the answer is the budget the rule names, or **off**: off when the rule names off,
or when off is as fast as the arm it names (a tree of no node is the smallest tree: a win
inside the margin is no reason to speculate), or when the named budget's speedup estimate is
below 1 -- the map never recommends a budget slower than the target alone. The speedup of a
budget is the paired ratio of its decode rates over off's, balanced over the prompts both
answered, with the race's t-interval (``log_ratio_interval``) at the rule's confidence (its
end-to-end twin, ``Cell.e2e``, takes each request's whole time, its TTFT included). The
*crossover* is the smallest depth, at one load point, from which the best budget's speedup
interval lies wholly below 1.0 at every depth measured. Acceptance against log2(depth) is
fitted by least squares over every valid speculative answer, with its t-interval.

Without a twin there is no speedup: the map still ranks the budgets at each depth, and says
the speedup was not measured. No pytest here and no words: ``report.breakeven_text`` says
them.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.measure.load.arrivals import LoadPoint
from pytest_ddtree.measure.sample import SERIAL, Sample
from pytest_ddtree.measure.sweep.decision import Decision, decide
from pytest_ddtree.measure.sweep.race import (
    Race,
    RaceRecord,
    RaceRule,
    Why,
    _t_quantile,
    log_ratio_interval,
)

__all__ = [
    "OFF",
    "BreakEvenMap",
    "Cell",
    "Ratio",
    "Reuse",
    "Send",
    "Slope",
    "Turn",
    "acceptance_slope",
    "arm_label",
    "cell_of",
    "crossover",
    "race_cell",
    "reuse_of",
]

#: the arm without speculation (the target-only twin): a tree of no node
OFF = 0

Arm = int | None

#: sends one request of an arm on a prompt, in a lap, and returns it validated
Send = Callable[[Arm, str, int], Sample]


def arm_label(arm: Arm) -> str:
    """``off`` for the target alone, else the budget as tables name it."""
    return "off" if arm == OFF else budget_label(arm)


@dataclass(frozen=True)
class Ratio:
    """A speedup over the target alone: its estimate and interval (1.9 is 1.9x faster)."""

    estimate: float
    low: float
    high: float

    @property
    def slower(self) -> bool:
        """The whole interval lies below 1: speculation is slower than the target alone."""
        return self.high < 1.0

    @property
    def faster(self) -> bool:
        """The whole interval lies above 1."""
        return self.low > 1.0


@dataclass(frozen=True)
class Slope:
    """Acceptance against log2(prompt depth): the change per doubling, with its interval."""

    per_doubling: float
    low: float
    high: float
    n: int
    #: what was fitted: ``mean_acceptance_length`` or ``acceptance_rate``
    figure: str


@dataclass(frozen=True)
class Cell:
    """One depth at one load point: the rule's decision among its arms and the answer.

    ``answer`` is the arm to deploy (:data:`OFF` for speculation off; None with
    ``answered`` False when the rule names none); ``best`` the fastest budget (the leader
    among the speculative arms) and ``speedup`` its ratio over off (None without a twin, or
    when the interval could not be formed).
    """

    depth: int
    point: LoadPoint
    decision: Decision[Arm]
    answer: Arm
    answered: bool
    best: Arm
    speedup: Ratio | None
    #: each arm's speedup over off (the twin's arm excluded), by arm
    speedups: Mapping[Arm, Ratio] = field(default_factory=dict)
    #: the best budget's end-to-end speedup (the whole request, its TTFT included)
    e2e: Ratio | None = None
    #: requests the cell's race sent
    requests: int = 0
    #: invalid answers pinned on no layer (``undetermined``): not compared, not timed
    not_compared: int = 0

    @property
    def off(self) -> bool:
        """The answer is speculation off."""
        return self.answered and self.answer == OFF


jsonmodel.register(Ratio)
jsonmodel.register(Slope)
jsonmodel.register(
    Cell,
    read=False,
    speedups=jsonmodel.override(omit=True),
    decision=jsonmodel.override(unstruct_hook=jsonmodel.to_json),
    derived={
        "label": lambda c: c.point.label,
        "answer_label": lambda c: arm_label(c.answer) if c.answered else None,
        "speedups": lambda c: {arm_label(k): jsonmodel.to_json(v) for k, v in c.speedups.items()},
    },
)


@dataclass(frozen=True)
class Reuse:
    """A conversation's second turn at one depth and arm: how much of its prompt (the first
    turn, its answer and a new question) the server's prefix cache held, and its TTFT.

    ``cached`` is the median share of the prompt's tokens reported cached
    (``usage.prompt_tokens_details.cached_tokens``) over the ``reported`` answers that said;
    None when none did (the server does not report it)."""

    depth: int
    arm: Arm
    turns: int
    valid: int
    reported: int
    cached: float | None
    #: the median TTFT of the valid second turns, seconds
    ttft: float | None


#: one second turn: valid, cached prompt tokens, prompt tokens, TTFT (seconds)
Turn = tuple[bool, int | None, int | None, float | None]


def reuse_of(depth: int, arm: Arm, turns: Sequence[Turn]) -> Reuse:
    """One arm's second turns (valid, cached tokens, prompt tokens, TTFT each) at ``depth``."""
    shares = [c / p for ok, c, p, _ in turns if ok and c is not None and p]
    ttfts = [t for ok, _, _, t in turns if ok and t is not None]
    return Reuse(
        depth,
        arm,
        len(turns),
        sum(ok for ok, *_ in turns),
        len(shares),
        statistics.median(shares) if shares else None,
        statistics.median(ttfts) if ttfts else None,
    )


jsonmodel.register(Reuse, read=False)


@dataclass(frozen=True)
class BreakEvenMap:
    """Every cell, depth by depth and load point by load point; the fitted slope and the
    crossover of each load point (None: none up to the deepest depth measured)."""

    cells: tuple[Cell, ...]
    #: a target-only twin was timed (speculation off is an arm)
    baseline: bool
    slope: Slope | None
    crossovers: Mapping[str, int | None]
    samples: tuple[Sample, ...] = ()
    #: each depth's second turns, off and the cell's best budget (empty: not measured)
    reuse: tuple[Reuse, ...] = ()

    @property
    def depths(self) -> tuple[int, ...]:
        """The depths measured, shallowest first."""
        return tuple(sorted({c.depth for c in self.cells}))

    @property
    def points(self) -> tuple[LoadPoint, ...]:
        """The load points measured, lightest first."""
        return tuple(sorted({c.point for c in self.cells}, key=lambda p: (p.mode, p.value)))

    def cell(self, depth: int, point: LoadPoint = SERIAL) -> Cell:
        """The cell at ``depth`` and ``point``."""
        for c in self.cells:
            if c.depth == depth and c.point == point:
                return c
        raise KeyError((depth, point.label))

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (``sweep.json``'s ``breakeven``)."""
        return dict(jsonmodel.to_json(self))


jsonmodel.register(
    BreakEvenMap,
    read=False,
    slope=jsonmodel.override(rename="acceptance_slope"),
    derived={
        "depths": lambda m: list(m.depths),
        "points": lambda m: [p.label for p in m.points],
    },
    order=(
        *("baseline", "depths", "points", "crossovers", "acceptance_slope", "cells", "reuse"),
        "samples",
    ),
)


def race_cell(
    arms: Sequence[Arm],
    prompts: Sequence[str],
    send: Send,
    rule: RaceRule,
    *,
    seed: int = 0,
    concurrency: int = 1,
    run: Callable[[Sequence[Callable[[], Sample]], int], list[Sample]] | None = None,
) -> tuple[list[Sample], RaceRecord[Arm]]:
    """Race ``arms`` on ``prompts`` until the rule decides or the request budget is spent.

    A lap sends every prompt once for each arm still racing, the arms in a seeded shuffled
    order (slow drift favours none); ``concurrency`` requests of one arm are in flight
    together when ``run`` is given (it runs the calls with that many in flight and returns
    their samples in order). An invalid answer excludes its arm.
    """
    race: Race[Arm] = Race(arms, rule, per_lap=len(prompts), seed=seed)
    rng = random.Random(f"ddtree-breakeven:{seed}")
    samples: list[Sample] = []
    while keys := race.next_lap():
        rng.shuffle(keys)
        lap = race.laps
        for arm in keys:
            calls = [_call(send, arm, p, lap) for p in prompts]
            got = run(calls, concurrency) if run is not None else [c() for c in calls]
            for s in got:
                samples.append(s)
                if _timed(s):
                    race.add(arm, float(s.decode_tokens_per_second or 0), s.prompt_id)
                else:
                    race.count()
                    if s.against_budget and not _undetermined(s):
                        race.exclude(arm, Why("invalid", count=1, codes=s.codes or ("error",)))
    return samples, race.record()


def _undetermined(s: Sample) -> bool:
    """An invalid answer its diagnosis could pin on no layer: not comparable, so neither
    timed nor held against its arm (the map counts it, the diagnosis says why)."""
    return not s.valid and s.blame == "undetermined"


def _timed(s: Sample) -> bool:
    """An answer that times its arm: a valid one, or one whose failure the target alone
    shares (the model's or the prompt's: the same tokens, decoded either way)."""
    return bool(s.decode_tokens_per_second) and (s.valid or not s.against_budget)


def _call(send: Send, arm: Arm, prompt: str, lap: int) -> Callable[[], Sample]:
    return lambda: send(arm, prompt, lap)


def _rates(
    samples: Sequence[Sample], arm: Arm, figure: str = "decode"
) -> tuple[list[float], list[str]]:
    """An arm's timed values by prompt: decode rates, or (``e2e``) the inverse of each
    request's end-to-end time, so that higher is faster for both."""
    got = [s for s in samples if s.tree_budget == arm and _timed(s)]
    if figure == "e2e":
        got = [s for s in got if s.end_to_end]
        return [1.0 / float(s.end_to_end or 1) for s in got], [s.prompt_id for s in got]
    return [float(s.decode_tokens_per_second or 0) for s in got], [s.prompt_id for s in got]


def speedup(
    samples: Sequence[Sample], arm: Arm, confidence: float, figure: str = "decode"
) -> Ratio | None:
    """The paired ratio of ``arm``'s decode rates (or ``e2e``: end-to-end speeds) over
    off's, with its interval."""
    a, sa = _rates(samples, OFF, figure)
    b, sb = _rates(samples, arm, figure)
    d = log_ratio_interval(a, sa, b, sb, confidence) if a and b else None
    if d is None or not all(math.isfinite(x) for x in d):
        return None
    return Ratio(math.exp(d[0]), math.exp(d[1]), math.exp(d[2]))


def cell_of(
    depth: int,
    point: LoadPoint,
    samples: Sequence[Sample],
    record: RaceRecord[Arm],
    *,
    baseline: bool,
) -> Cell:
    """The decision and the answer of one raced cell (see the module docstring)."""
    d = decide(record.judgement, mode=record.mode, requests=record.requests, spent=record.spent)
    conf = d.confidence
    budgets = [s for s in record.judgement.standings if s.key != OFF and s.status != "excluded"]
    speedups: dict[Arm, Ratio] = {}
    if baseline:
        for s in budgets:
            r = speedup(samples, s.key, conf)
            if r is not None:
                speedups[s.key] = r
    best = _best(samples, [s.key for s in budgets])
    e2e = speedup(samples, best, conf, "e2e") if baseline and budgets else None
    answer, answered = d.chosen, d.names_one
    if baseline and answered:
        pool = {d.leader, *d.arms, *d.as_fast}
        ratio = speedups.get(answer)
        if OFF in pool or (ratio is not None and ratio.estimate < 1.0):
            answer = OFF
    return Cell(
        depth,
        point,
        d,
        answer,
        answered,
        best,
        speedups.get(best),
        speedups,
        e2e,
        record.requests,
        sum(1 for s in samples if _undetermined(s)),
    )


def _best(samples: Sequence[Sample], arms: Sequence[Arm]) -> Arm:
    """The speculative arm with the highest median decode rate (None: none timed)."""
    medians = {a: statistics.median(r) for a in arms if (r := _rates(samples, a)[0])}
    return max(medians, key=lambda a: medians[a]) if medians else None


def acceptance_slope(samples: Sequence[Sample], confidence: float) -> Slope | None:
    """Least squares of each speculative answer's acceptance on log2 of its depth.

    The mean acceptance length where the server reports it, else the acceptance rate; the
    depth is the sample's ``prompt_tokens``-sized context (``Sample.context_depth``).
    None below two depths or three answers.
    """
    for figure in ("mean_acceptance_length", "acceptance_rate"):
        pts = [
            (math.log2(s.context_depth), float(v))
            for s in samples
            if (s.valid or not s.against_budget)
            and s.tree_budget != OFF
            and s.context_depth
            and (v := getattr(s, figure)) is not None
        ]
        if len(pts) >= 3 and len({x for x, _ in pts}) >= 2:
            return _fit(pts, confidence, figure)
    return None


def _fit(pts: Sequence[tuple[float, float]], confidence: float, figure: str) -> Slope:
    n = len(pts)
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    b = sum((x - mx) * (y - my) for x, y in pts) / sxx
    a = my - b * mx
    resid = sum((y - a - b * x) ** 2 for x, y in pts)
    df = n - 2
    if df < 1:
        return Slope(b, -math.inf, math.inf, n, figure)
    se = math.sqrt(resid / df / sxx)
    half = _t_quantile((1 + confidence) / 2, df) * se
    return Slope(b, b - half, b + half, n, figure)


def crossover(cells: Sequence[Cell]) -> int | None:
    """The smallest depth from which the best budget is slower than the target alone (its
    speedup interval wholly below 1) at every depth measured; None: no such depth."""
    found = None
    for c in sorted(cells, key=lambda c: c.depth, reverse=True):
        if c.speedup is None or not c.speedup.slower:
            break
        found = c.depth
    return found
