"""Sweep plan, samples and statistics (pure, no server)."""

from __future__ import annotations

import json
import statistics

import pytest

from pytest_ddtree.core.violation import Violation
from pytest_ddtree.measure.arm import ArmStats
from pytest_ddtree.measure.sweep import (
    Sample,
    SweepPlan,
    bootstrap_median_ci,
    bootstrap_median_difference,
    merge_samples,
    quantile,
    rank,
    redact_endpoint,
    run_sweep,
    summarize,
)
from pytest_ddtree.measure.sweep.race import RaceRule
from pytest_ddtree.report.arm_text import verdict_text
from pytest_ddtree.report.decision_text import sweep_answer
from pytest_ddtree.wire.completion import Completion

from ._factory import make_completion, synthetic_sweep


def test_sample_from_completion_carries_timings_and_stats() -> None:
    c = make_completion(tree_budget=128, prompt_id="code", decode_rate=640.0, acceptance=5.5)
    s = Sample.from_completion(c, [], round=2, worker="gw1", concurrent=True)
    assert s.valid and s.codes == ()
    assert (s.tree_budget, s.prompt_id, s.round, s.worker, s.concurrent) == (
        128,
        "code",
        2,
        "gw1",
        True,
    )
    assert s.decode_tokens_per_second == pytest.approx(640.0)
    assert s.ttft == pytest.approx(0.05)
    assert s.mean_acceptance_length == 5.5
    assert s.echoed_tree_budget == 128
    assert s.server_client_ratio == pytest.approx(1.0)


def test_sample_drops_non_finite_server_figures() -> None:
    from dataclasses import replace

    c = make_completion()
    assert c.stats is not None
    odd = replace(
        c, stats=replace(c.stats, server_tokens_per_second=float("nan"), decode_rounds=None)
    )
    s = Sample.from_completion(odd, [], round=0)
    assert s.server_tokens_per_second is None and s.decode_rounds is None
    assert json.dumps(s.to_json(), allow_nan=False)


def test_invalid_sample_keeps_distinct_codes_in_order() -> None:
    c = make_completion()
    vs = [
        Violation("early-stop", "4 tokens"),
        Violation("role-leak", "user:"),
        Violation("early-stop", "x"),
    ]
    s = Sample.from_completion(c, vs, round=0)
    assert not s.valid
    assert s.codes == ("early-stop", "role-leak")
    assert len(s.messages) == 3


def test_sample_json_round_trip_and_bad_field_message() -> None:
    s = Sample.from_completion(make_completion(), [Violation("x", "y")], round=1, worker="gw0")
    again = Sample.from_json(json.loads(json.dumps(s.to_json())))
    assert again == s
    bad = s.to_json() | {"round": "one"}
    with pytest.raises(
        ValueError, match=r"samples\[3\]: field 'round' must be an integer, got 'one'"
    ):
        Sample.from_json(bad, source="samples[3]")


def test_plan_interleaves_shuffled_budgets_deterministically() -> None:
    budgets = (16, 32, 64, 128, 256, 512, 1024)
    plan = SweepPlan(budgets, ("a", "b", "c"), rounds=3, warmup_rounds=1, seed=7)
    items = list(plan)
    assert len(items) == len(plan) == 4 * 7 * 3
    assert items == list(SweepPlan(budgets, ("a", "b", "c"), rounds=3, warmup_rounds=1, seed=7))
    assert [i.warmup for i in items[:21]] == [True] * 21 and not any(i.warmup for i in items[21:])
    orders = [plan.budget_order(r) for r in range(-1, 3)]
    for order in orders:
        assert sorted(order) == list(budgets)
    # A seeded shuffle: rounds differ from each other and from the sorted order.
    assert len(set(orders)) > 1
    assert SweepPlan(budgets, ("a",), seed=8).budget_order(0) != plan.budget_order(0) or (
        SweepPlan(budgets, ("a",), seed=8).budget_order(1) != plan.budget_order(1)
    )
    # Each measured round visits every (budget, prompt) exactly once.
    for r in range(3):
        pairs = [(i.tree_budget, i.prompt_id) for i in items if i.round == r]
        assert len(pairs) == len(set(pairs)) == 21


def test_fixed_order_keeps_given_order() -> None:
    plan = SweepPlan((64, 16, 256), ("a",), rounds=2, warmup_rounds=0, order="fixed")
    assert [i.tree_budget for i in plan] == [64, 16, 256, 64, 16, 256]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"budgets": ()}, "budgets must not be empty"),
        ({"budgets": (16, 0)}, "positive integers"),
        ({"budgets": (16, 16)}, "duplicate budgets"),
        ({"prompts": ()}, "prompts must not be empty"),
        ({"rounds": 0}, "rounds must be >= 1, got 0"),
        ({"warmup_rounds": -1}, "warmup_rounds must be >= 0, got -1"),
        ({"order": "random"}, "order must be 'shuffled' or 'fixed', got 'random'"),
    ],
)
def test_plan_rejects_bad_values(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"budgets": (16, 32), "prompts": ("a",)} | kwargs
    with pytest.raises(ValueError, match=message):
        SweepPlan(**args)  # type: ignore[arg-type]


def test_run_sweep_validates_warmups_and_records_timed_rounds() -> None:
    plan = SweepPlan((16, 64), ("a", "b"), rounds=2, warmup_rounds=1, order="fixed")
    seen: list[tuple[int, str]] = []

    def request(budget: int, prompt: str) -> Completion:
        seen.append((budget, prompt))
        return make_completion(tree_budget=budget, prompt_id=prompt)

    def validate(c: Completion) -> list[Violation]:
        # Budget 64 is broken on prompt b: even its warm-up must show up.
        if c.request.tree_budget == 64 and c.request.prompt_id == "b":
            return [Violation("early-stop", "too short")]
        return []

    got = run_sweep(plan, request, validate)
    assert len(seen) == 12
    # 8 timed samples plus the invalid warm-up.
    assert len(got) == 9
    warm = [s for s in got if s.round < 0]
    assert [(s.tree_budget, s.prompt_id, s.valid) for s in warm] == [(64, "b", False)]
    assert sum(not s.valid for s in got) == 3


def test_quantile_and_bootstrap_basics() -> None:
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert quantile([5.0], 0.9) == 5.0
    assert quantile([0.0, 10.0], 0.9) == pytest.approx(9.0)
    data = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0]
    ci = bootstrap_median_ci(data, seed=1)
    assert ci is not None and ci[0] <= statistics.median(data) <= ci[1]
    assert ci == bootstrap_median_ci(data, seed=1)
    assert bootstrap_median_ci([3.0]) is None
    diff = bootstrap_median_difference([100.0, 101, 99, 100, 102], [90.0, 91, 89, 90, 92])
    assert diff is not None and diff[0] == -10.0 and diff[2] < 0


def test_stats_use_valid_samples_only() -> None:
    samples = synthetic_sweep({64: 900.0}, spread=1.0)
    bad = Sample(64, "essay", 3, False, codes=("early-stop",), decode_tokens_per_second=50000.0)
    st = ArmStats.of([*samples, bad])
    assert (st.valid, st.requests) == (9, 10)
    assert not st.all_valid
    assert st.decode_median is not None and 880 < st.decode_median < 920
    assert st.codes == {"early-stop": 1}
    assert st.decode_q1 is not None and st.decode_q3 is not None
    assert st.decode_q1 <= st.decode_median <= st.decode_q3


def test_recommend_picks_peak_and_says_when_decisive() -> None:
    means = {16: 500.0, 32: 700.0, 64: 900.0, 128: 650.0, 256: 400.0}
    summary = summarize(synthetic_sweep(means, spread=10.0))
    rec = summary.recommendation
    said = sweep_answer(summary)
    assert rec.tree_budget == 64 and rec.n == 9
    assert rec.decisive and rec.tied == ()
    assert "(n=9)" in said
    assert "Every other valid budget is slower by more than the 2% margin" in said
    verdicts = {b.tree_budget: verdict_text(b) for b in summary.budgets}
    assert verdicts[64] == "best" and verdicts[32] == "slower"
    assert summary.race is not None and summary.race.mode == "exhaustive"


def test_an_undecided_sweep_names_the_budgets_it_cannot_tell_apart() -> None:
    # 905 vs 900 at 4% noise and 9 requests a budget: the rule cannot tell them apart, but
    # 32 is clearly slower, so the answer is known: 64 or 128, either one
    summary = summarize(synthetic_sweep({32: 700.0, 64: 905.0, 128: 900.0}, spread=40.0))
    rec = summary.recommendation
    said = sweep_answer(summary)
    assert rec.tree_budget is None and not rec.decided and not rec.decisive
    assert rec.leader in (64, 128)
    assert set(rec.tied) == {64, 128} - {rec.leader}
    assert rec.either == (rec.leader, *rec.tied), rec
    assert said.startswith("Either tree_budget=64 or 128: "), said
    assert "every other valid budget is slower by more than the margin" in said
    assert f"tree_budget={rec.leader} led with median decode" in said
    assert "n=9" in said and "No budget is recommended" not in sweep_answer(summary)
    assert any(verdict_text(b) == "in contention" for b in summary.budgets)
    # the JSON says so too
    assert summary.to_json()["recommendation"]["either"] == list(rec.either)


def test_an_undecided_sweep_that_excludes_nothing_names_no_budget() -> None:
    # the same two budgets alone: nothing was shown slower, so nothing is known
    summary = summarize(synthetic_sweep({64: 905.0, 128: 900.0}, spread=40.0))
    rec = summary.recommendation
    said = sweep_answer(summary)
    assert rec.either == () and rec.tree_budget is None
    assert said.startswith("Undecided:") and "No budget is recommended" in said


def test_the_smallest_budget_within_the_margin_is_recommended() -> None:
    # 128 is 0.6% faster than 64: inside the 2% margin, so the smaller tree wins
    summary = summarize(synthetic_sweep({32: 700.0, 64: 900.0, 128: 905.0}, spread=2.0))
    rec = summary.recommendation
    said = sweep_answer(summary)
    assert rec.tree_budget == 64 and rec.leader == 128 and rec.decided, said
    assert rec.tied == (128,)
    assert "Equivalent within 2%: tree_budget=128 (leads" in said
    verdicts = {b.tree_budget: verdict_text(b) for b in summary.budgets}
    assert verdicts[64] == "best (smallest as fast)"
    assert verdicts[128] == "leads within the margin"
    # a wider margin is the user's to choose: at 0.5% 128 is faster than the margin allows
    strict = summarize(
        synthetic_sweep({64: 900.0, 128: 905.0}, spread=2.0), rule=RaceRule(equivalence=0.001)
    )
    assert strict.recommendation.tree_budget != 64 or not strict.recommendation.decided


def test_no_faster_claim_below_the_minimum_n() -> None:
    # one round (n=3 a budget): a huge difference, but no interval below two values a prompt
    samples = synthetic_sweep({32: 500.0, 64: 900.0}, spread=1.0, rounds=1)
    summary = summarize(samples)
    rec = summary.recommendation
    assert rec.tree_budget is None and rec.leader == 64 and "n=3" in sweep_answer(summary)


def test_invalid_budget_is_never_recommended_even_if_fastest() -> None:
    samples = synthetic_sweep({32: 700.0, 64: 900.0, 128: 2000.0}, spread=10.0)
    samples.append(Sample(128, "essay", 0, False, codes=("early-stop",)))
    summary = summarize(samples)
    assert summary.recommendation.tree_budget == 64
    assert summary.recommendation.excluded == (128,)
    assert "Excluded for invalid responses: 128" in sweep_answer(summary)
    assert verdict_text(summary.budgets[-1]) == "INVALID (early-stop)"


def test_no_valid_budget_gives_plain_no_recommendation() -> None:
    samples = [Sample(16, "a", 0, False, codes=("empty",))]
    summary = summarize(samples)
    rec = summary.recommendation
    assert rec.tree_budget is None
    assert sweep_answer(summary).startswith(
        "No recommendation: no budget produced valid timed requests"
    )


def test_rank_breaks_throughput_ties_by_acceptance_length_not_rate() -> None:
    # Equal medians: the budget with the longer acceptance length ranks first,
    # although its acceptance *rate* (length / budget) is lower.
    a = [
        Sample(32, "p", r, True, decode_tokens_per_second=800.0, mean_acceptance_length=3.0)
        for r in range(3)
    ]
    b = [
        Sample(256, "p", r, True, decode_tokens_per_second=800.0, mean_acceptance_length=6.0)
        for r in range(3)
    ]
    ranked = rank([ArmStats.of(a), ArmStats.of(b)])
    assert [s.tree_budget for s in ranked] == [256, 32]


def test_recommendation_is_deterministic_and_seeded() -> None:
    samples = synthetic_sweep({32: 880.0, 64: 900.0}, spread=30.0)
    assert summarize(samples, seed=3).to_json() == summarize(samples, seed=3).to_json()
    assert summarize(samples).recommendation.leader == 64


def test_merge_is_independent_of_worker_finish_order() -> None:
    w0 = [Sample(64, "a", 0, True, worker="gw0"), Sample(16, "b", 1, True, worker="gw0")]
    w1 = [Sample(16, "a", 0, True, worker="gw1")]
    assert merge_samples(w0, w1) == merge_samples(w1, w0)
    assert [(s.round, s.tree_budget) for s in merge_samples(w0, w1)] == [(0, 16), (0, 64), (1, 16)]


def test_echoed_budget_mismatch_is_flagged_in_verdict() -> None:
    samples = [
        Sample(64, "a", r, True, decode_tokens_per_second=900.0 + r, echoed_tree_budget=16)
        for r in range(3)
    ]
    st = summarize(samples).budgets[0]
    assert st.echoed_mismatch == 3
    assert "echoed budget differs" in verdict_text(st)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("https://bob:hunter2@api.example.com/v1", "https://***@api.example.com/v1"),
        ("https://h/v1?api_key=sk-123&region=eu", "https://h/v1?api_key=***&region=eu"),
    ],
)
def test_redact_endpoint(url: str, expected: str) -> None:
    assert redact_endpoint(url) == expected
    assert "hunter2" not in redact_endpoint(url) and "sk-123" not in redact_endpoint(url)


def test_stratified_bootstrap_separates_budgets_that_prompt_spread_would_blur() -> None:
    # Prompts differ by +-15% in speed; rounds barely vary. Budget 64 is 4% faster
    # on every prompt: resampling within prompts sees it, pooled resampling does not.
    prompt_speed = {"essay": 0.85, "code": 1.0, "list": 1.15}
    samples = [
        Sample(b, p, r, True, decode_tokens_per_second=mu * f * (1 + 0.002 * r))
        for b, mu in ((32, 1000.0), (64, 1040.0))
        for p, f in prompt_speed.items()
        for r in range(3)
    ]
    summary = summarize(samples)
    rec = summary.recommendation
    assert rec.tree_budget == 64 and rec.decisive, sweep_answer(summary)
    a = [s.decode_tokens_per_second or 0.0 for s in samples if s.tree_budget == 32]
    b = [s.decode_tokens_per_second or 0.0 for s in samples if s.tree_budget == 64]
    pooled = bootstrap_median_difference(a, b)
    assert pooled is not None and pooled[1] < 0 < pooled[2]
    # With one sample per prompt there is no within-prompt noise: fall back to pooled.
    single = [s for s in samples if s.round == 0]
    assert not summarize(single).recommendation.decisive


def test_the_server_s_own_budget_alone_is_recommended_with_its_n() -> None:
    # --ddtree-budget-mode none: one arm, keyed None; nothing to race it against
    samples = [
        Sample(None, p, r, True, decode_tokens_per_second=100.0 + r)
        for p in ("a", "b", "c")
        for r in range(3)
    ]
    summary = summarize(samples)
    rec = summary.recommendation
    said = sweep_answer(summary)
    assert rec.decided and rec.tree_budget is None and rec.n == 9, said
    assert said.startswith("Recommended tree_budget=server-default")
    assert "only budget with valid timings" in said
    assert verdict_text(summary.budgets[0]) == "best"
    invalid = [*samples, Sample(None, "a", 3, False, codes=("empty",))]
    bad = summarize(invalid)
    assert not bad.recommendation.decided
    assert sweep_answer(bad).startswith("No recommendation")
    assert verdict_text(summarize(invalid).budgets[0]).startswith("INVALID")


def test_a_budget_as_fast_as_the_leader_keeps_the_set_from_being_the_answer() -> None:
    from pytest_ddtree.measure.sweep.decision import decide
    from pytest_ddtree.measure.sweep.race import Judgement, Standing

    rule = RaceRule()

    def standing(key: int, status: str) -> Standing[int | None]:
        return Standing(key, 9, 900.0, status)  # type: ignore[arg-type]

    lead, open_ = standing(64, "leader"), [standing(256, "in contention")]
    slower = standing(512, "out")
    both = (lead, open_[0], slower)
    tied = decide(Judgement(both, 64, False, None, rule))
    assert tied.status == "tied" and tied.arms == (64, 256)
    # 128 as fast as the leader but not in the set: "every other budget is slower" is false
    fast = (lead, standing(128, "as fast"), open_[0], slower)
    assert decide(Judgement(fast, 64, False, None, rule)).status == "undecided"


# ------------------------------------------- which invalid requests count against a budget


def _timed(budget: int, rate: float, round_: int) -> Sample:
    completion = make_completion(tree_budget=budget, decode_rate=rate)
    return Sample.from_completion(completion, [], round=round_)


def _broken(budget: int, blame: str | None, *, smoke: bool = False, round_: int = 0) -> Sample:
    completion = make_completion(tree_budget=budget, prompt_id="cite")
    found = [Violation("no-source", "the answer cites no source")]
    return Sample.from_completion(
        completion, found, round=-1 if smoke else round_, blame=blame, smoke=smoke
    )


@pytest.mark.parametrize(
    ("broken", "held"),
    [
        # a failure the diagnosis puts on the prompt or the serving stack: not the budget's
        (_broken(16, "template"), False),
        (_broken(16, "server"), False),
        # a timed failure blamed on speculation, or not placed, is the budget's
        (_broken(16, "speculation"), True),
        (_broken(16, "undetermined"), True),
        (_broken(16, None), True),
        # the untimed smoke request counts only when speculation is blamed
        (_broken(16, "undetermined", smoke=True), False),
        (_broken(16, None, smoke=True), False),
        (_broken(16, "template", smoke=True), False),
        (_broken(16, "speculation", smoke=True), True),
    ],
)
def test_an_invalid_request_counts_against_its_budget_only_when_it_is_the_budgets(
    broken: Sample, held: bool
) -> None:
    assert broken.against_budget is held
    samples = [_timed(16, 900.0, r) for r in range(6)] + [_timed(64, 800.0, r) for r in range(6)]
    summary = summarize([*samples, broken], seed=1)
    sixteen = next(b for b in summary.budgets if b.tree_budget == 16)
    assert (sixteen.valid, sixteen.requests) == ((6, 7) if held else (6, 6))
    assert dict(sixteen.codes) == ({"no-source": 1} if held else {})
    assert (summary.recommendation.tree_budget == 64) is held
    assert ("Excluded for invalid responses: 16" in sweep_answer(summary)) is held


def test_a_smoke_request_alone_at_a_budget_makes_no_row() -> None:
    # timed at 64, its smoke request at the smallest budget, 16, failed on the prompt
    samples = [_timed(64, 800.0, r) for r in range(3)]
    summary = summarize([*samples, _broken(16, "template", smoke=True)], seed=1)
    assert [b.tree_budget for b in summary.budgets] == [64]
    assert summary.recommendation.tree_budget == 64


def test_the_blame_and_the_smoke_mark_survive_the_json() -> None:
    sample = _broken(16, "template", smoke=True)
    again = Sample.from_json(json.loads(json.dumps(sample.to_json())))
    assert (again.blame, again.smoke, again.round) == ("template", True, -1)
    # a report written before them reads as before: not blamed, timed
    old = {k: v for k, v in sample.to_json().items() if k not in ("blame", "smoke")}
    assert (Sample.from_json(old).blame, Sample.from_json(old).smoke) == (None, False)
