"""The bundled suite's sweep summary at a terminal's width: the legend wrapped to it, and
labels that say what ran (one budget, its n)."""

from __future__ import annotations

import os

import pytest


def test_one_budget_run_wraps_its_legend_and_labels_what_ran(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    columns = 80
    for name in list(os.environ):
        if name.startswith(("DDTREE_", "OPENAI_", "PYTEST_ADDOPTS", "PYTEST_XDIST")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("COLUMNS", str(columns))
    # one benchmark test (one prompt, one pass) at one budget: n=3
    result = pytester.runpytest(
        "--pyargs",
        "pytest_ddtree.suite",
        "-p",
        "no:randomly",
        "-p",
        "no:xdist",
        "-k",
        "test_sweep and essay",
        "--ddtree-budgets=64",
        "--ddtree-reference-latency=off",
        "--benchmark-quiet",
        f"--ddtree-report={pytester.path / 'report'}",
    )
    result.assert_outcomes(passed=1)
    lines = result.stdout.lines
    start = next(i for i, ln in enumerate(lines) if ln.startswith("([95% CI]"))
    end = next(i for i in range(start, len(lines)) if "sweep.md#columns)" in lines[i])
    assert all(len(ln) <= columns for ln in lines[start : end + 1]), lines[start : end + 1]
    text = result.stdout.str()
    assert "nothing was raced (one budget, 64: there is no other" in text, text
    # the HTML's Race card says what the terminal says, from the same metadata
    html = (pytester.path / "report" / "sweep.html").read_text()
    note = "--ddtree-sweep adaptive: nothing was raced (one budget, 64: there is no other to race"
    assert note in html and "An exhaustive sweep" not in html
    assert "the server's own" not in text
    assert "(one budget, n=3: nothing to compare it with, so no margin or minimum n" in text
    assert "min n 6" not in text, text


def test_a_long_skip_reason_in_the_answer_is_cut_at_a_word() -> None:
    from pytest_ddtree.pytest_plugin.summary import _shortened

    reason = (
        "the batched answer not compared: no other request was decoded beside the batched "
        "request at any time of it"
    )
    assert _shortened(reason) == (
        "the batched answer not compared: no other request was decoded beside the..."
    )
    assert _shortened("short reason") == "short reason"
    assert len(_shortened("x" * 200)) <= 80
