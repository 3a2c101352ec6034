"""``SpecStats``: the speculation statistics of one answer, normalised from any dialect.

A plain record (no I/O): every dialect's parser returns one, and the checks, the sweep
and the reports read it. ``pytest_ddtree.wire.completion`` re-exports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from pytest_ddtree.core.dialects.base import lookup


def rounds_reaching(histogram: Sequence[int]) -> tuple[int, ...]:
    """Rounds that accepted at least ``d`` drafts, for ``d`` = 0, 1, ..., from a
    histogram of rounds by accepted drafts; index 0 counts every round. Trailing
    depths no round reached are cut after the first; empty without any round."""
    out: list[int] = []
    left = sum(histogram)
    for count in histogram:
        out.append(left)
        left -= count
    while len(out) > 2 and out[-1] == 0 and out[-2] == 0:
        out.pop()
    return tuple(out) if out and out[0] else ()


def conditional_acceptance(histogram: Sequence[int]) -> tuple[float, ...]:
    """Conditional acceptance at depth ``d`` = 1, 2, ...: of the rounds whose draft was
    accepted up to depth ``d - 1``, the share accepted at depth ``d`` too."""
    return tuple(b / a for a, b in pairwise(rounds_reaching(histogram)) if a)


@dataclass(frozen=True)
class SpecStats:
    """Speculation statistics normalised from any dialect (see ``core.dialects``).

    ``dialect`` is the name of the dialect that read them (``core.dialects.get``
    gives its plug-in: what its statistics promise).

    ``mean_acceptance_length`` counts tokens committed per decode round, bonus
    token included: 1.0 means no draft token was ever accepted.

    ``acceptance_histogram[k]`` is the number of decode rounds that accepted
    exactly ``k`` draft tokens (acceptance by depth), as the server reported it;
    ``depth_source`` names the field it was read from (None when the server
    reports no histogram). ``num_spec_tokens`` is the draft length per round
    (vLLM's ``k``) when the server says.
    """

    dialect: str
    tree_budget: int | None = None
    decode_rounds: int | None = None
    mean_acceptance_length: float | None = None
    server_tokens_per_second: float | None = None
    block_size: int | None = None
    num_draft_tokens: int | None = None
    num_accepted_draft_tokens: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)
    acceptance_histogram: tuple[int, ...] | None = None
    depth_source: str | None = None
    num_spec_tokens: int | None = None

    @property
    def speculative(self) -> bool:
        """Whether these statistics say anything about speculation: drafts, acceptance,
        rounds or a budget. A dialect whose statistics always come (llama.cpp's
        ``timings``) names the field present only when it drafted (its ``drafted_key``)."""
        plugin = lookup(self.dialect)
        if plugin is not None and plugin.drafted_key is not None:
            return plugin.drafted_key in self.raw
        return any(
            v is not None
            for v in (
                self.tree_budget,
                self.decode_rounds,
                self.mean_acceptance_length,
                self.num_draft_tokens,
                self.num_accepted_draft_tokens,
                self.acceptance_histogram,
            )
        )

    @property
    def rounds_reaching(self) -> tuple[int, ...]:
        """Rounds that accepted at least ``d`` drafts, ``d`` = 0, 1, ... (see
        ``rounds_reaching``)."""
        return rounds_reaching(self.acceptance_histogram or ())

    @property
    def acceptance_by_depth(self) -> tuple[float, ...]:
        """Conditional acceptance at depth ``d`` = 1, 2, ... (see ``conditional_acceptance``)."""
        return conditional_acceptance(self.acceptance_histogram or ())

    @property
    def histogram_acceptance_length(self) -> float | None:
        """Mean tokens committed per round by the histogram (accepted drafts + the
        bonus token), or None without one."""
        hist = self.acceptance_histogram
        rounds = sum(hist) if hist else 0
        if not hist or rounds <= 0:
            return None
        return sum((k + 1) * n for k, n in enumerate(hist)) / rounds

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted over drafted tokens (0..1), or None when nothing was drafted or
        either count is unknown. Unlike the mean acceptance length it falls as
        the draft grows, so it is shown only where the length is unknown."""
        drafted, accepted = self.num_draft_tokens, self.num_accepted_draft_tokens
        if drafted is None or accepted is None or isinstance(drafted, bool) or drafted <= 0:
            return None
        if isinstance(accepted, bool) or not isinstance(accepted, int) or accepted < 0:
            return None
        return accepted / drafted
