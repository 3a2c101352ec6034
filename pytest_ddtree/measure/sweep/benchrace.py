"""Racing the parametrised benchmark tests: one (prompt, budget) test at a time.

pytest-benchmark times a test whole, so the benchmark tests of one test function
are put in prompt-major order (every budget of the first prompt, then of the
second, ...) and each prompt is one round of the race: a test whose budget has
left the race, or that comes after the race was decided, is skipped with the
reason. The values of a round are the test's timed rounds of one prompt, back
to back; their spread is the within-prompt spread the rule needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.measure.sweep.race import Race, RaceRule


@dataclass
class BenchRace:
    """The race of one benchmark test function's (prompt, budget) tests."""

    race: Race[int | None]
    _prompt: str | None = None
    _keys: list[int | None] = field(default_factory=list)
    _over: str | None = None

    @classmethod
    def of(cls, budgets: Iterable[int | None], rule: RaceRule, per_round: int) -> BenchRace:
        """A new race over ``budgets`` (``per_round``: timed rounds of one test)."""
        return cls(Race(budgets, rule, per_round=per_round))

    def admit(self, prompt: str, budget: int | None) -> str | None:
        """None when the test of (``prompt``, ``budget``) runs, else why it is skipped."""
        if prompt != self._prompt and self._over is None:
            self._prompt = prompt
            self._keys = self.race.next_round()
            if not self._keys:
                self._over = self._why_over()
        if self._over is not None:
            return self._over
        if budget in self._keys:
            return None
        gone = next((e for e in self.race.exits if e.key == budget), None)
        if gone is None:
            return "not in the race"
        reason = gone.reason
        if gone.leader is not None:
            reason = reason.replace("the leader", f"tree_budget={budget_label(gone.leader)}", 1)
        return (
            f"tree_budget={budget_label(budget)} left the race after {gone.after_requests} "
            f"requests: {reason}"
        )

    def _why_over(self) -> str:
        j = self.race.judgement()
        if j.decided:
            return (
                f"race decided after {self.race.requests} requests: "
                f"tree_budget={budget_label(j.recommended)} recommended"
            )
        return (
            f"race undecided: the request budget ({self.race.rule.max_requests}) is spent "
            f"after {self.race.requests} requests"
        )
