"""Drift: did the server stay the same while the sweep ran?

A sweep with ``recheck`` measures its first budget once more after the last
round (samples marked ``drift_mark="end"``) and compares that repeat with the
first measurement of the same budget (``drift_mark="start"``), prompt by
prompt: each prompt's ratio median(end) / median(start) of decode tokens/s,
and the median of those ratios with its 95% percentile-bootstrap interval.
Pairing by prompt matters: prompts differ in speed far more than a repeat of
the same prompt does, and an unpaired interval would mostly measure the
prompt mix. The rule:

    the sweep is drifting when the 95% bootstrap interval of the median
    end/start ratio excludes 1 **and** the ratio itself is off by more than
    :data:`DRIFT_MARGIN` (5%).

The interval alone would call a real but tiny change drift (a long sweep on a
quiet server measures 1-2% differences with confidence); the margin alone
would call noise drift. Both together flag a change that is both real and
large enough to move a recommendation. The repeat is not counted in the
budget's statistics: those stay one measurement per round. The check itself,
:func:`~pytest_ddtree.sweep.statistics.check_drift`, lives with the bootstrap
it uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ddtree.settings import budget_label
from pytest_ddtree.sweep.samples import SweepSample

#: The practical margin: a change of the decode median smaller than this is not drift.
DRIFT_MARGIN = 0.05


@dataclass(frozen=True)
class DriftCheck:
    """The first budget measured at the start and again at the end of a sweep.

    ``ratio`` is the median over prompts of median(end) / median(start) of
    decode tokens/s, ``ci`` its 95% bootstrap interval (None with fewer than
    two prompts timed on both sides);
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

    def line(self) -> str:
        """One line for the terminal and the report."""
        label = budget_label(self.tree_budget)
        if self.ratio is None or self.ci is None:
            return (
                f"drift not assessed at tree_budget={label}: {len(self.start)} timing(s) at the "
                f"start and {len(self.end)} at the end; the interval needs two prompts timed "
                "at both (sweep two prompts or more)"
            )
        change = f"{(self.ratio - 1.0) * 100:+.0f}%"
        what = (
            f"tree_budget={label} measured again at the end: median decode {change} "
            f"(ratio {self.ratio:.2f}, 95% CI {self.ci[0]:.2f}-{self.ci[1]:.2f}, "
            f"{len(self.start)} vs {len(self.end)} requests)"
        )
        if self.drifting:
            return (
                f"DRIFT: {what}; the server changed during the sweep (throttling, another "
                "tenant, a restart?), so the budgets measured at different times are not "
                "comparable"
            )
        return f"no drift: {what}; within the rule (interval includes 1 or change <= 5%)"

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form for ``sweep.json``."""
        return {
            "tree_budget": self.tree_budget,
            "start_n": len(self.start),
            "end_n": len(self.end),
            "ratio": self.ratio,
            "ci95": None if self.ci is None else list(self.ci),
            "margin": DRIFT_MARGIN,
            "assessed": self.assessed,
            "drifting": self.drifting,
            "message": self.line(),
        }


def without_repeats(samples: Sequence[SweepSample]) -> list[SweepSample]:
    """The samples that count in the budget statistics: valid repeats are left out.

    An invalid repeat stays: a broken answer is broken whenever it came.
    """
    return [s for s in samples if not (s.drift_mark == "end" and s.valid)]


def drift_message(checks: Sequence[DriftCheck]) -> str:
    """What the recommendation adds when the sweep drifted ("" when it did not)."""
    drifted = [c for c in checks if c.drifting]
    if not drifted:
        return ""
    c = drifted[0]
    assert c.ratio is not None
    return (
        f" The sweep drifted: tree_budget={budget_label(c.tree_budget)} measured again at the "
        f"end ran at {c.ratio:.2f}x its first speed, so this recommendation cannot be trusted "
        "as is; rerun on a quiet server."
    )
