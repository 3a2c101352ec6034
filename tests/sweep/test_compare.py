"""Comparing two sweep.json files (pure, plus the command line)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ddtree.measure.sweep import Sample, SweepRun
from pytest_ddtree.report import write_sweep_json
from pytest_ddtree.report.compare import compare_runs, main, parse_threshold

from ._factory import synthetic_sweep

BASE = {16: 500.0, 64: 900.0, 256: 700.0}


def _run(scale: float = 1.0, seed: int = 0, **meta: object) -> SweepRun:
    means = {b: m * scale for b, m in BASE.items()}
    return SweepRun(synthetic_sweep(means, spread=10.0, seed=seed), {"model": "m", **meta})


def test_same_performance_is_not_a_regression() -> None:
    result = compare_runs(_run(seed=1), _run(seed=2))
    assert result.regressions == []
    assert {r.outcome for r in result.rows} <= {
        "no significant change",
        "worse (within threshold)",
        "better",
    }
    assert result.lines()[-1].startswith("OK")


def test_twenty_percent_slower_regresses_at_ten_percent_threshold() -> None:
    result = compare_runs(_run(seed=1), _run(0.8, seed=2), threshold=0.10)
    assert [r.tree_budget for r in result.regressions] == [16, 64, 256]
    row = result.rows[1]
    assert row.change is not None and -0.23 < row.change < -0.17
    assert row.ci is not None and row.ci[1] < 0
    assert result.lines()[-1] == "FAIL: 3 budget(s) regressed: tree_budget=16, 64, 256"


def test_significant_but_small_slowdown_is_within_threshold() -> None:
    result = compare_runs(_run(seed=1), _run(0.95, seed=2), threshold=0.10)
    assert result.regressions == []
    assert "worse (within threshold)" in {r.outcome for r in result.rows}


def test_ttft_metric_treats_higher_as_worse() -> None:
    base = _run(seed=1)
    slow = SweepRun(
        [
            Sample(s.tree_budget, s.prompt_id, s.round, True, ttft=(s.ttft or 0) * 1.5)
            for s in base.samples
        ],
        {},
    )
    assert len(compare_runs(base, slow, metric="ttft").regressions) == 3
    assert compare_runs(slow, base, metric="ttft").regressions == []


def test_newly_invalid_budget_is_a_regression_and_setup_change_warns() -> None:
    cand = _run(seed=2, model="other")
    cand.samples.append(Sample(64, "essay", 9, False, codes=("early-stop",)))
    result = compare_runs(_run(seed=1), cand)
    assert [(r.tree_budget, r.outcome) for r in result.regressions] == [(64, "now invalid")]
    assert any("setups differ: model: 'm' vs 'other'" in ln for ln in result.lines())


def test_budgets_in_one_file_only() -> None:
    cand = SweepRun([s for s in _run(seed=2).samples if s.tree_budget != 256], {})
    result = compare_runs(_run(seed=1), cand)
    verdicts = {r.tree_budget: r.outcome for r in result.rows}
    assert verdicts[256] == "only in baseline"
    # a budget the candidate did not measure fails the comparison
    assert [r.tree_budget for r in result.regressions] == [256]


def test_an_interrupted_run_is_flagged() -> None:
    result = compare_runs(_run(seed=1), _run(seed=2, interrupted=True))
    assert "the candidate run was interrupted: its sweep is partial" in result.setup_differences


@pytest.mark.parametrize(
    ("text", "value"), [("10%", 0.10), ("2.5%", 0.025), ("10", 0.10), (" 0% ", 0.0)]
)
def test_parse_threshold(text: str, value: float) -> None:
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["ten", "-5%", ""])
def test_parse_threshold_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="--threshold"):
        parse_threshold(text)


def test_command_line_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_sweep_json(_run(seed=1), tmp_path / "a.json")
    b = write_sweep_json(_run(0.7, seed=2), tmp_path / "b.json")
    assert main([str(a), str(a)]) == 0
    assert main([str(a), str(b), "--threshold", "10%"]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "FAIL: 3 budget(s) regressed" in out
    assert main([str(a), str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "nope.json: cannot read sweep report" in err
    assert main([str(a), str(a), "--threshold", "lots"]) == 2


def test_python_dash_m_entry_point(tmp_path: Path) -> None:
    a = write_sweep_json(_run(seed=1), tmp_path / "a.json")
    b = write_sweep_json(_run(0.7, seed=2), tmp_path / "b.json")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_ddtree.report.compare", str(a), str(b)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "tree_budget" in proc.stdout and "REGRESSION" in proc.stdout


def test_the_drift_checks_requests_are_not_compared() -> None:
    # the sweep's statistics leave out its drift-check blocks (a server measured twice more at
    # its first budget, and half as fast at the end); so does the comparison of two runs
    base = _run(seed=1)
    drift = [
        Sample(64, "essay", -1, True, decode_tokens_per_second=rate, drift_mark=mark)
        for mark, rate in [("start", 900.0), ("end", 450.0)] * 9
    ]
    drifted = SweepRun([*_run(seed=2).samples, *drift], {"model": "m"})
    row = next(r for r in compare_runs(base, drifted).rows if r.tree_budget == 64)
    assert (row.baseline_n, row.candidate_n) == (9, 9)
    assert row.outcome == "no significant change"
