"""SIGTERM (what CI's ``timeout`` sends) and a double Ctrl-C, as real signals to a real run:
the artefacts on disk are complete files and say the run is partial."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

TESTS = """
import pathlib
import time


def test_a_timed(ddtree_benchmark, tree_budget):
    ddtree_benchmark("Write a long essay about rivers.", max_tokens=16, rounds=2,
                     warmup_rounds=0)


def test_b_hangs(ddtree_client, tree_budget):
    pathlib.Path("ready").touch()
    time.sleep(120)
"""


# The second signal must land while the report is being written: the inner conftest
# announces that moment and holds it open for a second.
CONFTEST = """
import pathlib
import time

import pytest_ddtree.report as report

_write = report.write_report


def _slow_write(*args, **kwargs):
    pathlib.Path("finishing").touch()
    time.sleep(1.0)
    return _write(*args, **kwargs)


report.write_report = _slow_write
"""


def _env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DDTREE_", "OPENAI_", "PYTEST_ADDOPTS", "PYTEST_XDIST"))
    }


def _interrupt(tmp_path: Path, signals: list[tuple[str, int]]) -> subprocess.CompletedProcess[str]:
    """Run the suite and send each signal once its file (``ready``, ``finishing``) exists."""
    (tmp_path / "test_interrupted.py").write_text(TESTS)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "test_interrupted.py",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "--ddtree-reference-latency=off",
            "--ddtree-budgets=16,64",
            "--ddtree-report=rep",
            "--junitxml=junit.xml",
            "--benchmark-json=bench.json",
        ],
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        give_up = time.monotonic() + 90
        for name, sig in signals:
            while not (tmp_path / name).exists():
                assert proc.poll() is None, proc.communicate()[0]
                assert time.monotonic() < give_up, f"the inner run never got to {name!r}"
                time.sleep(0.02)
            proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def _check_artefacts(tmp_path: Path, run: subprocess.CompletedProcess[str]) -> None:
    assert run.returncode == pytest.ExitCode.INTERRUPTED, run.stdout[-3000:]
    assert "Traceback" not in run.stdout, run.stdout[-3000:]
    report = json.loads((tmp_path / "rep" / "sweep.json").read_text())
    assert report["metadata"]["interrupted"] is True
    assert report["recommendation"]["partial"] is True
    assert report["recommendation"]["message"].startswith("Partial run (interrupted)")
    assert {s["prompt_id"] for s in report["samples"]} == {"test_a_timed"}
    html = (tmp_path / "rep" / "sweep.html").read_text()
    assert "Partial run (interrupted)" in html
    suites = ET.parse(tmp_path / "junit.xml").getroot()  # a complete, parseable file
    names = {case.get("name") for case in suites.iter("testcase")}
    assert any(str(n).startswith("test_a_timed") for n in names), names
    bench = json.loads((tmp_path / "bench.json").read_text())
    assert {b["name"].split("[")[0] for b in bench["benchmarks"]} == {"test_a_timed"}


def test_sigterm_writes_every_artefact_marked_partial(tmp_path: Path) -> None:
    run = _interrupt(tmp_path, [("ready", signal.SIGTERM)])
    _check_artefacts(tmp_path, run)
    assert "interrupted: partial run, the recommendation is not final" in run.stdout


def test_a_second_ctrl_c_cannot_make_the_report_look_complete(tmp_path: Path) -> None:
    run = _interrupt(tmp_path, [("ready", signal.SIGINT), ("finishing", signal.SIGINT)])
    # the second Ctrl-C came during the write: the report is still whole and still partial
    _check_artefacts(tmp_path, run)
    notes = json.loads((tmp_path / "rep" / "sweep.json").read_text())["metadata"]["notes"]
    assert "interrupted by SIGINT" in notes
