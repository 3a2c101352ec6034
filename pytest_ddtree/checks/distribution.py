"""Losslessness in distribution: do two sets of sampled answers come from the same distribution?

At temperature 0 a lossless speculative decoder gives exactly the target's answer; above 0
it only has to give answers *distributed* as the target's (rejection sampling). The test
here takes N answers from the server and N from the target-only baseline, each request with
its own seed, and asks whether the 2N answers could be one sample split at random.

The test is a permutation test whose exchangeable unit is the whole answer: under "same
distribution" the 2N answers are independent draws from one distribution, so every split of
them into two groups of N is as likely as the observed one, whatever the dependence between
the words *within* an answer. Four statistics measure how far apart the two groups are:

- ``opening``: the total-variation distance between the groups' distributions of opening
  words (the first ``OPENING_WORDS`` words of each answer);
- ``words`` and ``bigrams``: the total-variation distance between the groups' pooled word
  (and word-pair) frequencies over whole answers;
- ``length``: the difference of the groups' mean answer lengths, in words.

They are combined soundly by the minimum of their p-values (Tippett's rule), itself calibrated
on the same random splits: one permutation distribution of the combined statistic, so the
combined p-value is exact at any N and no correction for four looks is needed. The splits come
from a seeded generator: the same answers always give the same p-value.

No pytest here.
"""

from __future__ import annotations

import hashlib
import random
import re
import threading
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from itertools import pairwise
from math import comb
from typing import TYPE_CHECKING, Any

from pytest_ddtree.checks.comparable import not_whole_advice, why_not_whole
from pytest_ddtree.core.settings import DISTRIBUTION_PERMUTATIONS, Settings, least_alpha

if TYPE_CHECKING:
    from pytest_ddtree.wire.client import DDTreeClient
    from pytest_ddtree.wire.completion import Completion
    from pytest_ddtree.wire.protocol import Messages

__all__ = [
    "CHANCE_CODES",
    "CODE",
    "DEFAULT_ALPHA",
    "DEFAULT_PERMUTATIONS",
    "OPENING_WORDS",
    "DistributionResult",
    "DistributionRun",
    "Statistic",
    "compare_answers",
    "least_alpha",
    "more_often",
    "opening",
    "request_seeds",
    "run_distribution",
    "words",
]

#: The false-alarm rate of :func:`compare_answers` unless told otherwise: the default of
#: --ddtree-distribution-alpha (the fixture's N is --ddtree-distribution-samples').
DEFAULT_ALPHA: float = Settings.distribution_alpha
#: Random splits of the pooled answers; the p-value's resolution is 1 / (this + 1).
DEFAULT_PERMUTATIONS = DISTRIBUTION_PERMUTATIONS


#: The codes a healthy model's sampled answer can break by chance (it wrote a loop, or its
#: end-of-sequence came early): above temperature 0 one such answer is a draw, not a verdict,
#: so they are judged by how often each side breaks them. Every other code (a count, a
#: statistic, the wire) fails on one answer.
CHANCE_CODES = frozenset(
    {"early-stop", "finish-reason", "degenerate", "empty", "role-leak", "non-printable"}
)


def more_often(ours: int, n: int, theirs: int, m: int) -> float:
    """The one-sided Fisher exact p-value that the server breaks more often than the baseline.

    ``ours`` of the server's ``n`` answers broke and ``theirs`` of the baseline's ``m``: the
    chance, were both sides breaking at one rate, that the server's answers hold ``ours`` or
    more of the ``ours + theirs`` broken ones (the hypergeometric tail).
    """
    total = ours + theirs
    tail = sum(comb(n, k) * comb(m, total - k) for k in range(ours, min(n, total) + 1))
    return tail / comb(n + m, total)


#: How many words make an answer's opening.
OPENING_WORDS = 2

#: The violation code of a failed test.
CODE = "not-lossless-in-distribution"
SAMPLING_ADVICE = (
    "pass the request's seed and temperature through to the sampler (some stacks drop a "
    "per-request seed with speculative decoding); until distinct seeds give distinct answers "
    "on both sides, their distributions cannot be compared"
)
OPEN_PROMPT_ADVICE = (
    "test with an open-ended prompt (an essay, a story), or a higher temperature, where "
    "sampled answers differ"
)

_WORD = re.compile(r"\w+|[^\w\s]")


def words(text: str) -> list[str]:
    """The words of ``text``: lower-case runs of letters and digits, each punctuation mark apart."""
    return _WORD.findall(text.lower())


def opening(text: str) -> str:
    """The first ``OPENING_WORDS`` words of ``text``, space-joined (``""`` for an empty answer)."""
    return " ".join(words(text)[:OPENING_WORDS])


@dataclass(frozen=True)
class Statistic:
    """One statistic: its observed value and its own permutation p-value."""

    name: str
    observed: float
    p_value: float


@dataclass(frozen=True)
class DistributionResult:
    """The outcome of :func:`compare_answers`."""

    p_value: float
    alpha: float
    samples: tuple[int, int]  # answers from the server, from the baseline
    permutations: int
    statistics: tuple[Statistic, ...]
    #: opening -> (count on the server, count on the baseline), most over-represented first
    openings: tuple[tuple[str, int, int], ...]
    #: word -> (count on the server, count on the baseline), most over-represented first
    words: tuple[tuple[str, int, int], ...]
    mean_words: tuple[float, float]

    @property
    def differs(self) -> bool:
        """True when the test rejects "same distribution" at ``alpha``."""
        return self.p_value <= self.alpha

    def summary(self) -> str:
        """One line: the p-value, α, N and each statistic's own p-value."""
        each = ", ".join(f"{s.name} p={s.p_value:.3f}" for s in self.statistics)
        n, m = self.samples
        return (
            f"p = {self.p_value:.4f} (alpha {self.alpha:g}; N = {n} server and {m} baseline "
            f"answers, {self.permutations} permutations; {each})"
        )

    def differences(self, top: int = 3) -> dict[str, str]:
        """What is over-represented on the server compared with the baseline, with counts."""
        n, m = self.samples
        out: dict[str, str] = {}
        if self.openings:
            shown = "; ".join(f"{o!r} {a} vs {b}" for o, a, b in self.openings[:top])
            out["openings"] = f"more frequent on the server (of {n} vs {m} answers): {shown}"
        if self.words:
            shown = "; ".join(f"{w!r} {a} vs {b}" for w, a, b in self.words[:top])
            out["words"] = f"more frequent on the server (count in all answers): {shown}"
        ours, theirs = self.mean_words
        out["length"] = f"{ours:.1f} words on average on the server, {theirs:.1f} on the baseline"
        return out


# ---------------------------------------------------------------- statistics over groups


class _Pooled:
    """A count statistic over a group of answers: each answer's features, summed per group."""

    def __init__(self, features: Sequence[Sequence[str]]) -> None:
        index: dict[str, int] = {}
        self.rows: list[list[tuple[int, int]]] = []
        for feats in features:
            counts = Counter(index.setdefault(f, len(index)) for f in feats)
            self.rows.append(sorted(counts.items()))
        self.total = [0] * len(index)
        for row in self.rows:
            for i, c in row:
                self.total[i] += c
        self.size = sum(self.total)

    def tv(self, group: Sequence[int]) -> float:
        """Total-variation distance between the pooled frequencies of ``group`` and the rest."""
        a = [0] * len(self.total)
        for k in group:
            for i, c in self.rows[k]:
                a[i] += c
        na = sum(a)
        nb = self.size - na
        if na == 0 or nb == 0:
            return 0.0 if na == nb else 1.0
        ia, ib = 1.0 / na, 1.0 / nb
        return 0.5 * sum(abs(x * ia - (t - x) * ib) for x, t in zip(a, self.total, strict=True))


def _bigrams(ws: Sequence[str]) -> list[str]:
    return [f"{a} {b}" for a, b in pairwise(ws)]


def _statistics(answers: Sequence[str]) -> dict[str, Callable[[Sequence[int]], float]]:
    """Each statistic as a function of the indices of the first group (the rest is the other)."""
    tokenised = [words(a) for a in answers]
    openings = _Pooled([[" ".join(ws[:OPENING_WORDS])] for ws in tokenised])
    unigrams = _Pooled(tokenised)
    bigrams = _Pooled([_bigrams(ws) for ws in tokenised])
    lengths = [len(ws) for ws in tokenised]
    total_length = sum(lengths)
    n = len(answers)

    def length(group: Sequence[int]) -> float:
        k = len(group)
        ours = sum(lengths[i] for i in group)
        return abs(ours / k - (total_length - ours) / (n - k))

    return {
        "opening": openings.tv,
        "words": unigrams.tv,
        "bigrams": bigrams.tv,
        "length": length,
    }


def _p_values(column: Sequence[float]) -> list[float]:
    """Each value's permutation p-value: the share of ``column`` at least as large."""
    ranked = sorted(column)
    size = len(ranked)
    # a tolerance so that float noise in equal statistics never breaks a tie
    return [(size - bisect_left(ranked, x - 1e-12)) / size for x in column]


def compare_answers(
    server: Sequence[str],
    baseline: Sequence[str],
    *,
    alpha: float = DEFAULT_ALPHA,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
) -> DistributionResult:
    """Test "the server's answers are distributed as the baseline's" (see the module doc).

    ``server`` and ``baseline`` are the answers' texts, each from its own seed. Returns the
    combined p-value, each statistic's own, and the openings and words most over-represented
    on the server. Deterministic in its arguments.
    """
    if not server or not baseline:
        raise ValueError("compare_answers: both sides need at least one answer")
    if permutations < 1:
        raise ValueError(f"compare_answers: permutations must be >= 1, got {permutations}")
    if not least_alpha(permutations) <= alpha <= 0.5:
        raise ValueError(
            f"compare_answers: alpha must be from {least_alpha(permutations):g} (the smallest "
            f"p-value {permutations} permutations can show) to 0.5, got {alpha!r}"
        )
    pooled = [*server, *baseline]
    n = len(server)
    stats = _statistics(pooled)
    names = list(stats)
    observed_group = list(range(n))
    rng = random.Random(seed)
    order = list(range(len(pooled)))
    # row 0: the observed split; rows 1..B: random splits of the pooled answers
    table: list[list[float]] = [[stats[k](observed_group) for k in names]]
    for _ in range(permutations):
        rng.shuffle(order)
        group = order[:n]
        table.append([stats[k](group) for k in names])
    columns = [[row[j] for row in table] for j in range(len(names))]
    # each split's smallest per-statistic p-value, against the same permutation distribution
    p_columns = [_p_values(col) for col in columns]
    min_p = [min(ps) for ps in zip(*p_columns, strict=True)]
    combined = sum(1 for v in min_p if v <= min_p[0] + 1e-12) / len(min_p)
    return DistributionResult(
        p_value=combined,
        alpha=alpha,
        samples=(len(server), len(baseline)),
        permutations=permutations,
        statistics=tuple(Statistic(k, columns[j][0], p_columns[j][0]) for j, k in enumerate(names)),
        openings=_over_represented([opening(a) for a in server], [opening(a) for a in baseline]),
        words=_over_represented(
            [w for a in server for w in words(a)], [w for a in baseline for w in words(a)]
        ),
        mean_words=(
            sum(len(words(a)) for a in server) / len(server),
            sum(len(words(a)) for a in baseline) / len(baseline),
        ),
    )


def _over_represented(
    ours: Sequence[str], theirs: Sequence[str]
) -> tuple[tuple[str, int, int], ...]:
    """Items more frequent in ``ours`` than in ``theirs`` (scaled to its size), largest first."""
    a, b = Counter(ours), Counter(theirs)
    scale = len(ours) / len(theirs) if theirs else 1.0
    excess = [(a[k] - b[k] * scale, k) for k in a if a[k] > b[k] * scale]
    excess.sort(key=lambda e: (-e[0], e[1]))
    return tuple((k, a[k], b[k]) for _, k in excess)


# ---------------------------------------------------------------- sampling both sides


@dataclass(frozen=True)
class DistributionRun:
    """Both sides' answers and what could be concluded from them.

    Exactly one of ``not_comparable`` (why no verdict can be drawn: an answer that did not
    arrive whole, another prompt, or a side that gives one answer whatever the seed) and
    ``result`` (the test) is set.
    """

    temperature: float
    seeds: tuple[tuple[int, ...], tuple[int, ...]]  # the server's seeds, the baseline's
    server: tuple[Completion, ...]
    baseline: tuple[Completion, ...]
    not_comparable: str | None = None
    advice: str = ""  # what to do when not comparable
    result: DistributionResult | None = None
    #: the base of the seeds (:func:`request_seeds`)
    seed: int = 1


def run_distribution(
    client: DDTreeClient,
    baseline: DDTreeClient,
    prompt: Messages,
    *,
    temperature: float,
    samples: int,
    alpha: float,
    max_tokens: int,
    seed: int = 1,
    permutations: int = DEFAULT_PERMUTATIONS,
    **extra: Any,
) -> DistributionRun:
    """Sample ``samples`` answers per side at ``temperature`` and test them (see module doc).

    The 2N requests carry 2N distinct seeds from :func:`request_seeds`, the first N for the
    server: hashed, so that nothing is assumed about how a server's generator treats nearby
    seeds, and the 2N answers are independent draws. Each side samples in its own thread
    (two servers), after one unrecorded request (a server that caches prompts answers every
    recorded request with the prompt cached). ``extra`` goes into every request body.
    """
    if not 0 < temperature <= 2:
        raise ValueError(
            f"ddtree_distribution: temperature must be above 0 and at most 2, got "
            f"{temperature!r} (temperature 0 is ddtree_lossless's)"
        )
    if samples < 2:
        raise ValueError(f"ddtree_distribution: samples must be at least 2, got {samples!r}")
    if not least_alpha(permutations) <= alpha <= 0.5:
        raise ValueError(
            f"ddtree_distribution: alpha must be from {least_alpha(permutations):g} (the "
            f"smallest p-value {permutations} permutations can show) to 0.5, got {alpha!r}"
        )
    kw: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature, **extra}
    every = request_seeds(seed, 2 * samples + 2)
    seeds = (tuple(every[:samples]), tuple(every[samples : 2 * samples]))
    # unrecorded: the prompt cached on both sides, and a look at the prompts each side sees
    warm = _both(client, baseline, prompt, every[-2:-1], every[-1:], kw)
    run = DistributionRun(temperature, seeds, tuple(warm[0]), tuple(warm[1]), seed=seed)
    why = _prompts_differ(run)
    if why is None:
        ours, theirs = _both(client, baseline, prompt, seeds[0], seeds[1], kw)
        run = DistributionRun(temperature, seeds, tuple(ours), tuple(theirs), seed=seed)
        why = _not_comparable(run) or _one_answer(run, client, baseline, prompt, kw)
    if why is not None:
        return replace(run, not_comparable=why[0], advice=why[1])
    result = compare_answers(
        [c.text for c in run.server],
        [c.text for c in run.baseline],
        alpha=alpha,
        permutations=permutations,
    )
    return replace(run, result=result)


def request_seeds(base: int, count: int) -> list[int]:
    """``count`` distinct request seeds (31 bits: every server takes them) derived from ``base``."""
    out: list[int] = []
    i = 0
    while len(out) < count:
        digest = hashlib.blake2b(f"ddtree-distribution:{base}:{i}".encode(), digest_size=4)
        value = int.from_bytes(digest.digest(), "big") & 0x7FFFFFFF
        if value not in out:
            out.append(value)
        i += 1
    return out


def _both(
    client: DDTreeClient,
    baseline: DDTreeClient,
    prompt: Messages,
    ours: Sequence[int],
    theirs: Sequence[int],
    kw: dict[str, Any],
) -> tuple[list[Completion], list[Completion]]:
    """One request per seed on each side; the two sides (two servers) in parallel threads."""
    stop = threading.Event()

    def sample(side: DDTreeClient, seeds: Sequence[int]) -> list[Completion]:
        out = []
        for s in seeds:
            if stop.is_set():
                break
            out.append(side.request(prompt, seed=s, **kw))
        return out

    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = [pool.submit(sample, client, ours), pool.submit(sample, baseline, theirs)]
        try:
            return jobs[0].result(), jobs[1].result()
        except BaseException:  # Ctrl-C: no new request starts, the ones in flight end
            stop.set()
            raise


def _prompts_differ(run: DistributionRun) -> tuple[str, str] | None:
    """Why the two sides do not see the same prompt (``usage.prompt_tokens``), or None."""
    from pytest_ddtree.checks.lossless import comparability

    ours, theirs = run.server[0], run.baseline[0]
    if why_not_whole(ours) is not None or why_not_whole(theirs) is not None:
        return None  # a cut answer says nothing about the prompt; _not_comparable names it
    why = comparability(theirs, ours, "target-only baseline")
    return None if why is None else (why.reason, why.advice)


def _not_comparable(run: DistributionRun) -> tuple[str, str] | None:
    """Why the two sides' answers cannot be compared at all, and what to do; or None."""
    from pytest_ddtree.checks.blame import NOT_WHOLE_ADVICE

    for side, answers in (("server", run.server), ("baseline", run.baseline)):
        cut = [(c, why) for c in answers if (why := why_not_whole(c)) is not None]
        if cut:
            return (
                f"{len(cut)} of the {side}'s {len(answers)} answers did not arrive whole "
                f"(first: {cut[0][1]})"
            ), not_whole_advice(
                cut[0][0],
                default=NOT_WHOLE_ADVICE,
                who="target-only baseline" if side == "baseline" else "server",
                injected=("seed",),  # the test's own: every request of it is seeded
            )
    return _prompts_differ(run)


def _one_answer(
    run: DistributionRun,
    client: DDTreeClient,
    baseline: DDTreeClient,
    prompt: Messages,
    kw: dict[str, Any],
) -> tuple[str, str] | None:
    """Name a side that gives one answer to every seed: it ignores seed or temperature."""
    single = {
        side: answers[0].text
        for side, answers in (("server", run.server), ("baseline", run.baseline))
        if len({c.text for c in answers}) == 1
    }
    n = len(run.server)
    if len(single) == 2 and single["server"] == single["baseline"]:
        return (
            f"the server and the baseline each gave one and the same answer to {n} seeds at "
            f"temperature {run.temperature:g}: either the answer to this prompt is certain at "
            "this temperature or neither side honours seed and temperature"
        ), OPEN_PROMPT_ADVICE
    named = []
    for side, text in single.items():
        target = client if side == "server" else baseline
        greedy = target.request(prompt, **{**kw, "temperature": 0.0})
        what = (
            "it ignores temperature (the answer is its temperature-0 answer)"
            if greedy.text == text
            else "it ignores seed (the same sample whatever the seed)"
        )
        named.append(f"the {side} gave one answer to {n} distinct seeds: {what}")
    return ("; ".join(named), SAMPLING_ADVICE) if named else None
