"""The recommendation card of ``sweep.html`` in each of its states, rendered for real."""

from __future__ import annotations

import re
from dataclasses import replace

from pytest_ddtree.measure.sweep import Sample, SweepRun, SweepSummary, summarize
from pytest_ddtree.pytest_plugin.analysis import _partial
from pytest_ddtree.report import render_html
from pytest_ddtree.report.decision_text import sweep_answer
from pytest_ddtree.report.html import card_state

from ._factory import synthetic_sweep
from .test_drift import _samples as drift_samples


def _badge(summary: SweepSummary, samples: list[Sample]) -> str:
    html = render_html(SweepRun(samples, {"model": "m"}), summary)
    found = re.findall(r'<span class="badge">([^<]*)</span>', html)
    assert len(found) == 1, found
    assert found[0] == card_state(summary)[1]
    return str(found[0])


def test_decided() -> None:
    samples = synthetic_sweep({16: 500.0, 64: 900.0, 256: 700.0}, spread=15.0)
    summary = summarize(samples)
    assert summary.recommendation.tree_budget == 64 and not summary.recommendation.tied
    assert _badge(summary, samples) == "decided"


def test_equivalent_within_the_margin_recommends_the_smaller() -> None:
    samples = synthetic_sweep({32: 1000.0, 64: 1004.0, 256: 600.0}, spread=2.0, rounds=4)
    summary = summarize(samples)
    rec = summary.recommendation
    assert rec.decided and rec.tree_budget == 32 and rec.tied == (64,), sweep_answer(summary)
    assert "Equivalent within 2%: tree_budget=64 (leads" in sweep_answer(summary)
    assert _badge(summary, samples) == "equivalent within 2%"


def test_undecided() -> None:
    samples = synthetic_sweep({32: 1000.0, 64: 1030.0}, spread=80.0, rounds=2)
    summary = summarize(samples)
    assert not summary.recommendation.decided, sweep_answer(summary)
    assert _badge(summary, samples) == "undecided"


def test_partial_run() -> None:
    samples = synthetic_sweep({16: 500.0, 64: 900.0}, spread=15.0)
    summary = _partial(summarize(samples))
    assert summary.recommendation.decided and summary.recommendation.partial
    assert _badge(summary, samples) == "partial run"


def test_one_budget_finished_is_not_a_partial_run() -> None:
    # --ddtree-budget-mode none: the server's own budget alone, keyed None
    samples = [replace(s, tree_budget=None) for s in synthetic_sweep({64: 800.0}, spread=10.0)]
    summary = summarize(samples)
    rec = summary.recommendation
    assert rec.decided and not rec.partial and rec.tree_budget is None
    assert rec.decisive and summary.to_json()["recommendation"]["decisive"] is True
    assert _badge(summary, samples) == "one budget"
    html = render_html(SweepRun(samples, {"model": "m"}), summary)
    assert "partial run" not in html
    assert '<div class="big">server-default</div>' in html


def test_drifting() -> None:
    samples = drift_samples(0.5, noise=0.05)
    summary = summarize(samples)
    assert summary.recommendation.drifting
    assert _badge(summary, samples) == "server drifted"


def test_no_valid_timing() -> None:
    samples = [Sample(16, "a", 0, False, codes=("empty",))]
    assert _badge(summarize(samples), samples) == "no recommendation"


def test_charts_share_one_scale_and_an_empty_one_says_so() -> None:
    samples = synthetic_sweep({16: 500.0, 64: 900.0, 256: 700.0}, spread=15.0)
    html = render_html(SweepRun(samples, {"model": "m"}))
    sizes = re.findall(
        r'<svg class="chart[^"]*" width="(\d+)" height="(\d+)" viewBox="0 0 (\d+) (\d+)"', html
    )
    # drawn at their own size (never stretched to the page): one font scale
    assert len(sizes) == 3 and all(w == vw and h == vh for w, h, vw, vh in sizes), sizes
    # no acceptance statistics: the chart says so instead of drawing an empty frame
    bare = [replace(s, mean_acceptance_length=None) for s in samples]
    html = render_html(SweepRun(bare, {"model": "m"}))
    assert html.count('<svg class="chart"') == 2
    assert "Mean acceptance length by tree budget</strong>: nothing to draw" in html


def test_one_budget_axis_is_not_called_log2() -> None:
    samples = [replace(s, tree_budget=None) for s in synthetic_sweep({64: 800.0}, spread=10.0)]
    html = render_html(SweepRun(samples, {"model": "m"}))
    assert "log2 scale" not in html and ">tree_budget</text>" in html


def test_server_counter_tables_are_in_budget_then_load_point_order() -> None:
    from pytest_ddtree.core import jsonmodel
    from pytest_ddtree.measure.load.arrivals import LoadPoint
    from pytest_ddtree.report.counters_html import server_counters_section

    budgets = [{"tree_budget": b, "requests": 3} for b in (128, 64, None, 512, 16)]
    points = [LoadPoint("rate", 2.0), *(LoadPoint("concurrency", c) for c in (16, 1, 4))]
    records = [
        {"scope": "load", "test": "t", "label": p.label, "tree_budget": b, "sent": 2, "delta": {}}
        | {"point": jsonmodel.to_json(p)}
        for p in points
        for b in (64, 16)
    ]
    # records written before records carried their point come after, in the order written
    # (the run's: C=2 then C=16, which their labels' text would put the other way round)
    for c in (2, 16):
        old = {"scope": "load", "test": "t", "label": f"C={c}", "tree_budget": 16, "sent": 2}
        records.append(old | {"delta": {}})
    html = server_counters_section({"status": "ok", "budgets": budgets, "records": records})
    top, load = html.split("<h3>Load points</h3>")
    firsts = re.findall(r"<tr><td>([^<]*)</td>", top)
    assert firsts == ["server-default", "16", "64", "128", "512"], firsts
    rows = re.findall(r"<tr><td>t</td><td>([^<]+)</td><td>(\d+)</td>", load)
    assert rows == [
        ("C=1", "16"),
        ("C=4", "16"),
        ("C=16", "16"),
        ("rate=2/s", "16"),
        ("C=2", "16"),
        ("C=16", "16"),
        ("C=1", "64"),
        ("C=4", "64"),
        ("C=16", "64"),
        ("rate=2/s", "64"),
    ], rows


def _card(html: str, title: str) -> str:
    """The one card headed ``title``."""
    found = re.findall(rf"<section class=\"card[^\"]*\"><h2>{title}</h2>.*?</section>", html, re.S)
    assert len(found) == 1, (title, found)
    return str(found[0])


def test_an_adaptive_sweep_that_raced_nothing_says_so_on_the_race_card_as_in_the_terminal() -> None:
    # --ddtree-budget-mode none under --ddtree-sweep adaptive (llama.cpp): one arm, no race
    samples = [replace(s, tree_budget=None) for s in synthetic_sweep({64: 800.0}, spread=10.0)]
    described = {"model": "m", "budgets": ["server-default"], "sweep": "adaptive", "races": 0}
    card = _card(render_html(SweepRun(samples, described)), "Race")
    note = "--ddtree-sweep adaptive: nothing was raced (one budget, server-default: there is no"
    assert note in card and "An exhaustive sweep" not in card, card
    # the terminal's note is the same sentence, from the same metadata
    from pytest_ddtree.measure.sweep import RunMetadata
    from pytest_ddtree.report.terminal import unraced_note

    terminal = unraced_note(RunMetadata.from_json(described))
    assert terminal is not None and f"<p>{terminal}." in card
    # a raced run and an exhaustive one say nothing of the kind
    assert unraced_note(RunMetadata.from_json({**described, "races": 1})) is None
    assert unraced_note(RunMetadata.from_json({**described, "sweep": "exhaustive"})) is None
    exhaustive = _card(render_html(SweepRun(samples, {**described, "sweep": "exhaustive"})), "Race")
    assert "An exhaustive sweep: every budget got every round" in exhaustive


def test_the_server_counters_card_shows_the_timed_requests_beside_the_servers_count() -> None:
    # 18 timed requests per budget; the server also counted a benchmark's 6 warm-up requests
    samples = synthetic_sweep({16: 500.0, 64: 800.0}, spread=10.0, rounds=6)
    counters = {
        "status": "ok (vllm)",
        "budgets": [{"tree_budget": b, "requests": 24, "drafts": 100} for b in (16, 64)],
    }
    html = render_html(SweepRun(samples, {"model": "m", "server_counters": counters}))
    card = _card(html, "Server counters")
    heads = re.findall(r"<th>([^<]*)</th>", card)
    assert heads[:3] == ["tree_budget", "requests the server counted", "timed"], heads
    rows = re.findall(r"<tr><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td>", card)
    assert rows == [("16", "24", "18"), ("64", "24", "18")], rows
    assert "not only the timed ones: a benchmark's warm-up rounds" in card
    # the per-budget table counts the same 18
    assert html.count("<td>18/18</td>") == 2


def test_no_machine_state_card_without_a_probe() -> None:
    samples = synthetic_sweep({16: 500.0, 64: 800.0}, spread=10.0)
    version = {"/version": {"version": "ddtree-reference/0.1"}}
    html = render_html(SweepRun(samples, {"model": "m", "server_info": version}))
    assert "Machine state" not in html and "--ddtree-probe" not in html
    # the server's own description stays, on a card of its own
    assert "ddtree-reference/0.1" in _card(html, "Server")
    probe = {"when": "before", "command": "gpu-stats", "output": "1410 MHz"}
    probed = {"model": "m", "server_info": version, "probes": [probe]}
    card = _card(render_html(SweepRun(samples, probed)), "Machine state")
    assert "1410 MHz" in card and "ddtree-reference/0.1" in card
