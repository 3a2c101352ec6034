"""Report writers: terminal table, sweep.json, sweep.html (pure, no server)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import shutil
import subprocess
from html import escape
from pathlib import Path

import pytest

from pytest_ddtree.checks.invariants import check
from pytest_ddtree.measure.arm import budget_json
from pytest_ddtree.measure.sweep import DepthProfile, Sample, SweepRun
from pytest_ddtree.reference import ReferenceServer
from pytest_ddtree.report import (
    SCHEMA_VERSION,
    read_sweep_json,
    render_html,
    table_lines,
    write_report,
    write_sweep_json,
)
from pytest_ddtree.report.depth_text import deeper_line
from pytest_ddtree.report.jsonfile import SWEEP_JSON_SCHEMA, sweep_from_json
from pytest_ddtree.wire.client import DDTreeClient

from ._factory import synthetic_sweep

META = {
    "endpoint": "http://127.0.0.1:8000/v1",
    "model": "tiny-<model>",
    "dialect": "ddtree",
    "budgets": [16, 64, 256],
}


def _run(with_invalid: bool = True) -> SweepRun:
    samples = synthetic_sweep({16: 500.0, 64: 900.0, 256: 700.0}, spread=15.0)
    if with_invalid:
        samples.append(
            Sample(
                256,
                "essay",
                1,
                False,
                codes=("role-leak",),
                messages=("'user:' at line start <b>",),
            )
        )
    return SweepRun(samples=samples, metadata=dict(META), seed=5)


def test_table_has_a_row_per_budget_and_the_recommendation() -> None:
    lines = table_lines(_run().summary())
    assert lines[0].split()[0] == "tree_budget"
    rows = {ln.split()[0]: ln for ln in lines[2:5]}
    assert set(rows) == {"16", "64", "256"}
    assert "9/9" in rows["64"] and "best" in rows["64"]
    assert "9/10" in rows["256"] and "INVALID (role-leak)" in rows["256"]
    # decode median with its CI: "900 [890, 912]"
    assert re.search(r"\b\d{3} \[\d{3}, \d{3}\]", rows["64"])
    assert lines[-1].startswith("Recommended tree_budget=64")


def test_concurrent_timings_are_labelled() -> None:
    run = _run(False)
    run.samples[0] = Sample(16, "essay", 0, True, decode_tokens_per_second=500.0, concurrent=True)
    assert any("concurrently" in ln for ln in table_lines(run.summary()))


def test_sweep_json_round_trip(tmp_path: Path) -> None:
    run = _run()
    path = write_sweep_json(run, tmp_path / "deep" / "sweep.json")
    doc = json.loads(path.read_text())
    assert doc["schema_version"] == SCHEMA_VERSION == 1
    assert doc["recommendation"]["tree_budget"] == 64
    assert [b["tree_budget"] for b in doc["budgets"]] == [16, 64, 256]
    assert len(doc["samples"]) == 28
    again = read_sweep_json(path)
    assert again.samples == run.samples and again.seed == 5
    assert again.summary().to_json() == run.summary().to_json()
    # No temporary file is left behind by the atomic write.
    assert [p.name for p in path.parent.iterdir()] == ["sweep.json"]


def test_json_schema_is_itself_valid() -> None:
    import jsonschema

    jsonschema.validators.validator_for(SWEEP_JSON_SCHEMA).check_schema(SWEEP_JSON_SCHEMA)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(schema_version=2), "unsupported schema_version 2"),
        (lambda d: d["samples"][0].update(valid="yes"), r"samples/0/valid: 'yes' is not of type"),
        (lambda d: d.pop("samples"), "'samples' is a required property"),
    ],
)
def test_bad_sweep_json_gives_one_line_error(mutate: object, message: str, tmp_path: Path) -> None:
    path = write_sweep_json(_run(), tmp_path / "s.json")
    doc = json.loads(path.read_text())
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(ValueError, match=message) as info:
        sweep_from_json(doc, source="s.json")
    assert "\n" not in str(info.value)


def test_unreadable_and_non_json_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read sweep report"):
        read_sweep_json(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"bad.json: not valid JSON \(line 1"):
        read_sweep_json(bad)


def test_html_is_self_contained_and_shows_everything(tmp_path: Path) -> None:
    paths = write_report(_run(), tmp_path)
    html = paths.html.read_text()
    assert paths.json.exists()
    # Nothing is fetched: no scripts, links, images or remote URLs in attributes.
    assert "<script" not in html
    assert not re.search(r"\b(src|href)\s*=", html)
    assert not re.search(r"url\(", html)
    # Three charts, per-request points (27 valid dots in each chart with data).
    assert html.count('<svg class="chart"') == 3
    assert html.count('class="pt"') == 27 * 3
    # The invalid request is drawn apart with its code, and listed with its message.
    assert html.count('<g class="invalid">') == 3
    assert "role-leak" in html
    # Untrusted text is escaped.
    assert "tiny-&lt;model&gt;" in html and "tiny-<model>" not in html
    assert "line start &lt;b&gt;" in html and "line start <b>" not in html
    assert "Recommended tree_budget=64" in html
    assert "tree_budget (log2 scale)" in html


def test_html_log2_axis_spaces_doublings_evenly() -> None:
    html = render_html(_run(False))
    first_chart = html.split('<svg class="chart"')[1]
    xs = {}
    for label in ("16", "64", "256"):
        m = re.search(
            rf'<text class="tick" x="([\d.]+)" y="[\d.]+" text-anchor="middle">{label}</text>',
            first_chart,
        )
        assert m, label
        xs[label] = float(m.group(1))
    assert xs["64"] - xs["16"] == pytest.approx(xs["256"] - xs["64"], abs=0.2)


def test_html_without_any_valid_sample_still_renders() -> None:
    run = SweepRun([Sample(16, "a", 0, False, codes=("empty",))], {"model": "m"})
    html = render_html(run)
    # the cards say there is no recommendation and no valid request to take a figure from
    assert (
        '<div class="card rec none"><div class="label">Recommended tree_budget '
        '<span class="badge">no recommendation</span></div><div class="big">—</div>'
        '<div class="sub">no valid timings</div><p class="rec-msg">No recommendation: no budget '
        "produced valid timed requests (invalid requests at 16).</p>"
    ) in html
    assert '<div class="big">0<span class="of">/1</span></div>' in html
    assert '<div class="sub">no valid request to take it from</div>' in html
    # every chart still renders: no request dot or budget mark, the one invalid request
    # drawn apart with its code
    assert html.count('<svg class="chart"') == 3
    assert 'class="pt"' not in html and '<g class="mark">' not in html
    assert html.count('<g class="invalid">') == 3
    assert html.count('text-anchor="middle">empty</text></g>') == 3
    # none of the nothing-valid cards appears once valid samples exist
    valid = render_html(_run(False))
    assert "no valid timings" not in valid and "no recommendation</span>" not in valid
    assert "no valid request to take it from" not in valid
    assert 'class="pt"' in valid and '<g class="mark">' in valid


def _chromium() -> str | None:
    return (
        shutil.which("chromium")
        or shutil.which("chromium-browser")
        or shutil.which("google-chrome")
    )


def _console_lines(browser: str, page: Path, *, window: str | None = None) -> tuple[str, str]:
    """The DOM headless Chromium leaves after the page's scripts ran (laid out in a
    ``window`` such as ``"1200,900"`` when given), and the page's console lines."""
    size = [f"--window-size={window}"] if window else []
    proc = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            *size,
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    console = "\n".join(ln for ln in proc.stderr.splitlines() if ":CONSOLE" in ln)
    return proc.stdout, console


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed")
def test_html_renders_in_headless_chromium_without_console_errors(tmp_path: Path) -> None:
    browser = _chromium()
    assert browser is not None
    page = write_report(_run(), tmp_path).html
    dom, console = _console_lines(browser, page)
    assert "Per-budget statistics" in dom
    assert console == ""
    # The detector itself works: a page with a script error is caught.
    broken = tmp_path / "broken.html"
    broken.write_text("<html><body><script>notDefined()</script></body></html>")
    _, console = _console_lines(browser, broken)
    assert "notDefined" in console


def test_report_files_are_readable_as_the_umask_allows(tmp_path: Path) -> None:
    import os
    import stat

    from pytest_ddtree.report._atomic import write_text_atomic

    old = os.umask(0o022)
    try:
        path = write_text_atomic(tmp_path / "sweep.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_acceptance_rate_is_shown_where_the_length_is_unknown() -> None:
    from pytest_ddtree.measure.arm import ArmStats
    from pytest_ddtree.measure.sweep import Sample, summarize
    from pytest_ddtree.report.arm_text import acceptance_cell
    from pytest_ddtree.report.terminal import table_lines

    samples = [
        Sample(
            tree_budget=None,
            prompt_id="p",
            round=r,
            valid=True,
            completion_tokens=64,
            decode_tokens_per_second=40.0 + r,
            acceptance_rate=rate,
        )
        for r, rate in enumerate((0.8, 0.9))
    ]
    st = ArmStats.of(samples)
    assert st.mean_acceptance_length is None and st.mean_acceptance_rate == pytest.approx(0.85)
    assert acceptance_cell(st) == "rate 0.85"
    assert any("rate 0.85" in line for line in table_lines(summarize(samples)))
    again = Sample.from_json(samples[0].to_json())
    assert again.acceptance_rate == 0.8


def test_a_sweep_that_never_drafted_says_so() -> None:
    from pytest_ddtree.measure.sweep import summarize

    samples = [
        Sample(
            budget,
            "p",
            r,
            True,
            completion_tokens=64,
            decode_tokens_per_second=40.0 + r,
            drafted_tokens=drafted,
        )
        for budget, drafted in ((16, 0), (64, 5))
        for r in range(3)
    ]
    summary = summarize(samples)
    lines = table_lines(summary)
    rows = {ln.split()[0]: ln for ln in lines[2:4]}
    assert "no drafts" in rows["16"] and "no drafts" not in rows["64"]
    warning = (
        "WARNING: speculation never drafted at budget 16: 0 draft tokens in 3 request(s) that "
        "reported their drafts; these timings are the target model's alone, not speculative "
        "decoding"
    )
    assert warning in lines
    assert budget_json(summary.budgets[0])["never_drafted"] is True
    assert escape(warning.removeprefix("WARNING: ")) in render_html(SweepRun(samples=samples))
    only_idle = summarize([s for s in samples if s.tree_budget == 16])
    assert any("at every budget 16" in ln for ln in table_lines(only_idle))
    assert Sample.from_json(samples[3].to_json()).drafted_tokens == 5


def test_terminal_table_has_a_legend() -> None:
    lines = table_lines(_run().summary(), verbose=True)
    legend = next(ln for ln in lines if ln.startswith("([95% CI]"))
    assert "verify steps" in legend and "srv/cli" in legend and "sweep.md#columns" in legend


def test_html_shows_transport_counts_as_a_table() -> None:
    run = _run(False)
    run.metadata.extra["transport"] = {
        "endpoint": {"requests": 12, "reuse_retries": 1},
        "baseline": {"requests": 3, "reuse_retries": 0},
    }
    page = render_html(run)
    assert "{'requests'" not in page and "requests=" not in page
    assert "<th>client</th><th>requests</th><th>reuse retries</th>" in page
    assert "<tr><td>endpoint</td><td>12</td><td>1</td></tr>" in page


# ---------------------------------------------------------------- acceptance by depth


def _depth_run(reference_server: ReferenceServer) -> SweepRun:
    """A small sweep of real reference-server answers (histograms and all)."""
    samples = []
    with DDTreeClient(reference_server.base_url) as client:
        for budget in (2, 16, 256):
            for i, prompt in enumerate(("Write a long essay about rivers.", "Explain tides.")):
                c = client.chat(prompt, max_tokens=96, tree_budget=budget, prompt_id=f"p{i}")
                samples.append(Sample.from_completion(c, check(c), round=0))
    return SweepRun(samples=samples, metadata=dict(META, budgets=[2, 16, 256]), seed=5)


def test_acceptance_by_depth_in_json_html_and_terminal(
    reference_server: ReferenceServer, tmp_path: Path
) -> None:
    run = _depth_run(reference_server)
    summary = run.summary()
    for st in summary.budgets:
        assert st.depth is not None
        mine = [s for s in run.samples if s.tree_budget == st.tree_budget]
        # pooled exactly: every request's rounds, summed depth by depth
        width = max(len(s.acceptance_histogram) for s in mine)
        pooled = [sum(s.acceptance_histogram[k] for s in mine) for k in range(width)]
        assert list(st.depth.histogram) == pooled
        tokens = sum(s.completion_tokens or 0 for s in mine)
        rounds = sum(s.decode_rounds or 0 for s in mine)
        assert st.depth.mean_accepted_length == pytest.approx(tokens / rounds)
    doc = json.loads(write_sweep_json(run, tmp_path / "sweep.json").read_text())
    figures = doc["budgets"][-1]["acceptance_by_depth"]
    assert figures["sources"] == ["ddtree_stats.acceptance_histogram"]
    reach = summary.budgets[-1].depth.reaching
    assert figures["conditional_acceptance"] == [
        round(b / a, 4) for a, b in itertools.pairwise(reach) if a
    ]
    assert read_sweep_json(tmp_path / "sweep.json").samples == run.samples
    html = render_html(run)
    assert "<h2>Acceptance by depth</h2>" in html and 'class="chart depth"' in html
    lines = table_lines(summary)
    assert lines[-1].startswith("acceptance by depth at the largest budget, tree_budget=256:")
    assert escape(lines[-1]) in html


def test_deeper_line_answers_whether_a_larger_budget_may_help() -> None:
    grown = DepthProfile((40, 30, 20, 10), 4, ("x",))  # 100 rounds; depth 3: 10 of 30
    assert (
        deeper_line([(16, DepthProfile((90, 10), 1, ("x",))), (64, grown)])
        == "acceptance by depth at the largest budget, tree_budget=64: deeper trees are still "
        "accepted (accept len pooled by depth 1.10 at 16, 2.00 at 64; 33% of the 30 rounds "
        "accepted to depth 2 were accepted at depth 3, none deeper than 3): a budget above 64 "
        "may help; "
        "sweep larger budgets"
    )
    same = DepthProfile((41, 29, 20, 10), 4, ("x",))  # 1.99 at the larger budget
    line = deeper_line([(64, grown), (128, same)])
    assert (
        line is not None
        and "deeper trees add nothing (accept len pooled by depth 2.00 at 64" in line
    )
    assert line.endswith("a budget above 128 is unlikely to help")
    # one budget: the deepest well-reached depth decides
    falling = deeper_line([(64, grown)])
    assert falling is not None and "acceptance falls off (33% of the 30 rounds" in falling
    rising = deeper_line([(64, DepthProfile((10, 10, 20, 60, 0, 0), 4, ("x",)))])
    assert rising is not None and "deeper trees are still accepted (75% of the 80" in rising
    few = deeper_line([(64, DepthProfile((3, 2), 1, ("x",)))])
    assert few is not None and "too few" in few
    assert deeper_line([]) is None


def test_no_histogram_no_depth_section() -> None:
    run = _run(False)
    assert all(st.depth is None for st in run.summary().budgets)
    assert "Acceptance by depth" not in render_html(run)
    assert not any(ln.startswith("acceptance by depth") for ln in table_lines(run.summary()))


def test_a_sweep_whose_server_sent_no_speculative_statistics_says_so() -> None:
    from pytest_ddtree.measure.sweep import summarize

    # budget 16: three answers read for statistics, none carried any (a server without
    # speculation); budget 64: they came back; budget 128: none were asked for
    samples = [
        Sample(
            budget,
            "p",
            r,
            True,
            completion_tokens=64,
            decode_tokens_per_second=40.0 + r,
            drafted_tokens=0 if budget == 16 else None,
            spec_reported=reported,
        )
        for budget, reported in ((16, False), (64, True), (128, None))
        for r in range(3)
    ]
    summary = summarize(samples)
    lines = table_lines(summary)
    rows = {ln.split()[0]: ln for ln in lines[2:5]}
    assert "no stats" in rows["16"] and "no stats" not in rows["64"] + rows["128"]
    # the silent server is not also said to have never drafted
    assert "no drafts" not in rows["16"]
    warning = (
        "WARNING: no speculative statistics came back: is speculation on? 3 answer(s) at "
        "budget 16 were read for speculative statistics and none carried drafts, acceptance "
        "or rounds; these timings may be the target model's alone"
    )
    assert warning in lines
    assert not any("speculation never drafted at" in ln for ln in lines)
    first = budget_json(summary.budgets[0])
    assert first["no_speculative_statistics"] is True and first["never_drafted"] is False
    assert (first["stats_asked"], first["spec_reports"]) == (3, 0)
    assert budget_json(summary.budgets[1])["no_speculative_statistics"] is False
    assert budget_json(summary.budgets[2])["no_speculative_statistics"] is False
    assert escape(warning.removeprefix("WARNING: ")) in render_html(SweepRun(samples=samples))
    assert Sample.from_json(samples[0].to_json()).spec_reported is False
    with pytest.raises(ValueError, match="'spec_reported' must be true, false or null"):
        Sample.from_json({**samples[0].to_json(), "spec_reported": "no"})


def test_every_chart_of_the_page_has_one_size_and_font_scale(
    reference_server: ReferenceServer,
) -> None:
    from load._samples import load_sample

    from pytest_ddtree.measure.load import LoadPoint, analyse
    from pytest_ddtree.measure.load.record import LoadTestResult
    from pytest_ddtree.report.charts import HEIGHT, NARROW, WIDE

    points = (LoadPoint("concurrency", 1), LoadPoint("concurrency", 4))
    samples = [
        load_sample(p, b, float(i), 1.0, 0.1 + 0.01 * i, (0.01, 0.02), 50, True)
        for p in points
        for b in (None, 16)
        for i in range(3)
    ]
    stats, schedule = analyse(samples)
    load = LoadTestResult("t.py::test_load", 1, ("main",), False, stats, schedule, tuple(samples))
    html = render_html(_depth_run(reference_server), load=[load])
    frames = re.findall(
        r'<svg class="chart( depth| load)?" width="(\d+)" height="(\d+)" viewBox="0 0 (\d+) (\d+)"',
        html,
    )
    kinds = sorted({kind for kind, *_ in frames})
    assert kinds == ["", " depth", " load"], kinds
    assert html.count("<svg") == len(frames) + html.count('<span class="lg"><svg')
    for _, w, h, vw, vh in frames:
        assert (int(w), int(h)) in ((WIDE, HEIGHT), (NARROW, HEIGHT)) and (w, h) == (vw, vh)
    charts = re.findall(r'<svg class="chart.*?</svg>', html, re.S)
    assert charts and not any("font-size" in c or "style=" in c for c in charts)


def test_the_valid_requests_card_counts_the_failed_tests_too(tmp_path: Path) -> None:
    # every timed request passed, but tests around them failed: the card says so (it once
    # read "every request passed" beside a Diagnosis table of 7 failing tests)
    run = _run(False)
    run.metadata.tests = {"passed": 2, "failed": 7}
    html = render_html(run)
    assert (
        "every timed request passed the invariants; 7 of 9 tests failed (see Diagnosis and the "
        "run&#x27;s output)"
    ) in html
    assert '<div class="card bad"><div class="label">Valid requests</div>' in html
    # and the counts survive sweep.json
    write_report(run, str(tmp_path))
    assert read_sweep_json(tmp_path / "sweep.json").metadata.tests == {"passed": 2, "failed": 7}


def test_budgets_that_cannot_be_told_apart_are_the_answer_in_the_html() -> None:
    samples = synthetic_sweep({32: 700.0, 64: 905.0, 128: 900.0}, spread=40.0)
    html = render_html(SweepRun(samples=samples, metadata=dict(META), seed=5))
    assert '<div class="big">64 or 128</div>' in html
    assert '<span class="badge">either one</span>' in html
    assert "Either tree_budget=64 or 128: " in html


def test_a_tie_in_acceptance_is_named_as_a_tie() -> None:
    samples = synthetic_sweep({16: 500.0, 512: 900.0, 1024: 700.0}, spread=15.0)
    samples = [
        dataclasses.replace(s, mean_acceptance_length=3.78 if s.tree_budget != 16 else 2.5)
        for s in samples
    ]
    html = render_html(SweepRun(samples=samples, metadata=dict(META), seed=5))
    assert "at tree_budget 512 and 1024 (tied) (tokens per decode round)" in html


_MEASURE = (
    '<script>window.addEventListener("load",()=>{const out=[];'
    'document.querySelectorAll(".table-scroll").forEach(d=>out.push('
    'd.firstElementChild.className+"="+d.scrollWidth+"/"+d.clientWidth));'
    'const p=document.createElement("pre");p.id="widths";p.textContent="WIDTHS "+out.join(";");'
    "document.body.appendChild(p);});</script>"
)


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed")
def test_the_load_table_fits_a_1200_px_window(
    reference_server: ReferenceServer, tmp_path: Path
) -> None:
    # Laid out by headless Chromium at 1,200 px: no table needs a horizontal scrollbar with
    # the figures of a real run (three budgets, three load points, e2e above 100 ms, a
    # stalled client). The load table was 1,268 px in a 1,022 px card.
    from dataclasses import replace

    from load._samples import load_sample

    from pytest_ddtree.measure.load import LoadPoint, analyse
    from pytest_ddtree.measure.load.metrics import LAG_LIMIT, ClientHealth
    from pytest_ddtree.measure.load.record import LoadTestResult

    browser = _chromium()
    assert browser is not None
    points = [LoadPoint("concurrency", c) for c in (1, 4, 8)]
    samples = [
        load_sample(p, b, float(i), 0.12118 + 0.001 * i, 0.02572, (0.00325, 0.00528), 96, True)
        for p in points
        for b in (16, 32, 64)
        for i in range(4)
    ]
    stats, schedule = analyse(samples)
    late = ClientHealth(0.2, 1.0, 10, 1000, LAG_LIMIT * 2, 0.05, 100, lag_total=0.2)
    stats = [replace(stats[0], client=late), *stats[1:]]
    load = LoadTestResult("t.py::test_load", 1, ("main",), False, stats, schedule, tuple(samples))
    page = tmp_path / "sweep.html"
    page.write_text(
        render_html(_depth_run(reference_server), load=[load]).replace(
            "</body>", _MEASURE + "</body>"
        )
    )
    dom, console = _console_lines(browser, page, window="1200,900")
    found = re.search(r'<pre id="widths">WIDTHS ([^<]*)', dom)
    assert found is not None, console[-2000:] or dom[-2000:]
    widths = dict(w.rsplit("=", 1) for w in found.group(1).split(";"))
    assert "stats load-points" in widths, widths
    for table, sizes in widths.items():
        scroll, client = (int(v) for v in sizes.split("/"))
        assert scroll <= client, f"{table}: {scroll} px in a {client} px box"


_LINES = (
    # the lines of a cell's text: its text boxes, a new line where one starts below the last
    "<script>function lines(td){const w=document.createTreeWalker(td,NodeFilter.SHOW_TEXT);"
    "const rs=[];while(w.nextNode()){const r=document.createRange();r.selectNodeContents("
    "w.currentNode);rs.push(...r.getClientRects());}rs.sort((a,b)=>a.top-b.top);"
    "let n=0,bottom=-1e9;for(const r of rs){if(r.top>=bottom-1){n++;bottom=r.bottom;}"
    "else{bottom=Math.max(bottom,r.bottom);}}return n;}"
    'window.addEventListener("load",()=>{const out=[];'
    'const t=document.querySelector("table.stats");'
    't.querySelectorAll("tbody tr").forEach(tr=>[2,7,8].forEach(i=>'
    'out.push(i+":"+lines(tr.cells[i])+":"+tr.cells[i].textContent)));'
    'const box=t.parentElement;out.push("fit:"+(box.scrollWidth<=box.clientWidth));'
    'const p=document.createElement("pre");p.id="lines";p.textContent="LINES "+out.join(";");'
    "document.body.appendChild(p);});</script>"
)


@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed")
def test_the_per_budget_intervals_slowdowns_and_verdicts_stay_on_one_line(
    tmp_path: Path,
) -> None:
    # laid out by headless Chromium in a 1,200 px window, with the figures of the bundled
    # suite's sweep (seven budgets, thousands of tokens/s): "[2,499, 2,532] n=6" and the
    # verdict pills wrapped onto two lines
    budgets = {16: 2530.0, 32: 2727.0, 64: 2910.0, 128: 2456.0, 256: 1826.0, 512: 1188.0}
    samples = synthetic_sweep({**budgets, 1024: 679.0}, spread=40.0, rounds=2)
    run = SweepRun(samples=samples, metadata=dict(META), seed=5)
    page = tmp_path / "sweep.html"
    page.write_text(render_html(run).replace("</body>", _LINES + "</body>"))
    browser = _chromium()
    assert browser is not None
    dom, console = _console_lines(browser, page, window="1200,900")
    found = re.search(r'<pre id="lines">LINES ([^<]*)', dom)
    assert found is not None, console[-2000:] or dom[-2000:]
    cells = found.group(1).split(";")
    assert cells[-1] == "fit:true", cells  # no sideways scroll needed at 1,200 px
    wrapped = [c for c in cells[:-1] if c.split(":", 2)[1] != "1"]
    assert len(cells) == 1 + 7 * 3 and not wrapped, wrapped
