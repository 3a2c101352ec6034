"""The race of parametrised benchmark tests: prompts as rounds, then passes as rounds."""

from __future__ import annotations

import math
import random

from pytest_ddtree.measure.sweep.benchrace import BenchRace
from pytest_ddtree.measure.sweep.race import RaceRule
from pytest_ddtree.report.race_text import refusal_text

PROMPTS = ("essay", "story", "login")
#: budget -> each prompt's decode rate: 32 is 0%, 6.3% and 6.5% slower than 64 prompt by
#: prompt (4.3% over the three), as on the embedded server; 1024 is far slower everywhere
RATES = {
    32: (1170.0, 1060.0, 1094.0),
    64: (1170.0, 1131.0, 1170.0),
    1024: (288.0, 255.0, 255.0),
}


def _race(
    passes: int, seed: int, rates: dict[int, tuple[float, ...]] = RATES, test_cv: float = 0.01
) -> tuple[BenchRace, list[str]]:
    """The tests of ``passes`` passes in collection order (pass, prompt, budget); every
    test is 3 timed rounds sharing a test's own factor (``test_cv``), each 1% apart."""
    rng = random.Random(seed)
    bench = BenchRace.of(sorted(rates), RaceRule(), per_lap=3)
    skips: list[str] = []
    for pass_ in range(1, passes + 1):
        for i, prompt in enumerate(PROMPTS):
            for budget in sorted(rates):
                why = bench.admit(prompt, budget, pass_)
                if why is not None:
                    skips.append(f"pass={pass_} {prompt} {budget}: {refusal_text(why, budget)}")
                    continue
                test = math.exp(rng.gauss(0, test_cv))
                for _ in range(3):
                    value = rates[budget][i] * test * math.exp(rng.gauss(0, 0.01))
                    bench.race.add(budget, value, prompt)
    bench.race.finish()
    return bench, skips


def test_one_test_a_prompt_and_budget_cannot_tell_front_runners_apart() -> None:
    # each prompt is a round: the prompts' own differences (0% to 6.5%) are noise there
    decided = sum(_race(1, seed)[0].race.judgement().decided for seed in range(20))
    assert decided == 0


def test_passes_over_the_prompts_decide_and_the_slower_budget_leaves_first() -> None:
    right = 0
    for seed in range(20):
        bench, skips = _race(4, seed)
        j = bench.race.judgement()
        assert not j.decided or j.recommended == 64, (seed, j)
        right += j.decided
        # 1024 left in the first pass, after two prompts: its later tests were skipped
        assert any(s.startswith("pass=1 login 1024: tree_budget=1024 left") for s in skips)
        decided_early = [s for s in skips if "race decided after" in s]
        assert not decided_early or j.decided, skips  # a skip as decided is never undone
    assert right >= 15, right


def test_equal_budgets_are_rarely_called_out_over_passes() -> None:
    # two budgets with the same rates, each test 3% off on its own (the noise one test
    # shares): the passes are the replicates, so one is rarely called slower
    same = {32: RATES[64], 64: RATES[64]}
    outs = 0
    for seed in range(60):
        j = _race(4, seed, same, test_cv=0.03)[0].race.judgement()
        outs += any(s.status == "out" for s in j.standings)
    assert outs <= 3, outs


def test_a_race_decided_in_the_first_pass_skips_every_later_test() -> None:
    bench, skips = _race(3, 0, {32: RATES[32], 1024: RATES[1024]})
    # 1024 left after two prompts; 32 is left alone, so the race is decided there
    j = bench.race.judgement()
    assert j.decided and j.recommended == 32
    assert bench.race.requests == 2 * 2 * 3  # two prompts, two budgets, three rounds
    assert len(skips) == 2 + 2 * 3 * 2  # the first pass's last prompt, then every pass
    assert all("race decided after 12 requests: tree_budget=32" in s for s in skips), skips
