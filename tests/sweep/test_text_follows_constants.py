"""Numbers in text come from the constants and values that define them: change one, and the
terminal answer and the report say the new number (and compute with it)."""

from __future__ import annotations

import re

import pytest

from pytest_ddtree.core.wording import percent
from pytest_ddtree.measure.sweep import SweepRun, bootstrap, drift, summarize
from pytest_ddtree.measure.sweep.race import RaceRule
from pytest_ddtree.report import render_html, table_lines

from ._factory import synthetic_sweep
from .test_drift import _samples as drift_samples


def _run() -> SweepRun:
    samples = synthetic_sweep({16: 500.0, 64: 900.0}, spread=15.0)
    return SweepRun(samples=samples, metadata={"budgets": [16, 64]}, seed=5)


@pytest.mark.parametrize(
    ("fraction", "text"), [(0.95, "95%"), (0.975, "97.5%"), (0.025, "2.5%"), (0.99, "99%")]
)
def test_percent_writes_a_fraction_as_text_shows_it(fraction: float, text: str) -> None:
    assert percent(fraction) == text


def test_the_interval_confidence_of_the_terminal_answer_follows_its_constant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wide = table_lines(_run().summary())
    monkeypatch.setattr(bootstrap, "CONFIDENCE", 0.8)
    narrow = table_lines(_run().summary())
    assert "[80% CI]" in narrow[0]  # the header
    assert narrow[-1].startswith("Recommended tree_budget=64") and "80% CI [" in narrow[-1]
    assert not any("95% CI" in line for line in narrow)

    # the interval printed is the one computed at that confidence: narrower than at 95%
    def width(line: str) -> float:
        low, high = re.search(r"CI \[(\d+), (\d+)\]", line).groups()  # type: ignore[union-attr]
        return float(high) - float(low)

    assert width(narrow[-1]) < width(wide[-1])


def test_the_first_looks_confidence_in_the_legend_follows_the_race_rule() -> None:
    first = percent(RaceRule().look_confidence(1))
    assert f"({first} at the first, more later)" in "\n".join(table_lines(_run().summary()))


def test_the_drift_rule_in_the_report_follows_its_constants(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(drift, "DRIFT_CONFIDENCE", 0.9)
    monkeypatch.setattr(drift, "DRIFT_MARGIN", 0.1)
    monkeypatch.setattr(bootstrap, "CONFIDENCE", 0.8)
    html = render_html(SweepRun(samples=drift_samples(1.0, noise=0.02), metadata={}, seed=0))
    assert "the 90% bootstrap interval of the median end/start ratio" in html
    assert "more than 10% away from 1" in html
    assert "change &lt;= 10%" in html and "90% CI" in html  # the drift line itself
    assert "Median with 80% CI" in html and "<small>median [80% CI] n</small>" in html
    assert "99%" not in html and "95% CI" not in html and "5% away" not in html


def test_a_margin_of_two_and_a_half_percent_is_written_as_such() -> None:
    summary = summarize(_run().samples, seed=5, rule=RaceRule(equivalence=0.025))
    text = "\n".join(table_lines(summary))
    assert "2.5% margin" in text and "3% margin" not in text and " 2% margin" not in text
