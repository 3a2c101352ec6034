"""Acceptance by depth: how deep the accepted prefixes of the draft tree reach.

Servers that report an acceptance histogram (rounds that accepted 0, 1, 2, ...
drafts) let a sweep answer "is the tree budget too low?": if, at the largest
budget, the rounds that reached the deepest levels were still accepted further
most of the time, deeper trees would still be accepted; if acceptance has
fallen off well before, more nodes buy little. The histograms of one budget's
valid requests are pooled (summed), so every round counts once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.wire.completion import conditional_acceptance, rounds_reaching

#: a conditional acceptance is judged only where at least this many rounds got there
MIN_ROUNDS = 10
#: a mean accepted length that grew by less than this (relative) from the next smaller
#: budget to the largest has stopped growing
PLATEAU = 0.02
#: at or above this conditional acceptance at the deepest judged depth, deeper trees are
#: still accepted
STILL_ACCEPTED = 0.5


@dataclass(frozen=True)
class DepthProfile:
    """The pooled acceptance histogram of one budget.

    ``histogram[k]`` counts the rounds (over ``requests`` valid requests) that
    accepted exactly ``k`` drafts; ``sources`` names the server fields it came from.
    """

    histogram: tuple[int, ...]
    requests: int
    sources: tuple[str, ...]

    @property
    def decode_rounds(self) -> int:
        """Every decode round counted."""
        return sum(self.histogram)

    @property
    def reaching(self) -> tuple[int, ...]:
        """Rounds that accepted at least ``d`` drafts, ``d`` = 0, 1, ...."""
        return rounds_reaching(self.histogram)

    @property
    def conditional(self) -> tuple[float, ...]:
        """Conditional acceptance at depth ``d`` = 1, 2, ...: of the rounds accepted up
        to depth ``d - 1``, the share accepted at depth ``d`` too."""
        return conditional_acceptance(self.histogram)

    @property
    def per_position(self) -> tuple[float, ...]:
        """Share of all rounds that accepted a draft at depth ``d`` = 1, 2, ... (what
        vLLM's per-position counters give)."""
        total = self.decode_rounds
        return tuple(n / total for n in self.reaching[1:]) if total else ()

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens committed per round: accepted drafts plus the bonus token."""
        total = self.decode_rounds
        if not total:
            return None
        return sum((k + 1) * n for k, n in enumerate(self.histogram)) / total

    def deepest(self) -> int:
        """The deepest depth any round's draft was accepted to (0: none ever)."""
        r = self.reaching
        return max((d for d in range(len(r)) if r[d] > 0), default=0)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form for ``sweep.json``."""
        return dict(jsonmodel.to_json(self))


jsonmodel.register(
    DepthProfile,
    read=False,
    derived={
        "rounds": lambda p: p.decode_rounds,
        "conditional_acceptance": lambda p: [round(x, 4) for x in p.conditional],
        "per_position_acceptance": lambda p: [round(x, 4) for x in p.per_position],
        "mean_accepted_length": lambda p: p.mean_accepted_length,
    },
    order=("histogram", "rounds", "requests", "sources"),
)


def depth_profile(samples: Iterable[Sample]) -> DepthProfile | None:
    """The pooled histogram of the valid ``samples`` that carry one, or None."""
    pooled: list[int] = []
    requests = 0
    sources: list[str] = []
    for s in samples:
        if not s.valid or not s.acceptance_histogram:
            continue
        requests += 1
        if len(pooled) < len(s.acceptance_histogram):
            pooled.extend([0] * (len(s.acceptance_histogram) - len(pooled)))
        for k, n in enumerate(s.acceptance_histogram):
            pooled[k] += n
        if s.depth_source and s.depth_source not in sources:
            sources.append(s.depth_source)
    if not requests or not sum(pooled):
        return None
    return DepthProfile(tuple(pooled), requests, tuple(sources))
