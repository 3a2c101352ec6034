"""Load points and their arrival schedules.

A load point is either a fixed concurrency ``C`` (C requests always in flight: a
new one starts as soon as one ends, the closed-loop model) or an arrival rate
``λ`` requests/s (open loop): inter-arrival gaps are exponential (Poisson
arrivals) or gamma distributed with a *burstiness* factor. The gamma shape is
the burstiness and its scale ``1 / (λ · burstiness)``, so the mean rate stays
``λ`` whatever the burstiness: 1 is Poisson, below 1 burstier, above 1 more
regular. Schedules are seeded, so a run can be repeated exactly.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

from pytest_ddtree.core import jsonmodel

__all__ = ["LoadPoint", "arrival_offsets"]

Mode = Literal["concurrency", "rate"]


@dataclass(frozen=True, order=True)
class LoadPoint:
    """One level of load: ``concurrency`` C, or ``rate`` λ requests/s (with burstiness)."""

    mode: Mode
    value: float
    burstiness: float = 1.0

    def __post_init__(self) -> None:
        if self.mode not in ("concurrency", "rate"):
            raise ValueError(f"LoadPoint.mode: expected concurrency or rate, got {self.mode!r}")
        v = self.value
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"LoadPoint.value: expected a number > 0, got {v!r}")
        if self.mode == "concurrency" and int(v) != v:
            raise ValueError(f"LoadPoint.value: a concurrency is a whole number, got {v!r}")
        b = self.burstiness
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) or b <= 0:
            raise ValueError(f"LoadPoint.burstiness: expected a number > 0, got {b!r}")

    @property
    def concurrency(self) -> int | None:
        """C for a concurrency point, else None."""
        return int(self.value) if self.mode == "concurrency" else None

    @property
    def label(self) -> str:
        """``C=16`` or ``rate=4/s`` (``rate=4/s,burst=0.5`` when not Poisson)."""
        if self.mode == "concurrency":
            return f"C={int(self.value)}"
        burst = "" if self.burstiness == 1.0 else f",burst={self.burstiness:g}"
        return f"rate={self.value:g}/s{burst}"

    def split(self, share: int, shares: int) -> LoadPoint | None:
        """This worker's part of the point when ``shares`` processes share it (None: nothing).

        Concurrency is dealt out as evenly as whole requests allow (the first
        workers take one more); a rate is divided evenly. The parts add up to
        the whole, so the merged run has the total load.
        """
        if shares <= 1:
            return self
        if self.mode == "concurrency":
            c = int(self.value)
            mine = c // shares + (1 if share < c % shares else 0)
            return LoadPoint("concurrency", mine) if mine else None
        return LoadPoint("rate", self.value / shares, self.burstiness)


jsonmodel.register(
    LoadPoint,
    value=jsonmodel.override(struct_hook=jsonmodel.number),
    burstiness=jsonmodel.override(struct_hook=jsonmodel.number),
)


def arrival_offsets(
    rate: float, count: int, *, burstiness: float = 1.0, seed: int = 0
) -> list[float]:
    """Seconds from the start at which each of ``count`` requests is sent.

    The first request goes at 0; gaps are gamma(shape=burstiness,
    scale=1/(rate·burstiness)) — exponential, i.e. Poisson arrivals, at
    burstiness 1. Same arguments, same schedule.
    """
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"arrival_offsets: rate must be a number > 0, got {rate!r}")
    if not (math.isfinite(burstiness) and burstiness > 0):
        raise ValueError(f"arrival_offsets: burstiness must be a number > 0, got {burstiness!r}")
    rng = random.Random(f"ddtree-arrivals:{seed}:{rate!r}:{burstiness!r}")
    out: list[float] = []
    t = 0.0
    for i in range(count):
        if i:
            t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
        out.append(t)
    return out
