"""Percentiles, goodput, concurrency, SLOs and schedules on synthetic samples."""

from __future__ import annotations

import itertools
import random
import statistics
from dataclasses import replace

import pytest

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.measure.load import (
    SLO,
    ClientHealth,
    LoadPoint,
    Sample,
    analyse,
    arrival_offsets,
    parse_concurrencies,
    parse_rates,
    parse_slo,
    percentiles,
    summarize_point,
)
from pytest_ddtree.measure.load.metrics import BUSY_SHARE, CPU_LIMIT, LAG_LIMIT
from pytest_ddtree.measure.load.recommend import NoneWhy
from pytest_ddtree.report.client_text import client_reason
from pytest_ddtree.report.load_text import none_text, schedule_how, schedule_text

from ._samples import load_sample

C4 = LoadPoint("concurrency", 4)


def sample(start: float, e2e: float, ttft: float, tokens: int, **kw: object) -> Sample:
    args: dict[str, object] = {
        "point": C4,
        "tree_budget": 64,
        "start": start,
        "end_to_end": e2e,
        "ttft": ttft,
        "gaps": (0.01, 0.02),
        "completion_tokens": tokens,
        "valid": True,
    }
    args.update(kw)
    return load_sample(**args)  # type: ignore[arg-type]


def test_percentiles_match_statistics() -> None:
    rng = random.Random(3)
    xs = [rng.lognormvariate(0, 1) for _ in range(501)]
    p = percentiles(xs)
    assert p is not None
    cuts = statistics.quantiles(xs, n=100, method="inclusive")
    assert p.p50 == pytest.approx(cuts[49])
    assert p.p90 == pytest.approx(cuts[89])
    assert p.p99 == pytest.approx(cuts[98])
    assert p.max == max(xs)
    assert p.mean == pytest.approx(statistics.fmean(xs))
    assert percentiles([]) is None


def test_point_statistics() -> None:
    samples = [
        sample(100.0, 2.0, 0.1, 20),
        sample(100.0, 1.0, 0.3, 10),
        sample(101.0, 1.0, 0.2, 11, gaps=(0.5,)),
        sample(100.5, 1.5, 0.9, 5, valid=False, codes=("early-stop",), evidence="[early-stop] x"),
    ]
    slo = parse_slo("ttft=250ms,tpot=150ms", "test")
    s = summarize_point(samples, slo=slo)
    assert (s.requests, s.valid, s.invalid) == (4, 3, 1)
    assert s.codes == {"early-stop": 1}
    assert s.first_evidence == "[early-stop] x"
    # the invalid request is not in the percentiles
    assert s.ttft is not None and s.ttft.n == 3 and s.ttft.max == pytest.approx(0.3)
    assert s.ttft.p50 == pytest.approx(0.2)
    tpots = [(2.0 - 0.1) / 19, (1.0 - 0.3) / 9, (1.0 - 0.2) / 10]
    assert s.tpot is not None and s.tpot.p50 == pytest.approx(statistics.median(tpots))
    assert s.itl is not None and s.itl.n == 5 and s.itl.max == pytest.approx(0.5)
    # window 100.0 .. 102.0; time in flight 2 + 1 + 1 + 1.5 = 5.5 s
    assert s.duration == pytest.approx(2.0)
    assert s.achieved_concurrency == pytest.approx(5.5 / 2.0)
    assert s.output_tokens_per_second == pytest.approx(41 / 2.0)
    assert s.requests_per_second == pytest.approx(3 / 2.0)
    # good: valid and within both limits -> the first and third (the second's TTFT is 0.3)
    assert s.good == 2
    assert s.goodput_share == pytest.approx(0.5)
    assert s.goodput_rate == pytest.approx(1.0)
    assert s.slo_met is False
    assert summarize_point(samples).slo_met is None


def test_mixed_points_refused() -> None:
    with pytest.raises(ValueError, match="mixed points"):
        summarize_point([sample(0, 1, 0.1, 5), sample(0, 1, 0.1, 5, tree_budget=16)])


def test_slo_parsing() -> None:
    slo = parse_slo("ttft=500ms, tpot=50ms,e2e=2s,itl=800us,goodput=95%", "option --ddtree-slo")
    assert slo == SLO(ttft=0.5, tpot=0.05, e2e=2.0, itl=slo.itl, goodput=0.95)
    assert slo.itl == pytest.approx(0.0008)
    assert parse_slo("ttft=250", "x").ttft == pytest.approx(0.25)
    assert SLO(ttft=0.5).misses({"ttft": 0.6}) == ["ttft"]
    assert SLO(ttft=0.5).misses({"ttft": None}) == ["ttft"]


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("", "expected e.g."),
        ("ttft", "is not KEY=VALUE"),
        ("ttfb=1s", "unknown key 'ttfb'"),
        ("ttft=fast", "'fast' is not a duration"),
        ("ttft=-1ms", "is not a duration"),
        ("ttft=1s,ttft=2s", "ttft is given twice"),
        ("goodput=120%", "not a percentage"),
        ("goodput=90%", "set at least one limit"),
        ("ttft=1s,goodput=0.95", "goodput '0.95' has no %: write the share as a percentage, 95%"),
        ("ttft=1s,goodput=1", "write the share as a percentage, 100%"),
    ],
)
def test_bad_slo_one_line(raw: str, why: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_slo(raw, "option --ddtree-slo")
    msg = str(info.value)
    assert "\n" not in msg and why in msg
    assert msg.startswith(f"invalid slo {raw!r} (from option --ddtree-slo)")


@pytest.mark.parametrize("raw", ["0", "4,x", "2,2", "-1", "1.5", ""])
def test_bad_concurrency(raw: str) -> None:
    with pytest.raises(ValueError, match=r"^invalid load-concurrency .* \(from ini key k\)"):
        parse_concurrencies(raw, "ini key k")


@pytest.mark.parametrize("raw", ["0", "inf", "nan", "fast", "1,1", ""])
def test_bad_rate(raw: str) -> None:
    with pytest.raises(ValueError, match=r"^invalid load-rate .* \(from environment"):
        parse_rates(raw, "environment variable X")


def test_good_lists() -> None:
    assert parse_concurrencies("1, 4,16", "x") == (1, 4, 16)
    assert parse_rates("0.5,2", "x") == (0.5, 2.0)


def test_arrivals_poisson_and_gamma() -> None:
    n = 20000
    poisson = arrival_offsets(4.0, n, seed=1)
    assert poisson == arrival_offsets(4.0, n, seed=1)
    assert poisson != arrival_offsets(4.0, n, seed=2)
    assert poisson[0] == 0.0
    gaps = [b - a for a, b in itertools.pairwise(poisson)]
    assert statistics.fmean(gaps) == pytest.approx(0.25, rel=0.03)
    # exponential gaps: coefficient of variation 1; gamma(shape b): 1/sqrt(b)
    assert statistics.stdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, rel=0.05)
    bursty = arrival_offsets(4.0, n, burstiness=0.25, seed=1)
    bgaps = [b - a for a, b in itertools.pairwise(bursty)]
    assert statistics.fmean(bgaps) == pytest.approx(0.25, rel=0.06)
    assert statistics.stdev(bgaps) / statistics.fmean(bgaps) == pytest.approx(2.0, rel=0.08)
    with pytest.raises(ValueError, match="rate must be"):
        arrival_offsets(0.0, 3)


def test_split_adds_up() -> None:
    for c in (1, 5, 64):
        parts = [LoadPoint("concurrency", c).split(i, 3) for i in range(3)]
        assert sum(p.value for p in parts if p is not None) == c
    rate = [LoadPoint("rate", 6.0).split(i, 4) for i in range(4)]
    assert sum(p.value for p in rate if p is not None) == pytest.approx(6.0)


def test_client_saturation_flag() -> None:
    calm = ClientHealth(0.2, 1.0, 10, 1000, lag_p99=0.001, lag_max=0.002, lag_samples=100)
    assert not calm.saturated and client_reason(calm) == ""
    assert calm.cpu_per_token == pytest.approx(0.0002)
    # late while idle (20% CPU): the machine held it, which is no saturation (a one-slot
    # engine at C=1 on a shared box); late for a visible share of the point: stalled
    idle_late = ClientHealth(0.2, 1.0, 10, 1000, LAG_LIMIT * 2, 0.05, 100, lag_total=0.01)
    assert not idle_late.saturated and not idle_late.unreliable and idle_late.state() == "ok"
    stalled = replace(idle_late, lag_total=0.2)
    assert stalled.stalled and not stalled.saturated and stalled.state() == "STALLED"
    assert "woke late for 20% of the point" in client_reason(stalled)
    lagging = ClientHealth(BUSY_SHARE + 0.1, 1.0, 10, 1000, LAG_LIMIT * 2, 0.05, 100)
    assert lagging.saturated and "event-loop lag" in client_reason(lagging)
    assert lagging.state() == "SATURATED" and lagging.unreliable
    busy = ClientHealth(CPU_LIMIT + 0.05, 1.0, 10, 1000, 0.001, 0.002, 100)
    assert busy.saturated and "client CPU" in client_reason(busy)


def _tpot_samples(point: LoadPoint, budget: int, tpot: float, n: int = 12) -> list[Sample]:
    rng = random.Random(f"{point.label}{budget}")
    out = []
    for i in range(n):
        t = tpot * (1 + rng.uniform(-0.02, 0.02))
        out.append(load_sample(point, budget, float(i), 0.05 + 99 * t, 0.05, (t,), 100, True))
    return out


def test_schedule_follows_the_fastest_valid_budget() -> None:
    c1, c8, c32 = (LoadPoint("concurrency", c) for c in (1, 8, 32))
    samples = (
        _tpot_samples(c1, 16, 0.010)
        + _tpot_samples(c1, 128, 0.006)
        + _tpot_samples(c8, 16, 0.012)
        + _tpot_samples(c8, 128, 0.011)
        + _tpot_samples(c32, 16, 0.020)
        + _tpot_samples(c32, 128, 0.040)
    )
    # a faster budget with one invalid request is excluded
    bad = _tpot_samples(c32, 64, 0.001)
    bad[0] = load_sample(c32, 64, 0.0, 0.1, 0.05, (), 100, False, ("role-leak",))
    stats, schedule = analyse(samples + bad)
    assert [c.tree_budget for c in schedule.choices] == [128, 128, 16]
    assert schedule.choices[2].excluded == (64,)
    assert schedule_text(schedule) == "C<=8: 128, C>8: 16"
    assert schedule.changes_with_load
    best = schedule.choices[0]
    assert best.decisive and best.ci_ms is not None
    assert best.ci_ms[0] <= best.tpot_ms <= best.ci_ms[1]  # type: ignore[operator]
    assert len(stats) == 7


def test_the_schedules_words_count_the_points_a_race_left_undecided() -> None:
    from dataclasses import replace

    from pytest_ddtree.measure.load.recommend import Choice, Schedule

    c1, c4 = (LoadPoint("concurrency", c) for c in (1, 4))
    samples = _tpot_samples(c1, 16, 0.010) + _tpot_samples(c4, 16, 0.010)
    samples += _tpot_samples(c1, 64, 0.006) + _tpot_samples(c4, 64, 0.012)
    _, schedule = analyse(samples)
    assert schedule_how(schedule) == "changes with load"

    def as_(c: Choice, status: str, arms: tuple[int | None, ...]) -> Choice:
        return replace(c, decision=replace(c.decision, status=status, arms=arms))

    same = Schedule(tuple(as_(c, "recommended", (16,)) for c in schedule.choices))
    assert schedule_how(same) == "same at every load point"
    # a race that spent its requests without a winner at C=1 (the run load.md shows): the
    # schedule reads "C<=1: undecided, C>1: 16", which is not "the same at every point"
    first = as_(same.choices[0], "undecided", (16, 64))
    partly = Schedule((first, same.choices[1]))
    assert schedule_text(partly) == "C<=1: undecided, C>1: 16"
    assert schedule_how(partly) == "same at every decided load point; undecided at 1 of 2"
    second = as_(same.choices[1], "undecided", (16, 64))
    assert schedule_how(Schedule((first, second))) == "undecided at every load point"
    # nothing was valid: said as such, never "undecided"
    invalid = as_(same.choices[0], "nothing valid", ())
    assert schedule_how(Schedule((invalid,))) == "no point has a valid budget"


def test_merge_of_split_samples_equals_one_run() -> None:
    point = LoadPoint("concurrency", 4)
    rng = random.Random(5)
    whole = [
        load_sample(
            point,
            32,
            rng.uniform(0, 5),
            rng.uniform(0.5, 2),
            rng.uniform(0.01, 0.2),
            tuple(rng.uniform(0.001, 0.05) for _ in range(5)),
            rng.randint(2, 90),
            True,
            worker=f"gw{i % 2}",
        )
        for i in range(40)
    ]
    a = [s for s in whole if s.worker == "gw0"]
    b = [s for s in whole if s.worker == "gw1"]
    merged = [Sample.from_json(s.to_json()) for s in b + a]
    one, _ = analyse(whole)
    two, _ = analyse(merged)
    assert jsonmodel.to_json(one[0]) == jsonmodel.to_json(two[0])


def _cells(line: str) -> list[str]:
    """The cells of a table line: columns are at least two spaces apart."""
    return [c.strip() for c in line.strip().split("  ") if c.strip()]


def test_table_columns_stay_apart_for_every_budget_label() -> None:
    from pytest_ddtree.report.load_text import load_lines

    c1, c16 = LoadPoint("concurrency", 1), LoadPoint("concurrency", 16)
    samples = [
        load_sample(p, None, float(i), 24.0 + i, 0.128, (0.0229,), 128, True)
        for p in (c1, c16)
        for i in range(4)
    ]
    stats, schedule = analyse(samples)
    lines = load_lines(stats, schedule)
    head, rows = _cells(lines[0]), [_cells(line) for line in lines[1:3]]
    assert all(len(r) == len(head) for r in rows), lines
    assert [r[1] for r in rows] == ["server-default", "server-default"]
    assert rows[0][6] == "25500.0/26970.0"  # e2e p50/p99, not run into the TPOT column
    # every column starts at the same place on every line
    starts = [lines[0].index(h) for h in ("ok/n", "tok/s", "client")]
    for line in lines[1:3]:
        assert [line[s - 1] for s in starts] == [" ", " ", " "], line


def test_the_servers_own_budget_is_a_choice_not_no_budget() -> None:
    c1, c4 = LoadPoint("concurrency", 1), LoadPoint("concurrency", 4)
    stats, schedule = analyse(_tpot_samples(c1, None, 0.01) + _tpot_samples(c4, None, 0.02))
    assert all(c.chosen and c.label == "server-default" for c in schedule.choices)
    assert schedule_text(schedule) == "all C: server-default"
    assert schedule.to_json()["points"][0]["budget_label"] == "server-default"
    assert schedule.to_json()["points"][0]["chosen"] is True
    from pytest_ddtree.report.load_text import load_lines

    text = "\n".join(load_lines(stats, schedule))
    assert "best at C=1: server-default (TPOT p50" in text and "no budget" not in text
    # an invalid point is "none", never the server's budget
    bad = [load_sample(c1, None, 0.0, 1.0, 0.1, (), 10, False, ("role-leak",))]
    _, schedule = analyse(bad)
    assert not schedule.choices[0].chosen and schedule.choices[0].label is None
    assert schedule_text(schedule) == "no valid budget"
    assert schedule.to_json()["points"][0]["budget_label"] is None


def test_acceptance_rate_and_never_drafted_are_shown() -> None:
    from pytest_ddtree.report.arm_text import speculation_warnings
    from pytest_ddtree.report.load_text import load_lines

    c1 = LoadPoint("concurrency", 1)
    drafted = [
        load_sample(
            c1, 8, float(i), 1.0, 0.1, (0.01,), 50, True, drafted_tokens=10, accepted_tokens=k
        )
        for i, k in enumerate((4, 6))
    ]
    idle = [
        load_sample(
            c1, 16, float(i), 1.0, 0.1, (0.01,), 50, True, drafted_tokens=0, accepted_tokens=0
        )
        for i in range(3)
    ]
    unknown = [load_sample(c1, 32, 0.0, 1.0, 0.1, (0.01,), 50, True)]
    stats, schedule = analyse(drafted + idle + unknown)
    by_budget = {s.tree_budget: s for s in stats}
    assert by_budget[8].mean_acceptance_rate == pytest.approx(0.5)
    assert not by_budget[8].never_drafted
    assert by_budget[16].never_drafted and by_budget[16].draft_reports == 3
    assert not by_budget[32].never_drafted  # no count reported: nothing is claimed
    lines = load_lines(stats, schedule)
    rows = {r[1]: r for r in (_cells(x) for x in lines[1:4])}
    assert (rows["8"][11], rows["16"][11], rows["32"][11]) == ("rate 0.50", "no drafts", "-")
    assert speculation_warnings(stats, by_budget=True) == [
        "speculation never drafted at budget 16: 0 draft tokens in 3 request(s) that reported "
        "their drafts, at C=1; these timings are the target model's alone, not speculative "
        "decoding"
    ]
    assert jsonmodel.to_json(by_budget[16])["never_drafted"] is True
    back = Sample.from_json(drafted[0].to_json())
    assert (back.drafted_tokens, back.accepted_tokens) == (10, 4)


def test_html_keeps_the_servers_budget_apart_and_marks_no_drafts() -> None:
    from html import escape

    from pytest_ddtree.measure.load.record import LoadTestResult
    from pytest_ddtree.report.arm_text import speculation_warnings
    from pytest_ddtree.report.load_html import render_load_section

    c1 = LoadPoint("concurrency", 1)
    samples = [
        load_sample(
            c1, None, float(i), 1.0, 0.1, (0.01,), 50, True, drafted_tokens=0, accepted_tokens=0
        )
        for i in range(4)
    ]
    stats, schedule = analyse(samples)
    page = render_load_section(
        [LoadTestResult("t.py::test_load", 1, ("main",), False, stats, schedule, tuple(samples))]
    )
    assert "<li>best at C=1: server-default (TPOT p50" in page  # the terminal's words
    assert "no valid budget" not in page
    assert "<td>server-default</td>" in page and "<td>no drafts</td>" in page
    assert escape(speculation_warnings(stats, by_budget=True)[0]) in page


def test_no_best_budget_says_why_in_the_terminal_the_json_and_the_html() -> None:
    from pytest_ddtree.measure.load.record import LoadTestResult
    from pytest_ddtree.report.load_html import render_load_section
    from pytest_ddtree.report.load_text import load_lines

    c1 = LoadPoint("concurrency", 1)
    # every request valid, none counted (no usage, the counter failed): no TPOT to rank
    uncounted = [
        load_sample(c1, b, float(i), 1.0, 0.1, (0.01,), None, True)
        for b in (16, 64)
        for i in (0, 1)
    ]
    stats, schedule = analyse(uncounted)
    assert all(s.valid == s.requests == 2 and s.uncounted == 2 for s in stats)
    text = "\n".join(load_lines(stats, schedule))
    why = "no token counts: the server sent no usage and no token counter counted the answers"
    assert f"best at C=1: none ({why})" in text and "every request valid" not in text
    assert schedule.choices[0].why_none == NoneWhy("no counts")
    page = render_load_section(
        [LoadTestResult("t.py::test_load", 1, ("main",), False, stats, schedule, tuple(uncounted))]
    )
    assert f"<li>best at C=1: none ({why})" in page and "every request valid" not in page
    # an invalid budget beside an uncounted one: both are said
    bad = [load_sample(c1, 32, 5.0, 1.0, 0.1, (), 10, False, ("role-leak",))]
    stats, schedule = analyse(uncounted + bad)
    assert schedule.choices[0].why_none == NoneWhy("no counts", invalid=1)
    assert none_text(schedule.choices[0].why_none) == (
        f"{why}; the other 1 budget(s) had invalid requests"
    )
    # only invalid budgets: the old reason, which is then true
    _, schedule = analyse(bad)
    lines = load_lines(*analyse(bad))
    assert "best at C=1: none (no budget had every request valid)" in lines


def test_a_load_point_without_speculative_statistics_is_named() -> None:
    from html import escape

    from pytest_ddtree.measure.load.record import LoadTestResult
    from pytest_ddtree.report.arm_text import speculation_warnings
    from pytest_ddtree.report.load_html import render_load_section
    from pytest_ddtree.report.load_text import load_lines

    c1, c4 = LoadPoint("concurrency", 1), LoadPoint("concurrency", 4)
    silent = [
        load_sample(p, None, float(i), 1.0, 0.1, (0.01,), 50, True, spec_reported=False)
        for p in (c1, c4)
        for i in range(2)
    ]
    stats, schedule = analyse(silent)
    assert all(s.no_spec_stats and not s.never_drafted for s in stats)
    rows = [_cells(x) for x in load_lines(stats, schedule)[1:3]]
    assert [r[11] for r in rows] == ["no stats", "no stats"]
    assert speculation_warnings(stats, by_budget=True) == [
        "no speculative statistics came back: is speculation on? 4 answer(s) at budget "
        "server-default (C=1, C=4) were read for speculative statistics and none carried "
        "drafts, acceptance or rounds; these timings may be the target model's alone"
    ]
    data = jsonmodel.to_json(stats[0])
    assert (data["no_speculative_statistics"], data["stats_asked"], data["spec_reports"]) == (
        True,
        2,
        0,
    )
    page = render_load_section(
        [LoadTestResult("t.py::test_load", 1, ("main",), False, stats, schedule, tuple(silent))]
    )
    assert "<td>server-default</td>" in page and "<td>no stats</td>" in page
    assert escape(speculation_warnings(stats, by_budget=True)[0]) in page
    assert Sample.from_json(silent[0].to_json()).spec_reported is False
    # one answer with statistics is enough: nothing is claimed
    told = [
        *silent[:1],
        load_sample(c1, None, 5.0, 1.0, 0.1, (0.01,), 50, True, spec_reported=True),
    ]
    assert not any(s.no_spec_stats for s in analyse(told)[0])


def test_load_tables_are_sorted_by_budget_then_load_point() -> None:
    """The run visits load point by load point; both tables read budget by budget."""
    from pytest_ddtree.measure.load.record import LoadTestResult
    from pytest_ddtree.report.load_html import render_load_section
    from pytest_ddtree.report.load_text import load_lines

    points = [LoadPoint("concurrency", c) for c in (8, 1, 16, 2)]
    budgets: list[int | None] = [64, None, 16, 1024]
    samples = [
        load_sample(p, b, float(i), 1.0, 0.1, (0.01,), 50, True)
        for p in points
        for b in budgets
        for i in range(2)
    ]
    random.Random(7).shuffle(samples)
    stats, schedule = analyse(samples)
    lines = load_lines(stats, schedule)
    rows = [_cells(x) for x in lines[1 : 1 + len(points) * len(budgets)]]
    order = ["C=1", "C=2", "C=8", "C=16"]
    expected = [(p, b) for b in ("server-default", "16", "64", "1024") for p in order]
    assert [(r[0], r[1]) for r in rows] == expected
    page = render_load_section(
        [LoadTestResult("t.py::test_load", 1, ("main",), False, stats, schedule, tuple(samples))]
    )
    table = page[page.index("<table") :]
    cells = [table.index(f"<td>{p}</td><td>{b}</td>") for p, b in expected]
    assert cells == sorted(cells)


def test_load_charts_share_the_reports_scale_and_say_when_empty() -> None:
    import re

    from pytest_ddtree.report.charts import HEIGHT, WIDE
    from pytest_ddtree.report.load_html import latency_chart

    c1, c4 = LoadPoint("concurrency", 1), LoadPoint("concurrency", 4)
    stats, _ = analyse(_tpot_samples(c1, 16, 0.01) + _tpot_samples(c4, 16, 0.02))
    chart = latency_chart(stats, "tpot", "TPOT vs load")
    size = re.search(r'<svg class="chart load"[^>]*width="(\d+)" height="(\d+)"', chart)
    assert size is not None, chart
    # the chart engine's size, the card's whole width as the throughput chart's (not half)
    assert (size.group(1), size.group(2)) == (str(WIDE), str(HEIGHT))
    # the report's type scale (its .tick and .axis-title classes), no font size of its own
    assert "font-size" not in chart and 'class="tick"' in chart and 'class="axis-title"' in chart
    # round ticks with their unit: TPOT near 20 ms reads 0, 5, ... ms, never 0.349 or 2.78e+03
    ticks = re.findall(r'class="tick"[^>]*>([^<]+)</text>', chart)
    assert ticks[:6] == ["0 ms", "5 ms", "10 ms", "15 ms", "20 ms", "25 ms"], ticks
    assert not any("e+" in t for t in ticks), ticks
    # every request invalid: no figure to draw, and the page says so in words
    bad = [load_sample(c1, 16, 0.0, 1.0, 0.1, (), 10, False, ("role-leak",))]
    stats, _ = analyse(bad)
    empty = latency_chart(stats, "tpot", "TPOT vs load")
    assert "<svg" not in empty and "nothing to draw" in empty and "TPOT vs load" in empty


def test_a_stalled_clients_note_sits_under_the_load_table_at_full_width() -> None:
    from html import escape

    from pytest_ddtree.measure.load.record import LoadTestResult
    from pytest_ddtree.report.load_html import render_load_section

    c4 = LoadPoint("concurrency", 4)
    samples = _tpot_samples(c4, 16, 0.02)
    stats, schedule = analyse(samples)
    late = ClientHealth(0.2, 1.0, 10, 1000, LAG_LIMIT * 2, 0.05, 100, lag_total=0.2)
    stats = [replace(stats[0], client=late)]
    page = render_load_section(
        [LoadTestResult("t.py::test_load", 1, ("main",), False, stats, schedule, tuple(samples))]
    )
    # the table's cell holds the verdict and a reference; the reason is a note, not a column
    assert "<td>STALLED [1]</td>" in page
    assert f"<li>[1] C=4, budget 16: STALLED: {escape(client_reason(late))}</li>" in page


def test_a_withheld_slo_verdict_advises_by_what_held_the_client() -> None:
    from pytest_ddtree.measure.load.tester import LoadFailure
    from pytest_ddtree.report.load_text import failure_text

    c1 = LoadPoint("concurrency", 1)
    # every request takes ~1 s end to end: an e2e SLO of 10 ms misses at the point
    stats, _ = analyse(_tpot_samples(c1, 16, 0.010), slo=SLO(e2e=0.01))
    assert stats[0].slo_met is False
    stalled = ClientHealth(0.2, 1.0, 10, 1000, LAG_LIMIT * 2, 0.05, 100, lag_total=0.2)
    busy = ClientHealth(CPU_LIMIT + 0.05, 1.0, 10, 1000, 0.001, 0.002, 100)
    held = failure_text(LoadFailure((replace(stats[0], client=stalled),)))
    assert held.startswith("SLO verdict withheld: the client was saturated or stalled")
    assert "(run on a quieter machine):" in held and "-n" not in held.splitlines()[0], held
    assert "; client stalled: " in held
    queued = failure_text(LoadFailure((replace(stats[0], client=busy),)))
    assert "(lower the concurrency or spread the load over processes with -n):" in queued
    assert "; client saturated: " in queued


@pytest.mark.parametrize(
    ("drafted", "reported"),
    [((0, 0, 0), (True, True, True)), ((None, None, None), (False, False, False))],
    ids=["never-drafted", "no-spec-stats"],
)
def test_a_budget_and_a_load_point_count_the_same_samples_speculation_alike(
    drafted: tuple[int | None, ...], reported: tuple[bool, ...]
) -> None:
    from pytest_ddtree.measure.arm import ArmStats, budget_json

    c1 = LoadPoint("concurrency", 1)
    samples = [
        load_sample(c1, 16, float(i), 1.0, 0.1, (0.01,), 50, True, drafted_tokens=d)
        for i, d in enumerate(drafted)
    ]
    samples = [replace(s, spec_reported=r) for s, r in zip(samples, reported, strict=True)]
    keys = ("drafted_tokens", "draft_reports", "never_drafted", "stats_asked", "spec_reports")
    keys += ("no_speculative_statistics",)
    point, budget = jsonmodel.to_json(summarize_point(samples)), budget_json(ArmStats.of(samples))
    assert {k: point[k] for k in keys} == {k: budget[k] for k in keys}
    assert point["never_drafted"] or point["no_speculative_statistics"]
