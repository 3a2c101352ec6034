"""Racing the parametrised benchmark tests: one (prompt, budget, pass) test at a time.

pytest-benchmark times a test whole, so the benchmark tests of one test function
are put in pass-major, then prompt-major order (every budget of the first prompt,
then of the second, ..., then the next pass over the prompts). A test whose budget
has left the race, or that comes after the race was decided, is skipped with the
reason. The values of a test are its timed rounds of one prompt, back to back. Why a test is skipped
is data (``Refusal``); the report words it.

In the first pass each prompt is a lap of the race: a look there counts one
prompt's budget differences as noise, so only a clearly slower budget leaves. From
the second pass on a lap is a whole pass (every prompt once, at each budget still
racing), as in ``ddtree_sweep``: a block holds every prompt, the prompts' own
differences between budgets cancel, and what is left is the noise from one test to
the next of the same prompt and budget, which only repeating the tests measures.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from pytest_ddtree.measure.sweep.race import Exit, Race, RaceRule


@dataclass(frozen=True)
class Refusal:
    """Why a benchmark test of a race is not run: the race is over (``decided``, with the
    budget it ``recommended``; ``spent``, its request budget ``max_requests`` spent;
    ``undecided``), its budget left (``left``: its ``exit``), or its budget is not in the
    race (``not raced``). ``requests``: what the race had spent."""

    kind: Literal["decided", "spent", "undecided", "left", "not raced"]
    requests: int
    recommended: int | None = None
    max_requests: int | None = None
    exit: Exit[int | None] | None = None


@dataclass
class BenchRace:
    """The race of one benchmark test function's (prompt, budget, pass) tests."""

    race: Race[int | None]
    #: timed rounds of one test
    per_test: int = 1
    _prompt: str | None = None
    _pass: int = 1
    _prompts: list[str] = field(default_factory=list)
    _keys: list[int | None] = field(default_factory=list)
    _over: Refusal | None = None

    @classmethod
    def of(cls, budgets: Iterable[int | None], rule: RaceRule, per_lap: int) -> BenchRace:
        """A new race over ``budgets`` (``per_lap``: timed rounds of one test)."""
        return cls(Race(budgets, rule, per_lap=per_lap), per_test=per_lap)

    def admit(self, prompt: str, budget: int | None, pass_: int = 1) -> Refusal | None:
        """None when the test of (``prompt``, ``budget``, ``pass_``) runs, else why it is
        skipped."""
        if self._over is None:
            if pass_ > self._pass:
                self._next_pass(pass_)
            elif pass_ == 1 and prompt != self._prompt:
                self._prompt = prompt
                if prompt not in self._prompts:
                    self._prompts.append(prompt)
                self._next(self.race.next_lap())
        if self._over is not None:
            return self._over
        if budget in self._keys:
            return None
        gone = next((e for e in self.race.exits if e.key == budget), None)
        if gone is None:
            return Refusal("not raced", self.race.requests)
        return Refusal("left", self.race.requests, exit=gone)

    def _next_pass(self, pass_: int) -> None:
        """A new pass over the prompts: from the second on, a lap is a whole pass."""
        first = self._pass == 1
        self._pass = pass_
        if first:
            # the first pass is one block from now on (its prompts were looked at as laps
            # already; judged again as laps it would only spend confidence)
            self.race.regroup(self.per_test * max(1, len(self._prompts)), prompt_cells=True)
        self._next(self.race.next_lap())

    def _next(self, keys: list[int | None]) -> None:
        self._keys = keys
        if not keys:
            self._over = self._why_over()

    def _why_over(self) -> Refusal:
        j = self.race.judgement()
        requests = self.race.requests
        if j.decided:
            return Refusal("decided", requests, recommended=j.recommended)
        if self.race.spent:
            return Refusal("spent", requests, max_requests=self.race.rule.max_requests)
        return Refusal("undecided", requests)
