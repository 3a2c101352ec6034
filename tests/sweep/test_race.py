"""The race rule (pure, simulated arms with a known truth)."""

from __future__ import annotations

import random

import pytest

from pytest_ddtree.sweep.race import Race, RaceRule, judge


def _simulate(truth: dict[int, float], rule: RaceRule, seed: int, cv: float = 0.03) -> Race[int]:
    rng = random.Random(seed)
    race: Race[int] = Race(truth, rule, per_round=2, seed=seed)
    while keys := race.next_round():
        for key in keys:
            for prompt in ("a", "b"):
                race.add(key, truth[key] * rng.gauss(1.0, cv), prompt)
    return race


def test_a_clearly_slower_arm_leaves_and_the_smallest_as_fast_arm_wins() -> None:
    truth = {16: 100.0, 64: 130.0, 256: 130.5, 1024: 80.0}
    race = _simulate(truth, RaceRule(equivalence=0.02, min_n=6), seed=1)
    j = race.judgement()
    assert j.decided and j.recommended == 64
    left = {e.key: e for e in race.exits}
    assert left[16].status == "out" and left[1024].status == "out"
    assert {j.standing(64).status, j.standing(256).status} == {"leader", "as fast"}
    assert "more than the 2% margin" in left[1024].reason


def test_a_spent_request_budget_is_undecided_never_a_forced_winner() -> None:
    truth = {16: 100.0, 64: 102.0}  # exactly the margin: never resolves
    race = _simulate(truth, RaceRule(equivalence=0.02, min_n=6, max_requests=40), seed=2)
    assert race.spent and race.requests <= 40
    j = race.judgement()
    assert not j.decided and j.recommended is None and j.contending


def test_an_excluded_arm_never_wins() -> None:
    race: Race[int] = Race([16, 64], RaceRule(min_n=2), per_round=1)
    race.exclude(64, "INVALID (early-stop)")
    while keys := race.next_round():
        for k in keys:
            race.add(k, 50.0, "a")
    assert race.judgement().recommended == 16
    assert race.exits[0].status == "excluded"


def test_lower_is_better_for_latencies() -> None:
    data = {16: [(10.0 + i * 0.01, "a") for i in range(12)], 32: [(20.0, "a")] * 12}
    j = judge(data, RaceRule(higher_is_better=False, min_n=6))
    assert j.leader == 16 and j.standing(32).status == "out" and j.recommended == 16


@pytest.mark.parametrize(
    "kwargs",
    [{"equivalence": 0.0}, {"equivalence": 0.5}, {"min_n": 1}, {"max_requests": 0}],
)
def test_bad_rules_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="race:"):
        RaceRule(**kwargs)  # type: ignore[arg-type]
