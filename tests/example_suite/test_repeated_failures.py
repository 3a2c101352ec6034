"""A failure repeated across tests (same codes, prompt, budget and evidence) is printed
whole once in the terminal; JUnit XML keeps every test's whole evidence."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[2] / "pytest_ddtree" / "suite"
EVIDENCE = "E       finish_reason: length"  # a line of the whole evidence block only


def _failures(output: str) -> str:
    """The FAILURES section (the short summary may repeat messages whole under CI)."""
    return output.split("= FAILURES =", 1)[-1].split("short test summary info", 1)[0]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("DDTREE_", "OPENAI_", "PYTEST_ADDOPTS", "PYTEST_XDIST")):
            monkeypatch.delenv(name)


def test_a_repeated_failure_prints_its_evidence_once_across_xdist_workers(
    pytester: pytest.Pytester, clean_env: None
) -> None:
    # one prompt whose every answer breaks json-schema, at budget 16 in test_smoke,
    # test_invariants and test_streaming, and at 256 in test_invariants; two workers,
    # each with its own embedded server (another port in each request line)
    xml = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess(
        "--pyargs",
        "pytest_ddtree.suite",
        "-p",
        "no:randomly",
        "-n",
        "2",
        "-k",
        "json-person and (test_smoke or test_invariants or test_stream_matches_plain)",
        "--ddtree-budgets=16,256",
        "--ddtree-reference-latency=off",
        "--ddtree-reference-fault=schema-ignored",
        f"--junitxml={xml}",
        timeout=180,
    )
    output = result.stdout.str() + result.stderr.str()
    result.assert_outcomes(failed=4)
    failures = _failures(output)
    # whole once per budget (16 and 256): the two other tests at 16 refer back
    assert failures.count(EVIDENCE) == 2, output
    refs = re.findall(r"^E   the same failure .* as (\S+) above", failures, re.MULTILINE)
    assert len(refs) == 2, output
    # each refers to the test whose evidence is printed, at budget 16, earlier on the page
    blocks = re.split(r"^_+ (\S+) _+$", failures, flags=re.MULTILINE)
    whole = [
        name for name, body in zip(blocks[1::2], blocks[2::2], strict=True) if EVIDENCE in body
    ]
    for ref in refs:
        name = ref.rsplit("::", 1)[-1]
        assert name in whole and "256" not in name, (ref, whole, output)
        assert failures.index(f" {name} ") < failures.index(ref), output
    # every repeat still names its code where the reports list codes
    assert len(re.findall(r"^E +\[json-schema\] ", failures, re.MULTILINE)) == 4, output
    # JUnit XML: each failing test carries its own whole evidence
    cases = ET.parse(xml).getroot().iter("testcase")
    bodies = {c.get("name"): (c.find("failure").text or "") for c in cases}  # type: ignore[union-attr]
    assert len(bodies) == 4, bodies
    for name, body in bodies.items():
        assert "finish_reason: length" in body and "request: POST" in body, (name, body)


def test_failures_that_differ_are_each_printed_whole_and_vv_prints_every_repeat(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_rep="""
        import pytest
        from pytest_ddtree import InvariantError, Violation

        def fail(budget, excerpt, temperature="0.0", port=1):
            request = (f"POST http://127.0.0.1:{port}/v1/chat/completions (stream, "
                       f"tree_budget={budget}, max_tokens=96, temperature={temperature}, "
                       "prompt=p1)")
            raise InvariantError([Violation("early-stop", "stopped early",
                                            {"excerpt": excerpt}, request)])

        def test_a():
            fail(16, "one")

        def test_b():  # the same request from another server, temperature written as 0
            fail(16, "one", temperature="0", port=2)

        def test_c():  # another budget
            fail(32, "one")

        def test_d():  # other evidence
            fail(16, "two")

        def test_e():  # no request line: which prompt is unknown, never folded
            raise InvariantError([Violation("early-stop", "stopped early", {"excerpt": "one"})])

        def test_f():
            raise InvariantError([Violation("early-stop", "stopped early", {"excerpt": "one"})])
        """
    )
    # wide enough for the short summary's lines whole
    monkeypatch.setenv("COLUMNS", "200")
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:xdist")
    result.assert_outcomes(failed=6)
    failures = _failures(result.stdout.str())
    assert failures.count("excerpt: one") == 4, failures  # a, c, e, f
    assert failures.count("excerpt: two") == 1, failures
    refs = re.findall(r"^E   the same failure .* as (\S+) above", failures, re.MULTILINE)
    assert refs == ["test_rep.py::test_a"], failures
    summary = result.stdout.str().split("short test summary info", 1)[1]
    assert (
        "FAILED test_rep.py::test_b - [early-stop] the same failure as test_rep.py::test_a"
        in summary
    )

    whole = pytester.runpytest("-p", "no:randomly", "-p", "no:xdist", "-vv")
    assert "the same failure" not in whole.stdout.str()
    assert _failures(whole.stdout.str()).count("excerpt: one") == 5
