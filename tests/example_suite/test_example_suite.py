"""The example suite fails, naming the violation code, against each kind of broken reference
server: the test of the suite that catches the fault fails, with that fault's code.

Each case runs ``pytest example_suite`` from the repository's root as a user would (in this
process: the suite's own ``pytest.ini`` applies all the same), selected with ``-k`` to the
test that must catch the fault, with the embedded server's simulated
latency off (only the budget-ignored case needs real timings, so it keeps latency on and
runs the sweep only). The whole suite passing against the healthy server is
``test_bundled_suite.py::test_pyargs_runs_the_whole_suite_from_an_empty_directory``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from pytest_ddtree.core.codes import LAYERS
from pytest_ddtree.reference.faults import FAULT_LAYERS
from tests.docs import load_transcripts

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "example_suite"

# the first test a whole run reaches: one streamed request for the first prompt
SMOKE = ("test_smoke and essay-rivers", "test_smoke.py::test_smoke[essay-rivers]")

# the bundled suite's prompt with a stop sequence (stop ["4."]); it sits before the last
# prompt, the one test_deterministic_and_stateless pairs with the first
STOP_SMOKE = ("test_smoke and list-stop", "test_smoke.py::test_smoke[list-stop]")

# fault injected into the embedded server -> the -k selection of the bundled-suite test that
# must catch it, that test's node id in the suite, and the violation code it must fail with
# (a representative subset: template, speculation, accounting, wire and state faults). Each
# test is the one a whole run of the suite with -x stops at, with the same options.
CAUGHT_BY: dict[str, tuple[str, str, str]] = {
    "early-eos": (*SMOKE, "early-stop"),
    "role-leak": (*SMOKE, "role-leak"),
    "think-leak": (*SMOKE, "reasoning-leak"),
    "finish-always-stop": (*SMOKE, "finish-lie"),
    "overrun": (*SMOKE, "overrun"),
    "stats-inflated": (*SMOKE, "stats-inflated"),
    "stream-no-done": (*SMOKE, "stream-integrity"),
    "empty-200": (*SMOKE, "empty"),
    "usage-mismatch": (*SMOKE, "usage-mismatch"),
    "stream-error-event": (*SMOKE, "stream-error"),
    "logprobs-zero": (
        "test_logprobs",
        "test_lossless.py::test_logprobs",
        "logprobs",
    ),
    # the drafter's values for accepted draft tokens, finite and at most 0: of the checks of
    # one answer only "at temperature 0 the chosen token is the best alternative" sees them
    "logprobs-draft": (
        "test_logprobs",
        "test_lossless.py::test_logprobs",
        "logprobs",
    ),
    # diverges above budget 64 only: the test compares each budget (256 here) with the baseline
    "lossy": (
        "test_lossless and essay-rivers",
        "test_lossless.py::test_lossless[essay-rivers]",
        "not-lossless",
    ),
    # passes every temperature-0 test (a whole run passes the 34 before it): only the
    # distribution test at 0.7 catches it
    "draft-confidence": (
        "test_lossless_in_distribution",
        "test_lossless.py::test_lossless_in_distribution[temperature=0.7]",
        "not-lossless-in-distribution",
    ),
    "state-leak": (
        "test_deterministic_and_stateless and 16",
        "test_lossless.py::test_deterministic_and_stateless[tree_budget=16]",
        "state-leak",
    ),
    # structured output and tool calls: the prompts that ask for them
    "schema-ignored": (
        "test_smoke and json-person",
        "test_smoke.py::test_smoke[json-person]",
        "json-schema",
    ),
    "tool-call-no-id": (
        "test_smoke and tool-weather",
        "test_smoke.py::test_smoke[tool-weather]",
        "tool-call",
    ),
    # above budget 64 only, like lossy
    "grammar-skip": (
        "test_invariants and json-person and 256",
        "test_invariants.py::test_invariants[json-person-tree_budget=256]",
        "json-schema",
    ),
    # streamed answers only: the smoke request streams
    "tool-args-dropped": (
        "test_smoke and tool-weather",
        "test_smoke.py::test_smoke[tool-weather]",
        "tool-call",
    ),
    # the one prompt with a stop sequence; both are speculation-only (see test_stop_faults_*)
    "stop-missed-in-block": (*STOP_SMOKE, "stop-sequence"),
    "usage-past-stop": (*STOP_SMOKE, "usage-mismatch"),
    # every prompt's first request is cold and garbled too, but passes each check alone (a
    # whole run passes the 35 tests before it): only the cold/warm comparison catches it
    "cold-garble": (
        "test_cold_warm_batched",
        "test_lossless.py::test_cold_warm_batched",
        "cold-warm-batched",
    ),
    # the load test's answers are garbled too, but it runs later and checks each one alone
    "batch-garble": (
        "test_cold_warm_batched",
        "test_lossless.py::test_cold_warm_batched",
        "cold-warm-batched",
    ),
}

# faults whose failure names no layer: the state check judges the repeat alone
NO_LAYER = frozenset({"state-leak"})


@pytest.fixture
def run_suite(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., pytest.RunResult]:
    """``pytest example_suite ARGS`` from the repository's root, on the embedded server."""
    # the run must use the embedded server whatever the developer's shell has configured
    for name in list(os.environ):
        if name.startswith(("DDTREE_", "OPENAI_", "PYTEST_ADDOPTS", "PYTEST_XDIST")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(ROOT)

    def run(*args: str) -> pytest.RunResult:
        return pytester.runpytest(str(SUITE.relative_to(ROOT)), "-p", "no:xdist", *args)

    return run


def _failed(output: str) -> dict[str, list[str]]:
    """Each failed test's node id -> the violation codes its failure report names."""
    # a report is a header (the test's name between rules of '_'), then its 'E' lines
    parts = re.split(r"^_+ (\S+) _+$", output, flags=re.MULTILINE)
    codes = {
        name: re.findall(r"^E +\[([a-z-]+)\] ", body, re.MULTILINE)
        for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }
    return {
        node: codes.get(node.rsplit("::", 1)[-1], [])
        for node in re.findall(r"^FAILED (\S+)", output, re.MULTILINE)
    }


#: faults caught by the cold/warm/batched test: its batched request must be decoded beside the
#: others, which the simulated latency paces (answering as fast as it can, the target-only
#: twin can finish the others before the batched answer on a busy machine, and its run then
#: says nothing about batching: an honest "undetermined", not the layer the fault imitates)
PACED = frozenset({"cold-garble", "batch-garble"})


@pytest.mark.parametrize("fault", sorted(CAUGHT_BY))
def test_fault_fails_with_its_code(fault: str, run_suite: Callable[..., pytest.RunResult]) -> None:
    select, node, code = CAUGHT_BY[fault]
    # two budgets, one on each side of the lossy fault's threshold (64), keep each run short
    result = run_suite(
        "-q",
        "-k",
        select,
        "--ddtree-budgets",
        "16,256",
        "--ddtree-reference-latency",
        "on" if fault in PACED else "off",
        "--ddtree-reference-fault",
        fault,
    )
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == 1, output[-3000:]
    # the selection ran that one test, and it failed
    assert re.search(r"^1 failed, \d+ deselected", result.stdout.str(), re.MULTILINE), output[
        -3000:
    ]
    failed = _failed(output)
    assert list(failed) == [f"{SUITE.name}/{node}"], output[-3000:]
    assert code in failed[f"{SUITE.name}/{node}"], output[-3000:]
    # and the diagnosis names the layer the fault imitates (the state check names none: a
    # context left behind by another request is judged by the repeat alone)
    if fault not in NO_LAYER:
        title = re.escape(LAYERS[FAULT_LAYERS[fault]])
        assert re.search(rf"diagnosis: {title}( \([^)]*\))? - ", output), output[-3000:]
    _assert_evidence_in_the_docs_is_current(fault, select, result.stdout.str())


def _docs_transcripts() -> ModuleType:
    return load_transcripts.transcripts()


def test_every_docs_scenario_left_to_the_matrix_is_run_by_it() -> None:
    # a scenario the docs' own tests leave to this matrix (checked_by) must be one it runs,
    # with the same selection: else its transcripts would be checked nowhere
    docs = _docs_transcripts()
    left = {
        name.removeprefix("fault-")
        for name, scenario in docs.SCENARIOS.items()
        if (scenario.checked_by or "").endswith("::test_fault_fails_with_its_code")
    }
    assert left, "no docs scenario is checked by the fault matrix"
    assert left <= set(CAUGHT_BY), sorted(left - set(CAUGHT_BY))
    assert {fault: docs.MATRIX[fault] for fault in left} == {
        fault: CAUGHT_BY[fault][0] for fault in left
    }


def _assert_evidence_in_the_docs_is_current(fault: str, select: str, output: str) -> None:
    """The evidence docs/invariants.md shows for this fault is what this run printed: the
    docs' scenario is this very command (as a reader types it), so no run of its own."""
    docs = _docs_transcripts()
    name = f"fault-{fault}"
    scenario = docs.SCENARIOS.get(name)
    if scenario is None:
        return
    shown = shlex.split(scenario.shown)
    assert shown[:3] == ["pytest", "--pyargs", "pytest_ddtree.suite"], scenario.shown
    assert shown[3:] == [
        "-q",
        "-k",
        select,
        *docs.FAULT_OPTIONS.split(),
        "--ddtree-reference-fault",
        fault,
    ], f"{name} is not the command this test runs: {scenario.shown}"
    assert scenario.checked_by and scenario.checked_by.endswith(
        "::test_fault_fails_with_its_code"
    ), name
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    lines = docs.mask(output, ROOT).splitlines()
    problems = docs.check([name], pages, outputs={name: {"run": lines, "server": []}})
    assert not problems, "\n".join(problems)


def test_ignored_budget_fails_the_sweep(
    run_suite: Callable[..., pytest.RunResult], tmp_path: Path
) -> None:
    # a statistical check over real (simulated) timings: latency stays on, one prompt suffices
    result = run_suite(
        "--ddtree-report",
        str(tmp_path / "report"),
        "-q",
        "-k",
        "test_sweep and essay",
        "--ddtree-budgets",
        "16,256,1024",
        "--ddtree-rounds",
        "2",
        "--ddtree-warmup-rounds",
        "0",
        "--ddtree-reference-fault",
        "budget-ignored",
    )
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == 1, output[-3000:]
    assert "[budget-ignored]" in output, output[-3000:]
    # and the run's answer recommends no budget: the sweep timed one configuration
    assert "No budget is recommended: the server does not use the tree budget" in output
    assert "Recommended tree_budget" not in output, output[-3000:]
    # nowhere is a budget called best: not in the table, sweep.json or the HTML card
    doc = json.loads((tmp_path / "report" / "sweep.json").read_text())
    assert doc["recommendation"]["budget_ignored"] is True
    assert doc["recommendation"]["tree_budget"] is None
    assert {b["verdict"] for b in doc["budgets"]} == {"budget ignored"}, doc["budgets"]
    html = (tmp_path / "report" / "sweep.html").read_text()
    assert "the server does not use the tree budget (budget-ignored)" in html
    assert "no valid timings" not in html
    # ddtree-compare reads the run as the run said it: no budget recommended
    from pytest_ddtree.report.compare import compare_runs
    from pytest_ddtree.report.jsonfile import read_sweep_json

    run = read_sweep_json(tmp_path / "report" / "sweep.json")
    both = compare_runs(run, run)
    assert (both.baseline_recommendation, both.candidate_recommendation) == (None, None)
