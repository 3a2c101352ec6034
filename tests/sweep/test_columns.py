"""The terminal's tables and the HTML report's are one column specification
(``report/columns.py``): the same headers, in the same order, with the same cells (pure, no
server)."""

from __future__ import annotations

import html
import re

from load._samples import load_sample

from pytest_ddtree.measure.load import LoadPoint, analyse
from pytest_ddtree.measure.load.record import LoadTestResult
from pytest_ddtree.measure.sweep import Sample, SweepRun
from pytest_ddtree.report.html import render_html
from pytest_ddtree.report.load_html import render_load_section
from pytest_ddtree.report.load_text import load_lines
from pytest_ddtree.report.terminal import table_lines

from ._factory import synthetic_sweep


def _html_rows(page: str, table_class: str) -> list[list[str]]:
    """The first table of ``table_class``: its header row and body rows, as text."""
    table = re.search(rf'<table class="{table_class}">(.*?)</table>', page, re.S)
    assert table is not None, page[-2000:]

    def text(cell: str) -> str:
        return html.unescape(re.sub(r"<br>", " ", re.sub(r"<(?!br>)[^>]+>", "", cell))).strip()

    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(1), re.S)
    return [[text(c) for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r, re.S)] for r in rows]


def _text_rows(lines: list[str], n: int) -> list[list[str]]:
    """The first ``n`` lines of a terminal table, split into cells (two spaces or more part
    them; no cell holds two spaces in a row)."""
    return [re.split(r"\s{2,}", line.strip()) for line in lines[:n]]


def test_the_sweep_table_has_one_column_spec_in_the_terminal_and_the_html() -> None:
    samples = synthetic_sweep({16: 500.0, 64: 900.0, 256: 700.0}, spread=15.0)
    samples.append(Sample(256, "essay", 1, False, codes=("role-leak",), messages=("x",)))
    run = SweepRun(samples=samples, metadata={}, seed=5)
    terminal = table_lines(run.summary())
    del terminal[1]  # the dashed rule under the header
    page = _html_rows(render_html(run), "stats one-line")
    text = _text_rows(terminal, len(page))
    assert [len(r) for r in text] == [len(r) for r in page] == [9] * 4
    assert page == text, (page, text)
    assert page[0][2] == "decode tok/s median [95% CI] n"
    assert page[3][1] == "9/10" and page[3][-1] == "INVALID (role-leak)"


def test_the_load_table_has_one_column_spec_in_the_terminal_and_the_html() -> None:
    c1, c4 = LoadPoint("concurrency", 1), LoadPoint("concurrency", 4)
    samples = [
        load_sample(p, b, float(i), 1.0 + b / 1000, 0.1, (0.01, 0.02), 50, True)
        for p in (c1, c4)
        for b in (16, 64)
        for i in range(6)
    ]
    stats, schedule = analyse(samples)
    terminal = load_lines(stats, schedule)
    result = LoadTestResult("t.py::test_load", 1, ("main",), False, stats, schedule, ())
    page = _html_rows(render_load_section([result]), "stats load-points")
    text = _text_rows(terminal, len(page))
    assert [len(r) for r in page] == [14] * 5
    assert page == text, (page, text)
    assert page[0][3] == "TTFT p50/p99" and [r[:2] for r in page[1:]] == [
        ["C=1", "16"],
        ["C=4", "16"],
        ["C=1", "64"],
        ["C=4", "64"],
    ]
