"""The sweep table's legend, interval headers and labels: true to the run, readable at a
terminal's width (pure, no server)."""

from __future__ import annotations

import re

from pytest_ddtree.measure.sweep import Sample, summarize
from pytest_ddtree.report import table_lines
from pytest_ddtree.report.decision_text import sweep_answer

from ._factory import synthetic_sweep


def _summary():  # type: ignore[no-untyped-def]
    return summarize(synthetic_sweep({16: 500.0, 64: 900.0, 256: 700.0}, spread=15.0), seed=5)


def _legend(lines: list[str]) -> list[str]:
    start = next(i for i, ln in enumerate(lines) if ln.startswith("([95% CI]"))
    end = next(i for i in range(start, len(lines)) if "sweep.md#columns)" in lines[i])
    return lines[start : end + 1]


def test_the_legend_wraps_to_the_terminal_width_and_the_rest_is_behind_v() -> None:
    summary = _summary()
    for width, most in ((80, 6), (120, 4)):
        legend = _legend(table_lines(summary, width=width))
        assert all(len(ln) <= width for ln in legend), legend
        assert len(legend) <= most, legend  # what the intervals are, and where the rest is
        text = " ".join(legend)
        assert "-v explains every column" in text and "sweep.md#columns" in text
        assert "verify steps" not in text
        full = _legend(table_lines(summary, width=width, verbose=True))
        assert all(len(ln) <= width for ln in full), full
        text = " ".join(full)
        assert "verify steps: decode rounds per request" in text and "srv/cli" in text


def test_the_headers_and_legend_say_what_each_interval_is_in_one_format() -> None:
    summary = _summary()
    lines = table_lines(summary)
    assert "decode tok/s median [95% CI] n" in lines[0]
    assert "slowdown vs leader [race CI] n" in lines[0]
    legend = " ".join(_legend(lines))
    assert "[95% CI]: the median's interval over the budget's requests" in legend
    assert "not the ratio of the medians" in legend and "97.5% at the first" in legend
    rows = lines[2:5]
    intervals = re.findall(r"\[[^\]]*\]", " ".join(rows))
    assert len(intervals) >= 4, rows  # three medians' CIs, a slowdown's at least
    # every interval [low, high]: a rate's as a slowdown's (a dash reads as a minus)
    assert all(re.fullmatch(r"\[[-+]?[\d,.]+%?, [-+]?[\d,.]+%?\]", i) for i in intervals), rows
    rec = sweep_answer(summary)
    assert re.search(r"median decode [\d,]+ tok/s, 95% CI \[[\d,]+, [\d,]+\] \(n=9\)", rec), rec


def test_one_budget_says_so_and_the_n_it_had_not_a_minimum_n_it_did_not_need() -> None:
    samples = [
        Sample(64, p, 0, True, decode_tokens_per_second=900.0 + i)
        for i, p in enumerate(("essay", "code", "list"))
    ]
    summary = summarize(samples)
    rec = summary.recommendation
    said = sweep_answer(summary)
    assert rec.decided and rec.tree_budget == 64 and rec.n == 3, said
    assert said.endswith(
        "(one budget, n=3: nothing to compare it with, so no margin or minimum n applies; "
        "a comparison needs n >= 6 a budget.)"
    ), said
    assert "min n 6" not in said and "exhaustive" not in said


def test_a_budget_left_alone_by_invalid_ones_names_the_sweep_and_its_n() -> None:
    samples = [
        *(
            Sample(64, p, r, True, decode_tokens_per_second=900.0 + r)
            for p in ("essay", "code")
            for r in range(2)
        ),
        Sample(256, "essay", 0, False, codes=("role-leak",)),
    ]
    summary = summarize(samples)
    rec = summary.recommendation
    said = sweep_answer(summary)
    assert rec.decided and rec.tree_budget == 64, said
    assert "(exhaustive sweep, n=4: nothing to compare it with" in said, said
    assert "Excluded for invalid responses: 256" in said


def test_a_decided_comparison_keeps_its_rule_and_n() -> None:
    said = sweep_answer(_summary())
    assert "(n=9)" in said and "(exhaustive sweep, 2% margin, min n 6, " in said
