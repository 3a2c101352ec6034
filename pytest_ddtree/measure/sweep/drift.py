"""Drift: did the server stay the same while the sweep ran?

A sweep with ``recheck`` measures its first budget in two extra blocks: right
after the warm-up (samples marked ``drift_mark="start"``) and again after the
last round (``"end"``), the same prompts the same number of times. The i-th
start and the i-th end request of a prompt make a pair; each pair gives a
ratio end / start of decode tokens/s. Pairing matters: prompts differ in speed
far more than two requests of one prompt do, and an unpaired interval would
mostly measure the prompt mix. The rule:

    the sweep is drifting when the 99% bootstrap interval of the median
    end/start ratio excludes 1 **and** that median is more than
    :data:`DRIFT_MARGIN` (5%) away from 1, with at least
    :data:`DRIFT_PAIRS` pairs.

A bootstrap interval of a median from a handful of values is too narrow (from
three values it is their range, which misses the true median one time in
four), so the blocks hold at least eight pairs and the interval is taken at
99%: on pure noise the rule then fires 3-5% of the time on a very noisy
shared machine (10-30% spread per request) and never on a quiet one
(``benchmarks/bench_drift.py`` measures it). The interval alone would call a real but
tiny change drift; the margin alone would call noise drift. The blocks are
not counted in the budget's statistics (an invalid answer in them is: a
broken answer is broken whenever it came). The check itself is
:func:`check_drift`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep.bootstrap import bootstrap_median_ci

#: The practical margin: a change of the decode median smaller than this is not drift.
DRIFT_MARGIN = 0.05
#: Start/end pairs the drift blocks hold at least (fewer: not assessed).
DRIFT_PAIRS = 8
#: Confidence of the drift interval.
DRIFT_CONFIDENCE = 0.99


@dataclass(frozen=True)
class DriftCheck:
    """The first budget measured at the start and again at the end of a sweep.

    ``ratio`` is the median of the paired end/start ratios of decode
    tokens/s, ``ci`` its bootstrap interval at :data:`DRIFT_CONFIDENCE` (None with fewer than
    :data:`DRIFT_PAIRS` pairs);
    ``drifting`` applies the rule of this module.
    """

    tree_budget: int | None
    start: tuple[float, ...]
    end: tuple[float, ...]
    ratio: float | None
    ci: tuple[float, float] | None

    @property
    def assessed(self) -> bool:
        """True when both sides had enough timings for an interval."""
        return self.ratio is not None and self.ci is not None

    @property
    def drifting(self) -> bool:
        """The rule: the interval excludes 1 and the ratio is beyond the margin."""
        if self.ratio is None or self.ci is None:
            return False
        excludes_one = self.ci[0] > 1.0 or self.ci[1] < 1.0
        return excludes_one and abs(self.ratio - 1.0) > DRIFT_MARGIN

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form for ``sweep.json``."""
        return dict(jsonmodel.to_json(self))


jsonmodel.register(
    DriftCheck,
    read=False,
    start=jsonmodel.override(omit=True),
    end=jsonmodel.override(omit=True),
    ci=jsonmodel.override(rename="ci99"),
    derived={
        "pairs": lambda c: min(len(c.start), len(c.end)),
        "margin": lambda c: DRIFT_MARGIN,
        "assessed": lambda c: c.assessed,
        "drifting": lambda c: c.drifting,
    },
    order=("tree_budget", "pairs", "ratio", "ci99", "margin", "assessed", "drifting"),
)


def without_repeats(samples: Sequence[Sample]) -> list[Sample]:
    """The samples that count in the budget statistics: the valid drift blocks are left out.

    An invalid answer in them stays: a broken answer is broken whenever it came.
    """
    return [s for s in samples if not (s.drift_mark is not None and s.valid)]


def _drift_pairs(samples: Sequence[Sample]) -> list[tuple[float, float]]:
    """The i-th start and i-th end request of each prompt (and worker), both valid and timed."""
    blocks: dict[tuple[str, str, str], list[float | None]] = {}
    for s in samples:
        if s.drift_mark in ("start", "end"):
            rate = s.decode_tokens_per_second if s.valid else None
            blocks.setdefault((s.drift_mark, s.worker or "", s.prompt_id), []).append(rate)
    pairs: list[tuple[float, float]] = []
    for (mark, worker, prompt), starts in blocks.items():
        if mark != "start":
            continue
        for a, b in zip(starts, blocks.get(("end", worker, prompt), []), strict=False):
            if a is not None and b is not None and a > 0:
                pairs.append((a, b))
    return pairs


def check_drift(samples: Sequence[Sample], *, seed: int = 0) -> tuple[DriftCheck, ...]:
    """One drift check per budget measured again at the end (none without drift blocks).

    See :mod:`~pytest_ddtree.measure.sweep.drift` for the rule: the ratios are paired by prompt.
    """
    rechecked = dict.fromkeys(s.tree_budget for s in samples if s.drift_mark == "end")
    checks: list[DriftCheck] = []
    for budget in rechecked:
        pairs = _drift_pairs([s for s in samples if s.tree_budget == budget])
        ratios = [b / a for a, b in pairs]
        ci = (
            bootstrap_median_ci(
                ratios, seed=seed, salt=f"drift{budget}", confidence=DRIFT_CONFIDENCE
            )
            if len(ratios) >= DRIFT_PAIRS
            else None
        )
        checks.append(
            DriftCheck(
                budget,
                tuple(a for a, _ in pairs),
                tuple(b for _, b in pairs),
                statistics.median(ratios) if ci is not None else None,
                ci,
            )
        )
    return tuple(checks)
