"""The break-even map: speculation off is an arm, the answer never names a budget slower than
the target alone, and a map without a twin says the speedup was not measured."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import replace

import pytest

from pytest_ddtree.measure.breakeven import (
    OFF,
    BreakEvenMap,
    Cell,
    acceptance_slope,
    cell_of,
    crossover,
    race_cell,
)
from pytest_ddtree.measure.sample import SERIAL, Sample
from pytest_ddtree.measure.sweep.race import RaceRule
from pytest_ddtree.reference import start_reference_server
from pytest_ddtree.report.breakeven_text import (
    NOT_MEASURED,
    breakeven_answer,
    cell_text,
    map_lines,
)

PROMPTS = [f"p{i}" for i in range(5)]


def _cell(
    rates: Mapping[int | None, float], depth: int = 1024, *, noise: float = 0.03, seed: int = 0
) -> Cell:
    """A cell raced against a simulated server: each arm's decode rate, with noise."""
    rng = random.Random(seed)

    def send(arm: int | None, pid: str, lap: int) -> Sample:
        rate = rates[arm] * (1 + 0.05 * PROMPTS.index(pid)) * (1 + rng.gauss(0, noise))
        accept = None if arm == OFF else 3.0
        return Sample(
            arm,
            pid,
            lap,
            True,
            decode_tokens_per_second=rate,
            mean_acceptance_length=accept,
            context_depth=depth,
        )

    rule = RaceRule(max_requests=len(rates) * len(PROMPTS) * 12)
    samples, record = race_cell(list(rates), PROMPTS, send, rule, seed=seed)
    return cell_of(depth, SERIAL, samples, record, baseline=OFF in rates)


def test_every_budget_slower_than_the_target_alone_answers_off() -> None:
    cell = _cell({OFF: 1000.0, 16: 850.0, 64: 700.0})
    assert cell.answered and cell.off and cell.answer == OFF
    assert cell.best == 16 and cell.speedup is not None and cell.speedup.slower


def test_off_as_fast_as_the_best_budget_is_off() -> None:
    # 64 is half a percent ahead, inside the 2% margin: no reason to speculate
    cell = _cell({OFF: 1000.0, 64: 1005.0}, noise=0.005)
    assert cell.decision.status == "recommended" and cell.off


def test_a_faster_budget_is_named_with_its_speedup_over_the_target_alone() -> None:
    cell = _cell({OFF: 500.0, 16: 800.0, 64: 1000.0})
    assert cell.answered and cell.answer == 64 and not cell.off
    ratio = cell.speedups[64]
    assert ratio.low < 2.0 < ratio.high and ratio.faster


def test_an_undecided_cell_whose_speedup_excludes_one_says_why_the_two_intervals_differ() -> None:
    from pytest_ddtree.report.breakeven_text import map_lines

    decided = _cell({OFF: 500.0, 64: 1000.0})
    assert decided.speedup is not None and decided.speedup.faster
    line = "undecided though the speedup's interval excludes 1"
    found = BreakEvenMap((decided,), True, None, {"C=1": crossover([decided])})
    assert not any(x.startswith(line) for x in map_lines(found))  # decided: nothing to explain
    # the race undecided (its own interval crossing the margin), the speedup's above 1
    cell = replace(
        decided,
        answered=False,
        answer=None,
        decision=replace(decided.decision, status="undecided", arms=(OFF, 64)),
    )
    found = BreakEvenMap((cell,), True, None, {"C=1": crossover([cell])})
    (said,) = [x for x in map_lines(found) if x.startswith(line)]
    assert "(1024 at C=1)" in said and "against the 2% margin" in said


def test_without_a_twin_the_speedup_is_not_measured() -> None:
    cell = _cell({16: 800.0, 64: 1000.0})
    assert cell.answer == 64 and cell.speedup is None and not cell.speedups
    found = BreakEvenMap((cell,), False, None, {"C=1": crossover([cell])})
    said = breakeven_answer(found)
    assert NOT_MEASURED in said and "x [" not in said  # no ratio is guessed
    assert "crossover at C=1: not measured (no target-only twin)" in map_lines(found)


def test_the_crossover_is_where_speculation_stops_paying_for_good() -> None:
    cells = [
        _cell({OFF: 500.0, 64: 1000.0}, 512),
        _cell({OFF: 500.0, 64: 600.0}, 2048),
        _cell({OFF: 500.0, 64: 300.0}, 8192),
    ]
    assert crossover(cells) == 8192
    found = BreakEvenMap(tuple(cells), True, None, {"C=1": crossover(cells)})
    said = breakeven_answer(found)
    assert said.startswith("Break-even: up to 2048 prompt tokens: tree_budget=64, 1.")
    assert "; at 8192: speculation off (best budget 0." in said
    # a slower depth in the middle, faster again beyond it, is no crossover
    assert crossover([cells[2], _cell({OFF: 500.0, 64: 1000.0}, 16384)]) is None


def test_acceptance_falls_with_each_doubling_of_the_prompt() -> None:
    samples = [
        Sample(64, p, 0, True, mean_acceptance_length=4.0 - 0.5 * k, context_depth=512 * 2**k)
        for k in range(4)
        for p in PROMPTS
    ] + [Sample(OFF, "p0", 0, True, context_depth=512)]
    slope = acceptance_slope(samples, 0.95)
    assert slope is not None and slope.per_doubling == pytest.approx(-0.5)
    assert slope.figure == "mean_acceptance_length" and slope.n == 20


def test_the_bundled_map_on_the_embedded_server_reports_off_where_every_budget_loses(
    pytester: pytest.Pytester,
) -> None:
    # 4096 prompt tokens: the reference server's verification cost and its drafter's lost
    # track make every budget slower than its target-only twin (docs/reference-server.md)
    result = pytester.runpytest_subprocess(
        "--pyargs",
        "pytest_ddtree.suite",
        "-k",
        "break_even",
        "--ddtree-context",
        "4096",
        "--ddtree-budgets",
        "16,64",
        "--ddtree-report",
        "rep",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "Break-even: at 4096 prompt tokens: speculation off (best budget 0." in out
    doc = json.loads((pytester.path / "rep" / "sweep.json").read_text())
    (found,) = doc["breakeven"]
    (cell,) = found["cells"]
    assert cell["answer_label"] == "off" and found["baseline"] is True
    assert found["message"] in out
    html = (pytester.path / "rep" / "sweep.html").read_text()
    assert 'class="stats breakeven"' in html and "hsl(0, 65%" in html  # red: slower


def test_a_failure_the_target_alone_shares_is_timed_not_held_against_the_arm() -> None:
    # a small model loops on a long prompt with speculation and without it: the same tokens,
    # decoded either way; the loop is the model's, so both arms keep their timings
    def send(arm: int | None, pid: str, lap: int) -> Sample:
        rate = (500.0 if arm == OFF else 1000.0) * (1 + 0.01 * lap)
        return Sample(
            arm, pid, lap, False, codes=("degenerate",), blame="template",
            decode_tokens_per_second=rate,
        )  # fmt: skip

    samples, record = race_cell([OFF, 64], PROMPTS, send, RaceRule(max_requests=200))
    cell = cell_of(1024, SERIAL, samples, record, baseline=True)
    assert cell.answer == 64 and not cell.decision.excluded
    # blamed on speculation, a failure excludes its arm
    samples, record = race_cell(
        [OFF, 64],
        PROMPTS,
        lambda a, p, lap: Sample(
            a,
            p,
            lap,
            a != 64,
            codes=() if a != 64 else ("role-leak",),
            blame="speculation",
            decode_tokens_per_second=900.0 + lap,
        ),
        RaceRule(max_requests=200),
    )
    assert record.judgement.standing(64).status == "excluded"
    excluded = cell_of(1024, SERIAL, samples, record, baseline=True)
    assert excluded.off and cell_text(excluded) == (
        "off (64 excluded: an invalid answer not the target alone's)"
    )


def test_an_undecided_budget_beside_a_clear_win_over_off_still_says_speculate() -> None:
    from pytest_ddtree.measure.breakeven import Ratio
    from pytest_ddtree.measure.sweep.decision import Decision

    undecided: Decision[int | None] = Decision("undecided", (64, 16), 64, 12, 0.02, 0.95, 6)
    cell = Cell(1024, SERIAL, undecided, None, False, 64, Ratio(1.6, 1.5, 1.7))
    said = breakeven_answer(BreakEvenMap((cell,), True, None, {"C=1": None}))
    assert said == (
        "Break-even: at 1024 prompt tokens: speculation on, the budget undecided among 64, 16 "
        "(64 leads, 1.60x [1.50, 1.70] over the target alone)."
    )


def test_an_answer_pinned_on_no_layer_is_not_compared_nor_held_against_its_arm() -> None:
    def send(arm: int | None, pid: str, lap: int) -> Sample:
        rate = (500.0 if arm == OFF else 1000.0) * (1 + 0.01 * lap)
        if arm == 64 and pid == "p0" and lap == 1:  # parted where the target is unsteady
            return Sample(arm, pid, lap, False, codes=("degenerate",), blame="undetermined")
        return Sample(arm, pid, lap, True, decode_tokens_per_second=rate)

    samples, record = race_cell([OFF, 64], PROMPTS, send, RaceRule(max_requests=200))
    cell = cell_of(1024, SERIAL, samples, record, baseline=True)
    assert cell.answer == 64 and not cell.decision.excluded and cell.not_compared == 1
    lines = map_lines(BreakEvenMap((cell,), True, None, {"C=1": None}))
    assert "1 answer(s) not compared: each broke an invariant its diagnosis could pin" in (
        "\n".join(lines)
    )


def test_undecided_depths_with_other_leaders_are_said_apart() -> None:
    from pytest_ddtree.measure.sweep.decision import Decision

    def undecided(depth: int, *arms: int | None) -> Cell:
        d: Decision[int | None] = Decision("undecided", arms, arms[0], 12, 0.02, 0.95, 6)
        return Cell(depth, SERIAL, d, None, False, None, None)

    said = breakeven_answer(
        BreakEvenMap((undecided(128, None, OFF), undecided(1024, OFF, None)), True, None, {})
    )
    assert said == (
        "Break-even: at 128 prompt tokens: undecided among server-default, off (server-default "
        "leads); at 1024: undecided among off, server-default (off leads)."
    )


def test_auto_probes_the_depths_where_the_server_states_no_context_length(
    pytester: pytest.Pytester,
) -> None:
    # /models names no context length: auto doubles from 512 while a prompt and its answer
    # fit, and the server's refusal (vLLM's words) of the next ends the map's depths
    with start_reference_server(
        simulated_latency=False, max_model_len=1100, state_context=False
    ) as server:
        result = pytester.runpytest_subprocess(
            "--pyargs",
            "pytest_ddtree.suite",
            "-k",
            "break_even",
            f"--ddtree-endpoint={server.base_url}",
            "--ddtree-context=auto",
            "--ddtree-budgets=64",
            "--ddtree-max-tokens=32",
            "--ddtree-report=rep",
            "-p",
            "no:cacheprovider",
        )
    result.assert_outcomes(passed=1)
    (found,) = json.loads((pytester.path / "rep" / "sweep.json").read_text())["breakeven"]
    assert sorted({c["depth"] for c in found["cells"]}) == [512, 1024], found["cells"]
    assert "speedup not measured: give --ddtree-baseline-endpoint" in result.stdout.str()


def test_a_second_turn_reports_what_the_prefix_cache_held_with_speculation_on_and_off(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_turns="""
def test_turns(ddtree_breakeven):
    found = ddtree_breakeven([512], budgets=[64], second_turn=True, max_tokens=24)
    assert [r.arm for r in found.reuse] == [0, 64]
"""
    )
    result = pytester.runpytest(
        "--ddtree-reference-latency=off", "--ddtree-report=rep", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=1)
    (found,) = json.loads((pytester.path / "rep" / "sweep.json").read_text())["breakeven"]
    for r in found["reuse"]:
        # the second turn opens with the first turn's whole prompt: the cache held most of it
        assert r["reported"] == r["turns"] == 5 and r["cached"] > 0.5, r
    assert "second turn at 512: off " in result.stdout.str()


def test_speculation_that_holds_less_of_a_conversation_in_the_cache_is_warned_of() -> None:
    from pytest_ddtree.measure.breakeven import BreakEvenMap, Reuse
    from pytest_ddtree.report.breakeven_text import reuse_lines

    def found(*reuse: Reuse) -> BreakEvenMap:
        return BreakEvenMap((), True, None, {}, (), reuse)

    lines = reuse_lines(
        found(Reuse(2048, 0, 5, 5, 5, 0.97, 0.5), Reuse(2048, 64, 5, 5, 5, 0.45, 2.1))
    )
    assert lines[0] == (
        "second turn at 2048: off 97% cached, TTFT p50 500 ms (n=5/5); "
        "64 45% cached, TTFT p50 2,100 ms (n=5/5)"
    )
    assert lines[1].startswith("WARNING: at 2048 prompt tokens speculation (64) held 45%")
    same = reuse_lines(
        found(Reuse(2048, 0, 5, 5, 5, 0.97, 0.5), Reuse(2048, 64, 5, 5, 5, 0.9, 0.6))
    )
    assert len(same) == 1  # within 10 points: no warning
    # the boundary: exactly 10 points less is no warning, a point more is one
    edge = [Reuse(1024, 0, 5, 5, 5, 0.9, 0.5), Reuse(1024, 64, 5, 5, 5, 0.8, 0.5)]
    assert len(reuse_lines(found(*edge))) == 1
    edge[1] = Reuse(1024, 64, 5, 5, 5, 0.79, 0.5)
    assert reuse_lines(found(*edge))[1].startswith("WARNING: at 1024 prompt tokens")
    (silent,) = reuse_lines(found(Reuse(512, 0, 5, 5, 0, None, 0.1)))
    assert silent.startswith("second turns: 5 sent, none reported its cached prompt tokens")
