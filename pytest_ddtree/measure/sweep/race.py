"""Racing: spend requests where they decide.

A race compares *arms* (tree budgets, or the budgets of one load point) by one
per-request figure (decode tokens/s, higher is better; TPOT, lower is better).
Every arm first gets :attr:`RaceRule.min_n` requests (and at least two laps,
so every prompt has a within-prompt spread). From then on, after each *lap* (each
arm in contention measured once on every prompt of the lap),
every arm is compared with the *leader* (the arm with the best prompt-balanced
geometric mean) by a confidence interval of its relative *slowdown* (positive:
the arm is slower than the leader):

- **out**: the arm is clearly slower by more than the practical margin (the
  whole interval lies above the margin). It leaves the race and gets no more
  requests. An estimate above the margin is not enough: looking every few
  laps, an arm truly 1% slower would now and then show 2.5% and leave.
- **as fast**: the whole interval lies within plus or minus the margin - the
  arm is as fast as the leader for every practical purpose.
- **close enough**: once the interval is narrower than the margin itself,
  more requests cannot change the practical answer: the arm is *out* when its
  estimate lies above the margin, else *as fast* (only an arm truly within
  half the margin of the margin's edge can land on the wrong side). Without
  this an arm truly at the margin's edge (2.3% slower with a 2% margin) would
  keep the race going until the request budget is spent.
- **in contention**: anything else; it gets the next lap.

The interval's unit is an arm's *block* (a lap, or a longer unit after
:meth:`Race.regroup`), not its request: the requests of one block of one arm
share their conditions (a benchmark test's timed rounds back to back, a load run
in flight together, a sweep's visit), so counting them as independent replicates
made the interval far too narrow. Each block of an arm is one value, the mean
over the block's prompts of their mean log value (noise on timings is
multiplicative, additive in logs; a stray value, a stalled request, is first
pulled in to 3.5 robust SDs of its prompt's median). An arm is compared with the
leader block by block (every arm of a block sends the same prompts, so the
prompt mix and the block's shared noise cancel), with a t-interval from the
residual spread of the arm x block table, pooled over every arm that raced (one
machine times them all). A race looks after :attr:`Race.min_laps` and then
whenever its blocks have grown by a quarter; the k-th look has the confidence
``1 - alpha / (k (k + 1))`` (:meth:`RaceRule.look_confidence`), so the error
rates of all looks add up to at most ``alpha``. The calibration is
``benchmarks/bench_race.py``.

The race is *decided* when no arm is in contention. It then recommends the
**smallest** budget among the leader and the arms as fast as it: a win inside
the margin is no reason to deploy a bigger tree, which costs more verification
under load. When the request budget is spent first, the race is *undecided*
and says which arms were still in contention; it never forces a winner.

The same verdicts judge an exhaustive sweep (:func:`judge` on all its samples).
Samples given with their block (a sweep's round) are judged by block, as a race;
samples given without it fall back to an interval that takes each request as its
own replicate (a stratified t on the within-prompt spread, Welch's degrees of
freedom), which is too narrow when a block's requests share noise. Nothing here
knows about pytest, HTTP or budgets' meaning: keys are opaque (a budget, or None
for the server's own).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Generic, Literal, TypeVar

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.core.settings import DEFAULT_MIN_N, Settings

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_EQUIVALENCE",
    "DEFAULT_MIN_N",
    "Exit",
    "Judgement",
    "Race",
    "RaceRecord",
    "RaceRule",
    "Standing",
    "Why",
    "exhaustive_record",
    "judge",
    "slowdown_interval",
]

K = TypeVar("K", bound=Hashable)

#: The practical margin: budgets within it of the best are as fast (``--ddtree-equivalence``).
DEFAULT_EQUIVALENCE: float = Settings.equivalence
#: Confidence of a race's claims over all its looks together (:meth:`RaceRule.look_confidence`).
DEFAULT_CONFIDENCE = 0.95
#: Robust SDs beyond which a value's residual is clipped (see ``_tamed``).
CLIP = 3.5
#: A race looks again once it has this many times the blocks of its previous look.
LOOK_GROWTH = 1.25
#: Fewest degrees of freedom behind an interval (the t quantile's expansion is exact to
#: a few tenths of a percent from 3 on; below it an interval would be too narrow).
MIN_DF = 3.0

Status = Literal["leader", "as fast", "out", "in contention", "excluded"]

#: why an arm stands where it does; ``report/race_text.py`` words each kind
WhyKind = Literal[
    "few values",  # its n, or the leader's, is below the rule's minimum
    "few per prompt",  # too few values a prompt for an interval
    "few rounds",  # too few rounds (blocks) for an interval
    "out",  # slower than the leader by more than the margin
    "out narrow",  # an interval narrower than the margin, its estimate beyond it
    "as fast",  # within the margin of the leader
    "crosses",  # the interval crosses the margin
    "invalid",  # excluded: invalid answers (``count``, their ``codes``)
    "client limits",  # excluded: requests that hit the client's own limits (``codes``)
    "not lossless",  # excluded: not lossless at temperature 0 (``text``: where it was found)
    "said",  # a reason written by an older version, kept as it was written (``text``)
]


@dataclass(frozen=True)
class Why:
    """Why an arm stands where it does, as data: its kind and the figures behind it.

    An interval's kinds (``out``, ``out narrow``, ``as fast``, ``crosses``) carry the arm's
    and the leader's n, the look's ``confidence``, the ``margin`` and the ``slowdown`` interval
    (as the standing's). An exclusion carries the requests that excluded the arm.
    """

    kind: WhyKind
    slowdown: tuple[float, float, float] | None = None
    n: int = 0
    lead_n: int = 0
    confidence: float = 0.0
    margin: float = 0.0
    count: int = 0
    codes: tuple[str, ...] = ()
    text: str = ""


@dataclass(frozen=True)
class RaceRule:
    """The parameters of a race: margin, minimum n, confidence, and the request budget.

    ``equivalence`` is a fraction (0.02 is 2%), within (0, 0.5).
    ``max_requests`` None means no budget (an exhaustive sweep).
    """

    equivalence: float = DEFAULT_EQUIVALENCE
    min_n: int = DEFAULT_MIN_N
    confidence: float = DEFAULT_CONFIDENCE
    max_requests: int | None = None
    higher_is_better: bool = True

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

    def look_confidence(self, look: int) -> float:
        """The confidence of the ``look``-th look (from 1): ``1 - alpha / (look * (look + 1))``.

        The error rates of all looks add up to at most ``alpha = 1 - confidence``
        (the sum of ``1 / (k (k + 1))`` over k is 1), so looking again never buys
        a claim the data does not support. An exhaustive sweep looks once.
        """
        return 1 - (1 - self.confidence) / (look * (look + 1))


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
    why: Why | None = None


@dataclass(frozen=True)
class Exit(Generic[K]):
    """An arm that left the race: when (after how many requests in all, which lap) and why.

    ``lap`` is written as ``round`` in ``sweep.json`` (the key kept for old readers).
    """

    key: K
    lap: int
    after_requests: int
    n: int
    status: Status
    slowdown: tuple[float, float, float] | None
    leader: K | None
    why: Why | None


#: written into sweep.json's race, field by field (the race is recomputed when read)
jsonmodel.register(Why, omit_if_default=True)
jsonmodel.register(Standing, read=False)
jsonmodel.register(Exit, read=False, lap=jsonmodel.override(rename="round"))


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
    #: the look this verdict was taken at (1 for an exhaustive sweep)
    look: int = 1

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
            "look": self.look,
            "look_confidence": self.rule.look_confidence(self.look),
            "standings": [jsonmodel.to_json(s) for s in self.standings],
        }


def _order(key: Any) -> tuple[int, Any]:
    # None (the server's own budget) sorts first; otherwise the keys' own order
    return (0, 0) if key is None else (1, key)


@dataclass
class _Arm:
    values: list[float] = field(default_factory=list)
    strata: list[str] = field(default_factory=list)
    #: the block (a lap, or a unit after a regroup) each value was measured in; None: every
    #: value its own replicate
    blocks: list[int | None] = field(default_factory=list)
    excluded: Why | None = None


def _t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t (exact at 1 and 2 degrees of freedom, else the
    Cornish-Fisher expansion, exact to a few tenths of a percent from 3 on; p > 0.5)."""
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) * math.sqrt(2 / (4 * p * (1 - p)))
    z = NormalDist().inv_cdf(p)
    if math.isinf(df):
        return z
    z3, z5, z7, z9 = z**3, z**5, z**7, z**9
    return (
        z
        + (z3 + z) / (4 * df)
        + (5 * z5 + 16 * z3 + 3 * z) / (96 * df**2)
        + (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * df**3)
        + (79 * z9 + 776 * z7 + 1482 * z5 - 1920 * z3 - 945 * z) / (92160 * df**4)
    )


def _by_prompt(values: Sequence[float], strata: Sequence[str]) -> dict[str, list[float]]:
    """The log values of each prompt, a stray value pulled in (see :func:`_tamed`)."""
    groups: dict[str, list[float]] = {}
    for v, key in zip(values, strata, strict=True):
        groups.setdefault(key, []).append(math.log(v))
    return _tamed(groups)


def _tamed(groups: dict[str, list[float]]) -> dict[str, list[float]]:
    """Each prompt's values with residuals beyond :data:`CLIP` robust SDs clipped to it.

    A request the machine stalled (a scheduler hiccup, a page fault storm) is one
    value far below the rest; a mean of logs would follow it. The residuals from
    each prompt's median, pooled, give a robust SD (1.4826 MAD); clipping at 3.5 of
    them leaves normal noise untouched (it almost never reaches that far) and keeps
    one stray value from moving the estimate by more than a normal one could.
    """
    residuals = [x - statistics.median(g) for g in groups.values() for x in g]
    spread = [abs(r) for r in residuals if r != 0]
    if len(spread) < 4:
        return groups
    limit = CLIP * 1.4826 * statistics.median(spread)
    out: dict[str, list[float]] = {}
    for key, g in groups.items():
        mid = statistics.median(g)
        out[key] = [mid + max(-limit, min(limit, x - mid)) for x in g]
    return out


def _spread(groups: Mapping[str, list[float]], prompts: Iterable[str]) -> tuple[float, float]:
    """Pooled within-prompt variance of the logs, and its degrees of freedom."""
    ss = df = 0.0
    for p in prompts:
        g = groups[p]
        mean = statistics.fmean(g)
        ss += sum((x - mean) ** 2 for x in g)
        df += len(g) - 1
    return (ss / df if df > 0 else math.nan), df


def log_ratio_interval(
    a: Sequence[float],
    strata_a: Sequence[str],
    b: Sequence[float],
    strata_b: Sequence[str],
    confidence: float,
) -> tuple[float, float, float] | None:
    """``(estimate, low, high)`` of log(b / a), balanced over the prompts both share.

    None when a value is not positive, no prompt is shared, or the interval would rest
    on fewer than :data:`MIN_DF` degrees of freedom.
    """
    if min(a, default=0.0) <= 0 or min(b, default=0.0) <= 0:
        return None
    ga, gb = _by_prompt(a, strata_a), _by_prompt(b, strata_b)
    shared = sorted(set(ga) & set(gb))
    if not shared:
        return None
    k = len(shared)
    est = statistics.fmean(statistics.fmean(gb[p]) - statistics.fmean(ga[p]) for p in shared)
    (va, dfa), (vb, dfb) = _spread(ga, shared), _spread(gb, shared)
    if not (dfa > 0 and dfb > 0):
        return None
    # the variance of each side's prompt-balanced mean, and Welch's degrees of freedom
    sa = va * sum(1 / len(ga[p]) for p in shared) / k**2
    sb = vb * sum(1 / len(gb[p]) for p in shared) / k**2
    se2 = sa + sb
    df = math.inf if se2 == 0 else se2**2 / (sa**2 / dfa + sb**2 / dfb)
    if df < MIN_DF:
        return None
    half = _t_quantile((1 + confidence) / 2, df) * math.sqrt(se2)
    return est, est - half, est + half


def slowdown_interval(
    arm: Sequence[float],
    arm_strata: Sequence[str],
    leader: Sequence[float],
    leader_strata: Sequence[str],
    rule: RaceRule,
    confidence: float | None = None,
) -> tuple[float, float, float] | None:
    """``(estimate, low, high)`` of how much slower ``arm`` is than ``leader`` (0.05: 5%),
    at ``confidence`` (default: the rule's first look)."""
    conf = rule.look_confidence(1) if confidence is None else confidence
    return _as_slowdown(log_ratio_interval(leader, leader_strata, arm, arm_strata, conf), rule)


def _as_slowdown(
    d: tuple[float, float, float] | None, rule: RaceRule
) -> tuple[float, float, float] | None:
    """An interval of log(arm / leader) as the arm's relative slowdown."""
    if d is None:
        return None
    est, lo, hi = d
    if rule.higher_is_better:
        return 1 - math.exp(est), 1 - math.exp(hi), 1 - math.exp(lo)
    return math.exp(est) - 1, math.exp(lo) - 1, math.exp(hi) - 1


def _tamed_logs(values: Sequence[float], strata: Sequence[str]) -> list[float]:
    """The log of each value, in order, a stray value pulled in (see :func:`_tamed`)."""
    logs = [math.log(v) for v in values]
    where: dict[str, list[int]] = {}
    for i, key in enumerate(strata):
        where.setdefault(key, []).append(i)
    tamed = _tamed({key: [logs[i] for i in idx] for key, idx in where.items()})
    for key, idx in where.items():
        for i, x in zip(idx, tamed[key], strict=True):
            logs[i] = x
    return logs


def _cells(arm: _Arm) -> dict[int, dict[str, float]]:
    """Each block's prompts of an arm, with their mean log value in it."""
    cells: dict[int, dict[str, list[float]]] = {}
    logs = _tamed_logs(arm.values, arm.strata)
    for x, key, block in zip(logs, arm.strata, arm.blocks, strict=True):
        if block is not None:
            cells.setdefault(block, {}).setdefault(key, []).append(x)
    return {b: {k: statistics.fmean(g) for k, g in c.items()} for b, c in cells.items()}


def _block_values(arm: _Arm) -> dict[int, float]:
    """One value per block (lap) of an arm: the mean over the block's prompts of their
    mean log value in it. Requests of one block share its conditions (a benchmark test's
    back-to-back rounds, a load run): the block, not the request, is the replicate."""
    return {b: statistics.fmean(c.values()) for b, c in _cells(arm).items()}


@dataclass(frozen=True)
class _Blocked:
    """Each arm's block values and the pooled variance of one block value."""

    values: Mapping[Any, Mapping[int, float]]
    variance: float
    df: int


def _two_way(y: Mapping[Any, Mapping[int, float]]) -> tuple[float, int]:
    """The residual sum of squares of an arm x block table after each arm's level and each
    block's, and its degrees of freedom (``cells - arms - blocks + 1``). The levels of an
    incomplete table (arms that left early) are fitted by alternating means (least
    squares)."""
    cells = [(k, b, v) for k, row in y.items() for b, v in row.items()]
    blocks = {b for _, b, _ in cells}
    df = len(cells) - len(y) - len(blocks) + 1
    if len(y) < 2 or df < 1:
        return 0.0, 0
    level = dict.fromkeys(y, 0.0)
    shift = dict.fromkeys(blocks, 0.0)
    for _ in range(200):
        before = dict(level)
        for b in blocks:
            shift[b] = statistics.fmean(v - level[k] for k, c, v in cells if c == b)
        for k, row in y.items():
            level[k] = statistics.fmean(v - shift[b] for b, v in row.items())
        if max(abs(level[k] - before[k]) for k in y) < 1e-12:
            break
    return sum((v - level[k] - shift[b]) ** 2 for k, b, v in cells), df


def _blocked(arms: Mapping[Any, _Arm], *, prompt_cells: bool = False) -> _Blocked | None:
    """The residual variance of a block value in the arm x block table, pooled over ``arms``.

    A block's effect shared by every arm (drift, the block's prompts) is the block's
    level and cancels; what is left of each block value after its arm's level and its
    block's is its own noise, pooled over the arms (one machine times them all, and an
    arm that left the race still tells how noisy a block is) with ``cells - arms -
    blocks + 1`` degrees of freedom. None below one degree of freedom.

    ``prompt_cells``: each prompt of a block was measured on its own (a benchmark
    test per prompt, budget and pass), so the noise is that of one prompt's cell: the
    table is fitted prompt by prompt (each prompt's budget differences are its own,
    fixed), the sums of squares pooled, and a block value, the mean over its ``k``
    prompts, has ``1/k`` of a cell's variance.
    """
    if any(min(a.values) <= 0 for a in arms.values()):
        return None
    y = {k: _block_values(a) for k, a in arms.items()}
    if not prompt_cells:
        ss, df = _two_way(y)
        return _Blocked(y, ss / df, df) if df >= 1 else None
    per_prompt: dict[str, dict[Any, dict[int, float]]] = {}
    for k, a in arms.items():
        for block, prompts in _cells(a).items():
            for key, mean in prompts.items():
                per_prompt.setdefault(key, {}).setdefault(k, {})[block] = mean
    ss = 0.0
    df = 0
    for table in per_prompt.values():
        s, d = _two_way(table)
        ss, df = ss + s, df + d
    if df < 1:
        return None
    return _Blocked(y, ss / df / len(per_prompt), df)


def _blocked_interval(
    arm: Mapping[int, float], lead: Mapping[int, float], spread: _Blocked, confidence: float
) -> tuple[float, float, float] | None:
    """``(estimate, low, high)`` of log(arm / leader), paired by block."""
    shared = sorted(set(arm) & set(lead))
    if len(shared) < 2:
        return None
    est = statistics.fmean(arm[b] - lead[b] for b in shared)
    half = _t_quantile((1 + confidence) / 2, spread.df)
    half *= math.sqrt(2 * spread.variance / len(shared))
    return est, est - half, est + half


def _score(arm: _Arm) -> float:
    """The prompt-balanced mean log value (the leader has the best)."""
    if min(arm.values) <= 0:
        return statistics.median(arm.values)
    groups = _by_prompt(arm.values, arm.strata)
    return statistics.fmean(statistics.fmean(g) for g in groups.values())


def _judge(
    arms: Mapping[K, _Arm],
    rule: RaceRule,
    *,
    frozen: Mapping[K, Standing[K]],
    look: int = 1,
    prompt_cells: bool = False,
) -> Judgement[K]:
    """Judge every arm against the leader; ``frozen`` arms keep the standing they left with."""
    live = {k: a for k, a in arms.items() if a.excluded is None and a.values and k not in frozen}
    sign = 1.0 if rule.higher_is_better else -1.0
    # ordered best first; a key may be None (the server's own budget), so "is there a
    # leader" is ``ranked``, never ``leader is None``
    ranked = sorted(live, key=lambda k: (-sign * _score(live[k]), _order(k)))
    leader: K | None = ranked[0] if ranked else None
    raced = {k: a for k, a in arms.items() if a.excluded is None and a.values}
    blocked = all(None not in a.blocks for a in raced.values())
    spread = _blocked(raced, prompt_cells=prompt_cells) if blocked else None
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
        if ranked and key == ranked[0]:
            standings.append(Standing(key, len(arm.values), median, "leader"))
            continue
        if not ranked or not arm.values:
            standings.append(Standing(key, len(arm.values), median, "in contention"))
            continue
        standings.append(_standing(key, arm, live[ranked[0]], rule, look, spread, ranked[0]))
    decided = bool(ranked) and not any(s.status == "in contention" for s in standings)
    recommended: K | None = None
    if decided:
        pool = [s.key for s in standings if s.status in ("leader", "as fast")]
        recommended = min(pool, key=_order)
    return Judgement(tuple(standings), leader, decided, recommended, rule, look)


def _standing(
    key: K, arm: _Arm, lead: _Arm, rule: RaceRule, look: int, spread: _Blocked | None, leader: K
) -> Standing[K]:
    n = len(arm.values)
    median = statistics.median(arm.values)
    if n < rule.min_n or len(lead.values) < rule.min_n:
        few = Why("few values", n=n, lead_n=len(lead.values))
        return Standing(key, n, median, "in contention", None, few)
    confidence = rule.look_confidence(look)
    if None in arm.blocks or None in lead.blocks:
        d = slowdown_interval(arm.values, arm.strata, lead.values, lead.strata, rule, confidence)
        few = Why("few per prompt", n=n, lead_n=len(lead.values))
    else:
        d = None
        if spread is not None:
            y = spread.values
            d = _as_slowdown(_blocked_interval(y[key], y[leader], spread, confidence), rule)
        few = Why("few rounds", n=n, lead_n=len(lead.values))
    m = rule.equivalence
    if d is None or not all(math.isfinite(x) for x in d):
        return Standing(key, n, median, "in contention", d, few)

    def why(kind: WhyKind) -> Why:
        return Why(kind, d, n=n, lead_n=len(lead.values), confidence=confidence, margin=m)

    close = d[2] - d[1] < m
    if d[1] > m or (close and d[0] > m):
        return Standing(key, n, median, "out", d, why("out" if d[1] > m else "out narrow"))
    if (-m < d[1] and d[2] < m) or close:
        return Standing(key, n, median, "as fast", d, why("as fast"))
    return Standing(key, n, median, "in contention", d, why("crosses"))


def _sampled(samples: Sequence[tuple[float, str] | tuple[float, str, int]]) -> _Arm:
    """An arm of ``(value, stratum)`` pairs (each its own replicate), or of
    ``(value, stratum, block)`` triples."""
    blocks = [int(x[2]) if len(x) > 2 else None for x in samples]
    return _Arm([x[0] for x in samples], [x[1] for x in samples], blocks)


def judge(
    samples: Mapping[K, Sequence[tuple[float, str] | tuple[float, str, int]]],
    rule: RaceRule | None = None,
    *,
    seed: int = 0,
    excluded: Mapping[K, Why] | None = None,
) -> Judgement[K]:
    """Judge arms measured in full (an exhaustive sweep) by the race's rule.

    ``samples`` maps each key to its ``(value, stratum)`` pairs (the stratum is
    the prompt id: comparisons are balanced over the prompts); ``excluded`` maps
    keys to why they may not win (an invalid request). ``seed`` is accepted for
    symmetry with the reports' bootstrap; the race's interval is deterministic.
    """
    rule = rule or RaceRule()
    arms = {k: _sampled(vs) for k, vs in samples.items()}
    for k, why in (excluded or {}).items():
        arms.setdefault(k, _Arm()).excluded = why
    return _judge(arms, rule, frozen={})


class Race(Generic[K]):
    """A race in progress: which arms get the next lap, and the log of who left when.

    The driver asks :meth:`next_lap` for the arms to measure, measures each
    ``per_lap`` times (once per prompt), :meth:`add` s the values, and asks
    again; an empty answer ends the race. :meth:`judgement` is the verdict.
    """

    def __init__(
        self,
        keys: Iterable[K],
        rule: RaceRule | None = None,
        *,
        per_lap: int = 1,
        seed: int = 0,
    ) -> None:
        self.rule = rule or RaceRule()
        if per_lap < 1:
            raise ValueError(f"race: per_lap must be >= 1, got {per_lap!r}")
        self.per_lap = per_lap
        self.seed = seed
        self._arms: dict[K, _Arm] = {k: _Arm() for k in keys}
        if not self._arms:
            raise ValueError("race: no arm to race")
        self._frozen: dict[K, Standing[K]] = {}
        self.exits: list[Exit[K]] = []
        self.requests = 0
        self.laps = 0
        #: the lap from which blocks count anew (:meth:`regroup`); 0: every lap a block
        self._unit_start = 0
        self._regrouped = False
        #: each prompt of a block is its own cell (:meth:`regroup`)
        self._prompt_cells = False
        self.spent = False
        self.looks = 0
        self._looked_at = -1
        self._next_look = 0
        self._last: Judgement[K] | None = None

    @property
    def min_laps(self) -> int:
        """Blocks every arm gets before any arm may leave (two at least: a spread a prompt)."""
        return max(2, -(-self.rule.min_n // self.per_lap))

    @property
    def blocks(self) -> int:
        """Blocks measured so far in the current unit (laps, or passes after :meth:`regroup`)."""
        return self.laps - self._unit_start + (1 if self._regrouped else 0)

    def regroup(self, per_lap: int, *, prompt_cells: bool = False) -> None:
        """From now on a block is a longer lap: everything measured so far is one block.

        A benchmark race's first laps are its prompts, one after another (a
        prompt's budget differences count as noise, so a look there is
        conservative); once every prompt has been measured, a lap is a pass over
        all of them (``per_lap`` values an arm), and a block value holds every
        prompt, so the prompts' own budget differences are fixed and cancel. The
        looks go on: their confidence keeps being spent as before.
        """
        if per_lap < 1:
            raise ValueError(f"race: per_lap must be >= 1, got {per_lap!r}")
        for arm in self._arms.values():
            arm.blocks = [None if b is None else 0 for b in arm.blocks]
        self.per_lap = per_lap
        self._unit_start = self.laps
        self._regrouped = True
        self._prompt_cells = prompt_cells
        self._next_look = 0
        self._last = None

    def add(self, key: K, value: float, stratum: str = "") -> None:
        """One measured request of arm ``key`` (a valid one; see :meth:`exclude`).

        Its block is the current lap: the requests of one arm's lap share its
        conditions (see :func:`_block_values`).
        """
        arm = self._arms[key]
        arm.values.append(float(value))
        arm.strata.append(stratum)
        arm.blocks.append(self.laps - self._unit_start)
        self.requests += 1
        self._last = None

    def count(self, n: int = 1) -> None:
        """Requests that were spent without a value (invalid answers): they use the budget."""
        self.requests += n

    def exclude(self, key: K, why: Why) -> None:
        """Arm ``key`` had an invalid request (``why``): it leaves the race and may not win."""
        arm = self._arms[key]
        if arm.excluded is None and key not in self._frozen:
            arm.excluded = why
            self._leave(Standing(key, len(arm.values), None, "excluded", None, why), None)
        self._last = None

    def record(self) -> RaceRecord[K]:
        """The race as a report shows it."""
        return RaceRecord(
            "adaptive", self.judgement(), tuple(self.exits), self.requests, self.laps, self.spent
        )

    def judgement(self) -> Judgement[K]:
        """The verdict on what was measured so far (at the latest look's confidence)."""
        if self._last is None:
            look = max(self.looks, 1)
            self._last = _judge(
                self._arms,
                self.rule,
                frozen=self._frozen,
                look=look,
                prompt_cells=self._prompt_cells,
            )
        return self._last

    def _leave(self, s: Standing[K], leader: K | None) -> None:
        self._frozen[s.key] = s
        self.exits.append(
            Exit(s.key, self.laps, self.requests, s.n, s.status, s.slowdown, leader, s.why)
        )

    def _look(self) -> Judgement[K]:
        """Judge at a new look; the arms found out leave the race."""
        self.looks += 1
        self._looked_at = self.requests
        self._last = None
        j = self.judgement()
        for s in j.standings:
            if s.status == "out" and s.key not in self._frozen:
                self._leave(s, j.leader)
        self._last = None
        self._next_look = max(self.blocks + 1, math.ceil(self.blocks * LOOK_GROWTH))
        return self.judgement()

    def finish(self) -> Judgement[K]:
        """A last look at what was measured since the previous one (a driver that ran out
        of laps to give, e.g. of benchmark tests); the final verdict."""
        if self._looked_at != self.requests and self.blocks >= self.min_laps:
            self._look()
        return self.judgement()

    def next_lap(self) -> list[K]:
        """The arms to measure next (in key order); empty when the race is over.

        The race looks (judges, and lets arms go) after :attr:`min_laps` and then
        whenever the blocks have grown by :data:`LOOK_GROWTH`: fewer looks spend the
        confidence on fewer, better-informed verdicts.
        """
        live = [k for k in sorted(self._arms, key=_order) if k not in self._frozen]
        keys = live
        if self.blocks >= self.min_laps and self.blocks >= self._next_look:
            j = self._look()
            if j.decided or not live:
                return []
            keys = [
                s.key for s in j.standings if s.status in ("leader", "in contention", "as fast")
            ]
        if not keys:
            return []
        cost = len(keys) * self.per_lap
        if self.rule.max_requests is not None and self.requests + cost > self.rule.max_requests:
            if self._looked_at != self.requests:
                self._look()  # what was measured since the last look is judged, too
            self.spent = not self.judgement().decided
            return []
        self.laps += 1
        return keys


Mode = Literal["exhaustive", "adaptive"]


@dataclass(frozen=True)
class RaceRecord(Generic[K]):
    """What a report shows of a race: the verdict, who left when and why, what it cost.

    An exhaustive sweep has a record too (``mode="exhaustive"``, no exits): its
    verdict is :func:`judge` on every sample, by the same rule.
    """

    mode: Mode
    judgement: Judgement[K]
    exits: tuple[Exit[K], ...] = ()
    requests: int = 0
    #: written as ``rounds`` in ``sweep.json`` (the key kept for old readers)
    laps: int = 0
    spent: bool = False

    def exit_of(self, key: K) -> Exit[K] | None:
        """When and why ``key`` left the race (None: it stayed to the end)."""
        for e in self.exits:
            if e.key == key:
                return e
        return None

    @property
    def max_requests(self) -> int | None:
        """The request budget (None: none)."""
        return self.judgement.rule.max_requests

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (``sweep.json``'s ``race``)."""
        return {
            "mode": self.mode,
            **self.judgement.to_json(),
            "max_requests": self.max_requests,
            "requests": self.requests,
            "rounds": self.laps,
            "spent": self.spent,
            "exits": [jsonmodel.to_json(e) for e in self.exits],
        }


def exhaustive_record(judgement: Judgement[K]) -> RaceRecord[K]:
    """The record of an exhaustive sweep judged by the race's rule."""
    n = sum(s.n for s in judgement.standings)
    return RaceRecord("exhaustive", judgement, requests=n)
