"""``SpecTally``: the speculation figures every arm counts.

How many draft tokens the requests reported, how many requests reported a count, how many
answers were read for speculative statistics and how many carried some. Each arm's
statistics (``measure.arm.ArmStats``, the sweep's budgets and the load's points alike) hold
one (``spec``), so the two tables and ``sweep.json`` count and name them the same way.

The one home of ``spec_reported``, ``never_drafted`` and ``no_spec_stats``: counted from the
samples (``SpecTally.of``) and judged (``SpecTally.never_drafted``,
``SpecTally.no_spec_stats``) here only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pytest_ddtree.measure.sample import Sample

__all__ = ["SpecTally", "silent"]


def silent(asked: int, reported: int) -> bool:
    """Answers were read for speculative statistics (``asked``) and none carried any."""
    return asked > 0 and reported == 0


@dataclass(frozen=True)
class SpecTally:
    """Speculation counted over a group of requests (valid or not)."""

    #: draft tokens summed over the requests that reported a count, and how many did
    drafted_tokens: int = 0
    draft_reports: int = 0
    #: answers that were read for speculative statistics, and how many carried some
    stats_asked: int = 0
    spec_reports: int = 0

    @classmethod
    def of(cls, samples: Iterable[Sample]) -> SpecTally:
        """Count the samples' draft counts (None: not reported) and whether the statistics
        asked for came back (``spec_reported``; None: not asked)."""
        samples = list(samples)
        counted = [d for s in samples if (d := s.drafted_tokens) is not None]
        answers = [r for s in samples if (r := s.spec_reported) is not None]
        return cls(
            drafted_tokens=sum(counted),
            draft_reports=len(counted),
            stats_asked=len(answers),
            spec_reports=sum(1 for r in answers if r),
        )

    @property
    def no_spec_stats(self) -> bool:
        """Answers were read for speculative statistics and not one carried any."""
        return silent(self.stats_asked, self.spec_reports)

    @property
    def never_drafted(self) -> bool:
        """Requests reported their draft counts and not one drafted a token: no speculation."""
        return self.draft_reports > 0 and self.drafted_tokens == 0 and not self.no_spec_stats
