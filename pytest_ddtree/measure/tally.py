"""``SpecTally``: the speculation figures a sweep budget and a load point both count.

How many draft tokens the requests reported, how many requests reported a count, how many
answers were read for speculative statistics and how many carried some. The sweep's
``BudgetStats`` and the load's ``PointStats`` each hold one (``spec``), so the two tables
and ``sweep.json`` count and name them the same way.

The one home of ``spec_reported``, ``never_drafted`` and ``no_spec_stats``: counted from the
samples (``SpecTally.of``), judged (``SpecTally.never_drafted``, ``SpecTally.no_spec_stats``)
and written (``TalliedSpeculation.spec_json``) here only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pytest_ddtree.measure.sample import Sample

__all__ = ["SpecTally", "TalliedSpeculation", "silent"]


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


class TalliedSpeculation:
    """The figures of the ``SpecTally`` a record holds (``spec``), read by name: the sweep's
    ``BudgetStats`` and the load's ``PointStats`` both derive from this, so their tables
    read the same names."""

    spec: SpecTally

    @property
    def drafted_tokens(self) -> int:
        """Draft tokens summed over the requests that reported a count."""
        return self.spec.drafted_tokens

    @property
    def draft_reports(self) -> int:
        """Requests that reported a draft count."""
        return self.spec.draft_reports

    @property
    def stats_asked(self) -> int:
        """Answers that were read for speculative statistics."""
        return self.spec.stats_asked

    @property
    def spec_reports(self) -> int:
        """Answers that carried speculative statistics."""
        return self.spec.spec_reports

    @property
    def no_spec_stats(self) -> bool:
        """Answers were read for speculative statistics and not one carried any."""
        return self.spec.no_spec_stats

    @property
    def never_drafted(self) -> bool:
        """Requests reported their draft counts and not one drafted a token: no speculation."""
        return self.spec.never_drafted

    def spec_json(self) -> dict[str, Any]:
        """The speculation figures as ``sweep.json`` writes them, for a budget and a load
        point alike."""
        return {
            "drafted_tokens": self.drafted_tokens,
            "draft_reports": self.draft_reports,
            "never_drafted": self.never_drafted,
            "stats_asked": self.stats_asked,
            "spec_reports": self.spec_reports,
            "no_speculative_statistics": self.no_spec_stats,
        }
