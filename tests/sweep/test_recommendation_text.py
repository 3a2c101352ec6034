"""The recommendation and the verdict cells carry typed flags; their words are built once
from them, and the report's colours come from the flags, never from the words."""

from __future__ import annotations

import re
from dataclasses import replace

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.measure.sweep import SweepRun, summarize
from pytest_ddtree.measure.sweep.ignored import ignoring_budget
from pytest_ddtree.measure.sweep.statistics import Recommendation
from pytest_ddtree.report import render_html, table_lines
from pytest_ddtree.report.arm_text import PLACE_TEXT, verdict_text
from pytest_ddtree.report.decision_text import BUDGET_IGNORED_TEXT, sweep_answer
from pytest_ddtree.report.jsonfile import sweep_to_json

from .test_drift import _samples as drift_samples

PARTIAL = "Partial run (interrupted): "
DRIFTED = " The sweep drifted: "
POOLED = " 2 races ran at this temperature;"


def test_each_qualifier_is_said_once_in_its_place_whatever_order_it_was_set_in() -> None:
    summary = summarize(drift_samples(0.5, noise=0.05))  # the end block at half speed
    rec = summary.recommendation
    assert rec.drifting and sweep_answer(summary).count(DRIFTED) == 1

    def said(r: Recommendation) -> str:
        return sweep_answer(replace(summary, recommendation=r))

    one = replace(rec.flagged(partial=True), pooled_races=2)
    other = replace(replace(rec, pooled_races=2).flagged(partial=True), drift=rec.drift)
    assert said(one) == said(other)
    assert said(one).startswith(PARTIAL) and said(one).count(PARTIAL) == 1
    assert said(one).index(DRIFTED) < said(one).index(POOLED)
    assert said(one.flagged(partial=True)) == said(one)  # setting a flag twice: once


def test_the_json_flags_and_the_json_message_agree() -> None:
    samples = drift_samples(0.5, noise=0.05)
    summary = summarize(samples)
    summary = replace(summary, recommendation=summary.recommendation.flagged(partial=True))
    doc = sweep_to_json(SweepRun(samples=samples, metadata={}, seed=0), summary)["recommendation"]
    assert doc["drifting"] is True and doc["partial"] is True and doc["decisive"] is False
    assert doc["decision"]["flags"]["partial"] is True
    assert doc["status"] == summary.recommendation.decision.status
    assert doc["message"] == sweep_answer(summary) and doc["message"].startswith(PARTIAL)
    assert "finding" not in doc and "drift" not in doc  # the words are in "message" only
    assert "message" not in jsonmodel.to_json(summary.recommendation)  # data, no words


def test_a_server_that_ignores_the_budget_answers_that_and_says_it_drifted_too() -> None:
    summary = ignoring_budget(summarize(drift_samples(0.5, noise=0.05)))
    assert (
        sweep_answer(summary) == BUDGET_IGNORED_TEXT + " The server also drifted during the sweep."
    )
    assert {verdict_text(b) for b in summary.budgets} == {"budget ignored"}


#: the pill of each place (the others: "none")
PILLS = {
    "best": "best",
    "smallest as fast": "best",
    "as fast": "tied",
    "leads, undecided": "tied",
    "leads within the margin": "tied",
    "invalid": "bad",
    "slower": "slow",
}


def test_the_verdict_pill_is_coloured_by_the_place_not_by_its_words() -> None:
    samples = drift_samples(0.5, noise=0.05)
    summary = summarize(samples)
    said = sweep_answer(summary)
    html = render_html(SweepRun(samples=samples, metadata={}, seed=0))
    pills = {
        text: cls for cls, text in re.findall(r'<span class="pill (\w+)">([^<]+)</span>', html)
    }
    drifting = next(b for b in summary.budgets if b.drifting)
    assert drifting.place is not None and verdict_text(drifting).endswith(" (DRIFTING)")
    assert verdict_text(drifting).startswith(PLACE_TEXT[drifting.place])
    assert {verdict_text(b): PILLS.get(b.place or "", "none") for b in summary.budgets} == pills
    # the terminal and the report say the same
    assert table_lines(summary)[-1] == said
    assert said.split(DRIFTED)[0] in html
