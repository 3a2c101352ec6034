"""Property tests: statistics and reports never raise, and are deterministic."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_ddtree.measure.sweep import Sample, SweepRun, summarize
from pytest_ddtree.report import render_html, table_lines
from pytest_ddtree.report.compare import compare_runs
from pytest_ddtree.report.decision_text import sweep_answer
from pytest_ddtree.report.jsonfile import sweep_from_json, sweep_to_json

_rate = st.one_of(st.none(), st.floats(min_value=0.0, max_value=1e6, allow_nan=False))
_text = st.text(max_size=20)

samples = st.lists(
    st.builds(
        Sample,
        tree_budget=st.one_of(st.none(), st.sampled_from([1, 16, 64, 1024, 4096])),
        prompt_id=st.sampled_from(["a", "b", "<c&'\">"]),
        round=st.integers(-2, 5),
        valid=st.booleans(),
        codes=st.lists(st.sampled_from(["early-stop", "role-leak", "x<y>"]), max_size=3).map(tuple),
        messages=st.lists(_text, max_size=2).map(tuple),
        completion_tokens=st.one_of(st.none(), st.integers(0, 10_000)),
        ttft=_rate,
        decode_tokens_per_second=_rate,
        end_to_end=_rate,
        mean_acceptance_length=_rate,
        decode_rounds=st.one_of(st.none(), st.integers(0, 10_000)),
        server_tokens_per_second=_rate,
        echoed_tree_budget=st.one_of(st.none(), st.integers(1, 4096)),
        worker=st.one_of(st.none(), st.sampled_from(["gw0", "gw1"])),
        concurrent=st.booleans(),
        drift_mark=st.sampled_from([None, "start", "end"]),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(samples)
def test_summary_table_html_and_json_never_raise_and_are_deterministic(
    data: list[Sample],
) -> None:
    first = summarize(data, seed=1).to_json()
    assert summarize(data, seed=1).to_json() == first
    run = SweepRun(samples=data, metadata={"model": "<m>"}, seed=1)
    summary = run.summary()
    lines = table_lines(summary)
    assert lines[-1] == sweep_answer(summary)
    html = render_html(run, summary)
    assert html.startswith("<!DOCTYPE html>") and "<m>" not in html
    doc = json.loads(json.dumps(sweep_to_json(run, summary), allow_nan=False))
    assert sweep_from_json(doc).samples == data
    rec = summary.recommendation
    if rec.tree_budget is not None:
        chosen = next(b for b in summary.budgets if b.tree_budget == rec.tree_budget)
        assert chosen.all_valid and chosen.decode_median is not None


@settings(max_examples=40, deadline=None)
@given(samples, samples)
def test_compare_never_raises(a: list[Sample], b: list[Sample]) -> None:
    result = compare_runs(SweepRun(a), SweepRun(b))
    assert result.lines()[-1].startswith(("OK", "FAIL"))
