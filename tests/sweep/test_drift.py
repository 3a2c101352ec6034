"""Drift: the first budget measured again at the end, the rule, and a real mid-run slowdown."""

from __future__ import annotations

import json
import random
import textwrap
from dataclasses import replace
from typing import Any

import pytest

from pytest_ddtree.core.options import resolve
from pytest_ddtree.core.settings import SettingsError
from pytest_ddtree.measure.sweep import Sample, SweepPlan, summarize
from pytest_ddtree.measure.sweep.drift import DRIFT_MARGIN, DRIFT_PAIRS
from pytest_ddtree.measure.sweep.statistics import check_drift
from pytest_ddtree.reference import ServerOptions, start_reference_server, tokenizer_path
from pytest_ddtree.reference.cost import DEFAULT_PROMPTS
from pytest_ddtree.reference.server import options_to_argv
from pytest_ddtree.report import read_sweep_json
from pytest_ddtree.report.arm_text import verdict_text
from pytest_ddtree.report.decision_text import drift_line, sweep_answer

PROMPTS = ("a", "b", "c", "d")


def _samples(end_factor: float, *, noise: float, prompts: tuple[str, ...] = PROMPTS) -> list[Any]:
    """A two-budget sweep (3 rounds) with drift blocks of budget 16; the end block runs at
    ``end_factor`` of the speed."""
    rng = random.Random(7)
    speed = {p: 100.0 + 20 * i for i, p in enumerate(prompts)}  # prompts differ in speed
    repeats = -(-DRIFT_PAIRS // len(prompts))

    def sample(budget: int, p: str, r: int, factor: float = 1.0, mark: str | None = None) -> Any:
        rate = speed[p] * factor * (1 + rng.uniform(-noise, noise))
        return Sample(budget, p, r, True, decode_tokens_per_second=rate, drift_mark=mark)

    out = [sample(16, p, 0, mark="start") for _ in range(repeats) for p in prompts]
    out += [sample(b, p, r) for r in range(3) for b in (16, 64) for p in prompts]
    out += [sample(16, p, 3, end_factor, "end") for _ in range(repeats) for p in prompts]
    return out


def test_plan_measures_the_first_budget_at_the_start_and_again_at_the_end() -> None:
    plan = SweepPlan((64, 16, 256), ("a", "b"), rounds=2, warmup_rounds=1, seed=3, recheck=True)
    items = list(plan)
    assert plan.drift_repeats == 4  # 8 pairs from two prompts
    assert len(items) == len(plan) == 3 * 3 * 2 + 2 * 8
    first = plan.budget_order(0)[0]
    start = [i for i in items if i.drift_mark == "start"]
    end = [i for i in items if i.drift_mark == "end"]
    assert items[6:14] == start  # right after the warm-up round
    assert items[-8:] == end  # the repeat comes last
    assert {(i.round, i.tree_budget) for i in start} == {(0, first)}
    assert {(i.round, i.tree_budget) for i in end} == {(2, first)}
    assert [i.prompt_id for i in end] == [i.prompt_id for i in start] == ["a", "b"] * 4
    assert not any(i.drift_mark for i in SweepPlan((16, 64), ("a",)))  # off by default


def test_a_halved_speed_at_the_end_is_drift_and_the_recommendation_says_so() -> None:
    summary = summarize(_samples(0.5, noise=0.05))
    (check,) = summary.drift
    assert check.drifting and check.ratio is not None and check.ci is not None
    assert check.ci[1] < 1.0 and check.ratio < 0.6
    rec = summary.recommendation
    assert rec.drifting and not rec.decisive
    assert "cannot be trusted as is" in sweep_answer(summary)
    verdicts = {b.tree_budget: verdict_text(b) for b in summary.budgets}
    assert verdicts[16].endswith("(DRIFTING)") and "DRIFTING" not in verdicts[64]
    doc = summary.to_json()
    assert doc["drift"][0]["drifting"] is True and doc["recommendation"]["drifting"] is True


def test_noise_of_a_healthy_run_is_not_drift() -> None:
    for seed_noise in (0.05, 0.15, 0.25):
        summary = summarize(_samples(1.0, noise=seed_noise))
        (check,) = summary.drift
        assert check.assessed and not check.drifting, drift_line(check)
        assert not summary.recommendation.drifting
        assert "drifted" not in sweep_answer(summary)


def test_a_real_change_within_the_margin_is_not_drift() -> None:
    # 3% slower with almost no noise: the interval excludes 1, the margin holds it back
    summary = summarize(_samples(1.0 - DRIFT_MARGIN * 0.6, noise=0.002))
    (check,) = summary.drift
    assert check.ci is not None and check.ci[1] < 1.0  # real, and measured as real
    assert not check.drifting


def test_the_drift_blocks_are_not_counted_in_the_budget_statistics() -> None:
    samples = _samples(0.5, noise=0.05)
    stats = {b.tree_budget: b for b in summarize(samples).budgets}
    assert stats[16].requests == stats[64].requests == 12
    # an invalid answer in them still counts: a broken answer is broken whenever it came
    bad = [
        replace(s, valid=False, codes=("early-stop",)) if s.drift_mark == "end" else s
        for s in samples
    ]
    stats = {b.tree_budget: b for b in summarize(bad).budgets}
    assert stats[16].requests == 12 + 8 and not stats[16].all_valid


def test_too_few_pairs_is_not_assessed_and_says_why() -> None:
    samples = _samples(0.5, noise=0.05)
    starts = [i for i, s in enumerate(samples) if s.drift_mark == "start"]
    for i in starts[3:]:
        samples[i] = replace(samples[i], valid=False, codes=("early-stop",))
    (check,) = check_drift(samples)
    assert not check.assessed and not check.drifting
    assert drift_line(check) == (
        "drift not assessed at tree_budget=16: 3 valid start/end pair(s), the rule needs 8"
    )


def test_no_repeat_no_drift_check() -> None:
    samples = [s for s in _samples(1.0, noise=0.05) if s.drift_mark != "end"]
    summary = summarize(samples)
    assert summary.drift == () and "drift" not in summary.to_json()


def test_drift_survives_the_json_round_trip() -> None:
    samples = _samples(0.5, noise=0.05)
    again = [Sample.from_json(json.loads(json.dumps(s.to_json()))) for s in samples]
    assert summarize(again).drift == summarize(samples).drift


# ---------------------------------------------------------------- real pytest runs

_SWEEP = textwrap.dedent(
    f"""
    PROMPTS = {dict((f"p{i}", p) for i, p in enumerate(DEFAULT_PROMPTS[:4]))!r}

    def test_sweep(ddtree_sweep):
        ddtree_sweep(PROMPTS, max_tokens=48, rounds=2, warmup_rounds=1)
    """
)


def _run(pytester: pytest.Pytester, *args: str) -> tuple[Any, Any]:
    pytester.makepyfile(test_sweep=_SWEEP)
    report = pytester.path / "report"
    result = pytester.runpytest(
        f"--ddtree-tokenizer={tokenizer_path()}",
        "--ddtree-budgets=16,64",
        f"--ddtree-report={report}",
        "-p",
        "no:cacheprovider",
        *args,
    )
    result.assert_outcomes(passed=1)
    return result, read_sweep_json(report / "sweep.json")


@pytest.mark.serial
def test_mid_run_slowdown_of_the_embedded_server_is_flagged_as_drift(
    pytester: pytest.Pytester,
) -> None:
    # 4 smoke + 8 warm-up + 8 in the start block + 8 in round 0 = 28 requests at full
    # speed; round 1 and the end block run 4 times slower
    result, run = _run(pytester, "--ddtree-reference-slowdown-after=28:4")
    result.stdout.fnmatch_lines(
        ["*(DRIFTING)*", "DRIFT: tree_budget=* measured again at the end: median decode -*"]
    )
    # a 4x slowdown mid-run leaves the race undecided or the winner in doubt: either way flagged
    result.stdout.fnmatch_lines(["*tree_budget=*cannot be trusted as is*"])
    summary = run.summary()
    (check,) = summary.drift
    assert check.drifting and check.ratio is not None and check.ratio < 0.5, drift_line(check)
    assert sum(s.drift_mark == "end" for s in run.samples) == 8
    html = (pytester.path / "report" / "sweep.html").read_text()
    assert "server drifted" in html and "<h2>Drift</h2>" in html


@pytest.mark.serial
def test_a_healthy_server_is_not_flagged(pytester: pytest.Pytester) -> None:
    server = start_reference_server()  # simulated latency on: steady timings
    try:
        result, run = _run(pytester, f"--ddtree-endpoint={server.base_url}")
    finally:
        server.stop()
    (check,) = run.summary().drift
    assert check.assessed and not check.drifting, drift_line(check)
    result.stdout.fnmatch_lines(["no drift: tree_budget=* measured again at the end*"])
    assert "cannot be trusted" not in result.stdout.str()


# ---------------------------------------------------------------- the slowdown option


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"slowdown_after": -1}, "slowdown_after: must be an integer >= 0, got -1"),
        ({"slowdown_after": 5, "slowdown_factor": 0}, "slowdown_factor: must be a number > 0"),
    ],
)
def test_server_slowdown_rejects_bad_values(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServerOptions(**kwargs)


def test_server_slowdown_on_the_command_line() -> None:
    from pytest_ddtree.reference.__main__ import build_parser, options_from_args

    ns = build_parser().parse_args(["--slowdown-after", "12", "--slowdown-factor", "2.5"])
    opts = options_from_args(ns)
    assert (opts.slowdown_after, opts.slowdown_factor) == (12, 2.5)
    assert options_to_argv(opts)[-4:] == ["--slowdown-after", "12", "--slowdown-factor", "2.5"]


def test_plugin_slowdown_option_is_for_the_embedded_server_only() -> None:
    assert resolve({"ddtree_reference_slowdown_after": "40"}, {}, {}).reference_slowdown_after == (
        40,
        3.0,
    )
    with pytest.raises(SettingsError, match=r"invalid reference-slowdown-after '40:x' \(from"):
        resolve({"ddtree_reference_slowdown_after": "40:x"}, {}, {})
    with pytest.raises(SettingsError, match="only the embedded server can be slowed down"):
        resolve(
            {
                "ddtree_reference_slowdown_after": "40",
                "ddtree_endpoint": "http://127.0.0.1:9/v1",
            },
            {},
            {},
        )


def test_plugin_jitter_option_is_for_the_embedded_server_only() -> None:
    assert resolve({"ddtree_reference_jitter": "5%"}, {}, {}).reference_jitter == 0.05
    assert resolve({"ddtree_reference_jitter": "0.1"}, {}, {}).reference_jitter == 0.1
    with pytest.raises(SettingsError, match=r"invalid reference-jitter '-1' \(from"):
        resolve({"ddtree_reference_jitter": "-1"}, {}, {})
    with pytest.raises(SettingsError, match="only the embedded server has simulated costs"):
        resolve(
            {"ddtree_reference_jitter": "0.05", "ddtree_endpoint": "http://127.0.0.1:9/v1"},
            {},
            {},
        )
