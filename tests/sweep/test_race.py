"""The race rule (pure, simulated arms with a known truth)."""

from __future__ import annotations

import math
import random

import pytest

from pytest_ddtree.measure.sweep.race import (
    Judgement,
    Race,
    RaceRule,
    Standing,
    judge,
    slowdown_interval,
)
from pytest_ddtree.report.race_text import reason


def _simulate(truth: dict[int, float], rule: RaceRule, seed: int, cv: float = 0.03) -> Race[int]:
    rng = random.Random(seed)
    race: Race[int] = Race(truth, rule, per_lap=2, seed=seed)
    while keys := race.next_lap():
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
    assert left[1024].why is not None and left[1024].why.kind == "out"
    assert "more than the 2% margin" in reason(left[1024].why)


def test_a_spent_request_budget_is_undecided_never_a_forced_winner() -> None:
    truth = {16: 100.0, 64: 102.0}  # exactly the margin: never resolves
    race = _simulate(truth, RaceRule(equivalence=0.02, min_n=6, max_requests=40), seed=2)
    assert race.spent and race.requests <= 40
    j = race.judgement()
    assert not j.decided and j.recommended is None and j.contending


def test_an_excluded_arm_never_wins() -> None:
    race: Race[int] = Race([16, 64], RaceRule(min_n=2), per_lap=1)
    race.exclude(64, "INVALID (early-stop)")
    while keys := race.next_lap():
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


def test_looks_spend_the_confidence_so_all_looks_add_up_to_it() -> None:
    rule = RaceRule(confidence=0.95)
    alphas = [1 - rule.look_confidence(k) for k in range(1, 200)]
    assert alphas[0] == pytest.approx(0.025) and sum(alphas) < 0.05
    assert alphas == sorted(alphas, reverse=True)


def test_the_t_quantile_matches_the_tables() -> None:
    from pytest_ddtree.measure.sweep.race import _t_quantile

    tables = [(0.975, 1, 12.706), (0.975, 2, 4.303), (0.995, 2, 9.925), (0.975, 3, 3.182)]
    for p, df, table in [*tables, (0.975, 6, 2.447), (0.995, 10, 3.169)]:
        assert _t_quantile(p, df) == pytest.approx(table, rel=0.01)


def test_the_interval_is_balanced_over_prompts_and_in_log_space() -> None:
    # prompt b is twice as fast as a at both arms; the arm is exactly 10% slower on each
    lead = [100.0, 101.0, 99.0, 200.0, 202.0, 198.0]
    arm = [90.0, 90.9, 89.1, 180.0, 181.8, 178.2]
    strata = ["a", "a", "a", "b", "b", "b"]
    d = slowdown_interval(arm, strata, lead, strata, RaceRule())
    assert d is not None and d[0] == pytest.approx(0.10) and d[1] < 0.10 < d[2]
    # one value a prompt: no spread to judge by, no interval (no claim below the minimum)
    one = slowdown_interval([90.0, 180.0], ["a", "b"], [100.0, 200.0], ["a", "b"], RaceRule())
    assert one is None


def test_one_stalled_request_does_not_decide_the_race() -> None:
    rng = random.Random(7)
    lead = [1000 * rng.gauss(1.0, 0.02) for _ in range(12)]
    arm = [1000 * rng.gauss(1.0, 0.02) for _ in range(12)]
    strata = ["a", "b", "c"] * 4
    arm[4] = 100.0  # one request the machine stalled: ten times slower
    d = slowdown_interval(arm, strata, lead, strata, RaceRule())
    assert d is not None and d[0] < 0.05, d  # the mean of raw logs would say about 19%


def test_an_arm_near_the_margin_s_edge_ends_by_its_estimate_once_the_interval_is_narrow() -> None:
    # 64 is 1.7% slower than 128 with a 2% margin: its interval keeps crossing the margin,
    # but once it is narrower than the margin the estimate decides: as fast, and smaller
    truth = {64: 983.0, 128: 1000.0}
    race = _simulate(truth, RaceRule(equivalence=0.02, min_n=6), seed=3, cv=0.01)
    j = race.judgement()
    small = j.standing(64)
    assert j.decided and j.recommended == 64 and small.status == "as fast", small.why
    assert small.slowdown is not None and small.slowdown[2] > 0.02  # crosses the margin
    assert small.slowdown[2] - small.slowdown[1] < 0.02


def test_a_race_record_says_who_left_when_in_json() -> None:
    truth = {16: 100.0, 64: 130.0}
    race = _simulate(truth, RaceRule(min_n=6, max_requests=200), seed=4)
    doc = race.record().to_json()
    assert doc["mode"] == "adaptive" and doc["decided"] and doc["recommended"] == 64
    (gone,) = doc["exits"]
    assert gone["key"] == 16 and gone["status"] == "out" and gone["round"] == 3
    assert gone["after_requests"] == 12 and gone["n"] == 6 and gone["leader"] == 64
    assert doc["max_requests"] == 200 and doc["look"] >= 1


def _benchmark_race(seed: int, block: float, within: float) -> Race[int]:
    """Two equal arms raced as benchmark tests: one test per (prompt, arm), its three
    timed rounds back to back and sharing the test's own conditions (``block``)."""
    rng = random.Random(seed)
    race: Race[int] = Race([16, 64], RaceRule(), per_lap=3)
    for prompt in "abcdef":
        for key in race.next_lap():
            shared = rng.gauss(0, block)
            for _ in range(3):
                race.add(key, 1000 * math.exp(shared + rng.gauss(0, within)), prompt)
    race.finish()
    return race


def test_equal_arms_under_noise_shared_by_a_test_are_rarely_called_out() -> None:
    # 5% between tests, 1% within one: the test (the race's round) is the unit, so the
    # shared noise is in the interval; taking every timed round as its own replicate
    # called one of two equal arms out in about two races of three
    outs = sum(
        any(s.status == "out" for s in _benchmark_race(seed, 0.05, 0.01).judgement().standings)
        for seed in range(100)
    )
    assert outs <= 6, outs


def test_noise_shared_by_every_arm_of_a_round_cancels() -> None:
    # a round's drift (here up to +-20%) hits every arm alike: paired by round, two
    # equal arms are as fast after a few rounds despite it
    rng = random.Random(5)
    race: Race[int] = Race([16, 64], RaceRule(min_n=6), per_lap=3)
    while keys := race.next_lap():
        drift = rng.uniform(-0.2, 0.2)
        for key in keys:
            for prompt in "abc":
                race.add(key, 1000 * math.exp(drift + rng.gauss(0, 0.003)), prompt)
    j = race.judgement()
    assert j.decided and j.recommended == 16 and race.laps <= 4


def test_an_exhaustive_sweep_with_rounds_is_judged_by_round() -> None:
    # the same values as (value, prompt) pairs are independent replicates (a narrow
    # interval); as (value, prompt, round) triples a round's shared noise widens it
    rng = random.Random(11)
    data = {
        k: [
            (1000 * math.exp(b + rng.gauss(0, 0.005)), "a", r)
            for r in range(4)
            for b in [rng.gauss(0, 0.04)]
            for _ in range(3)
        ]
        for k in (16, 64)
    }
    pairs = {k: [(v, s) for v, s, _ in vs] for k, vs in data.items()}
    blocked, loose = _follower(judge(data)), _follower(judge(pairs))
    assert blocked.slowdown is not None and loose.slowdown is not None
    assert blocked.slowdown[2] - blocked.slowdown[1] > 2 * (loose.slowdown[2] - loose.slowdown[1])


def _follower(j: Judgement[int]) -> Standing[int]:
    return next(s for s in j.standings if s.status != "leader")
