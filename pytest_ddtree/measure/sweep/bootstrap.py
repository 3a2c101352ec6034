"""Seeded bootstrap intervals: the same samples and seed always give the same interval.

Only the standard library: quantiles, and seeded percentile-bootstrap confidence
intervals of a statistic, of a median, and of the difference of two medians
(stratified by prompt where asked).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence

from pytest_ddtree.core.wording import percent

#: Resamples per bootstrap; 2,000 keeps a 95% percentile interval stable to a
#: few tenths of a percent while a 7-budget report stays well under a second.
BOOTSTRAP_RESAMPLES = 2000
#: Confidence of every interval of a median (None below: this, read when used).
CONFIDENCE = 0.95


def _confidence(confidence: float | None) -> float:
    return CONFIDENCE if confidence is None else confidence


def confidence_text(confidence: float | None = None) -> str:
    """``95%``: the confidence of an interval (None: :data:`CONFIDENCE`), as text shows it."""
    return percent(_confidence(confidence))


def ci_name(confidence: float | None = None) -> str:
    """``95% CI``: an interval named by its confidence (None: :data:`CONFIDENCE`)."""
    return f"{confidence_text(confidence)} CI"


def quantile(data: Sequence[float], q: float) -> float:
    """Linearly interpolated quantile (the usual "type 7"); ``data`` non-empty."""
    if not data:
        raise ValueError("quantile of an empty sequence")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile: q must be within [0, 1], got {q!r}")
    xs = sorted(data)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _rng(seed: int, *salt: object) -> random.Random:
    return random.Random(":".join(["ddtree-boot", str(seed), *map(str, salt)]))


def _resampler(
    data: Sequence[float], strata: Sequence[str] | None
) -> Callable[[random.Random], list[float]]:
    """One bootstrap resample of ``data``, within strata when that is sound.

    Every budget of a sweep is measured on the same prompts, and prompts
    differ in speed far more than rounds do; resampling within each prompt
    keeps the prompt mix fixed, so intervals reflect the round-to-round noise
    a repeated sweep would see. With fewer than two values in some stratum
    there is no within-prompt noise to resample, so the plain bootstrap is used.
    """
    xs = list(data)
    if strata is not None and len(strata) == len(xs):
        groups: dict[str, list[float]] = {}
        for x, key in zip(xs, strata, strict=True):
            groups.setdefault(key, []).append(x)
        if len(groups) > 1 and all(len(g) >= 2 for g in groups.values()):
            # Small strata make the bootstrap too confident (its variance is
            # (n-1)/n of the truth); spreading each stratum around its mean by
            # sqrt(n/(n-1)) undoes that, which matters with 2-3 rounds a prompt.
            parts = []
            for key in sorted(groups):
                g = groups[key]
                mean = statistics.fmean(g)
                scale = math.sqrt(len(g) / (len(g) - 1))
                parts.append([mean + (x - mean) * scale for x in g])
            return lambda rng: [x for g in parts for x in rng.choices(g, k=len(g))]
    n = len(xs)
    return lambda rng: rng.choices(xs, k=n)


def bootstrap_ci(
    data: Sequence[float],
    statistic: Callable[[Sequence[float]], float] = statistics.median,
    *,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float | None = None,
    salt: object = "",
    strata: Sequence[str] | None = None,
) -> tuple[float, float] | None:
    """Percentile-bootstrap confidence interval of ``statistic``; None below 2 values.

    ``strata`` (e.g. the prompt of each value) resamples within each stratum.
    """
    if len(data) < 2:
        return None
    rng = _rng(seed, "ci", salt)
    draw = _resampler(data, strata)
    values = sorted(statistic(draw(rng)) for _ in range(resamples))
    alpha = (1.0 - _confidence(confidence)) / 2.0
    return quantile(values, alpha), quantile(values, 1.0 - alpha)


def bootstrap_median_ci(
    data: Sequence[float],
    *,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float | None = None,
    salt: object = "",
    strata: Sequence[str] | None = None,
) -> tuple[float, float] | None:
    """Percentile-bootstrap confidence interval of the median; None below 2 values."""
    return bootstrap_ci(
        data,
        statistics.median,
        seed=seed,
        resamples=resamples,
        confidence=confidence,
        salt=salt,
        strata=strata,
    )


def bootstrap_median_difference(
    a: Sequence[float],
    b: Sequence[float],
    *,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float | None = None,
    relative: bool = False,
    salt: object = "",
    strata_a: Sequence[str] | None = None,
    strata_b: Sequence[str] | None = None,
) -> tuple[float, float, float] | None:
    """Bootstrap of ``median(b) - median(a)`` (or ``median(b)/median(a) - 1``).

    Returns ``(estimate, low, high)``; the difference is significant at the
    given confidence when the interval excludes zero. None when either side
    has fewer than two values (no honest interval exists then). ``strata_a``
    and ``strata_b`` (the prompt of each value) resample within prompts.
    """
    if len(a) < 2 or len(b) < 2:
        return None
    ma, mb = statistics.median(a), statistics.median(b)
    if relative and ma == 0:
        return None
    rng = _rng(seed, "diff", salt)
    draw_a, draw_b = _resampler(a, strata_a), _resampler(b, strata_b)
    diffs: list[float] = []
    for _ in range(resamples):
        ra = statistics.median(draw_a(rng))
        rb = statistics.median(draw_b(rng))
        if relative:
            if ra == 0:
                continue
            diffs.append(rb / ra - 1.0)
        else:
            diffs.append(rb - ra)
    if not diffs:
        return None
    diffs.sort()
    alpha = (1.0 - _confidence(confidence)) / 2.0
    estimate = (mb / ma - 1.0) if relative else (mb - ma)
    return estimate, quantile(diffs, alpha), quantile(diffs, 1.0 - alpha)
