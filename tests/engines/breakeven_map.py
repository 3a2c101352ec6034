"""Running the break-even map against a real engine and its target-only twin.

A small map (two prompt depths the model's 2,048-token context allows, the least request
budget a cell can be judged on, short answers) run as a user runs it, in a pytest process of
its own (the map runs in one process, never under ``-n``). What speculation is worth there is
the engine's to say, and a tiny model on a shared CPU may gain nothing from it: ``run_map``
checks what the map must be whatever the answer is (each depth measured against the target
alone, with its speedup and interval; no budget named that is slower than speculation off; no
failure blamed on speculation), never which answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

MAP_TEST = """
from pytest_ddtree import DDTreeBreakEven


def test_map(ddtree_breakeven: DDTreeBreakEven) -> None:
    found = ddtree_breakeven(max_tokens={max_tokens})
    assert found.cells
"""


def run_map(
    pytester: pytest.Pytester,
    endpoint: str,
    baseline: str,
    model: str,
    depths: tuple[int, ...],
    max_tokens: int,
) -> list[dict[str, Any]]:
    """The map of ``depths`` (answers of ``max_tokens``) from a run of its own; its cells."""
    pytester.makepyfile(test_map=MAP_TEST.format(max_tokens=max_tokens))
    result = pytester.runpytest_subprocess(
        "-p",
        "no:xdist",
        "-p",
        "no:cacheprovider",
        "-q",
        "--ddtree-endpoint",
        endpoint,
        "--ddtree-baseline-endpoint",
        baseline,
        "--ddtree-model",
        model,
        "--ddtree-budget-mode",
        "none",
        "--ddtree-context",
        ",".join(map(str, depths)),
        # two rounds of the five prompts a depth, speculation on and off: the least a cell
        # is judged on
        "--ddtree-sweep-requests",
        "20",
        "--ddtree-timeout",
        "connect=10,read=120,total=300",
        "--ddtree-report",
        "rep",
        timeout=900,
    )
    out = result.stdout.str() + result.stderr.str()
    # the map as the run printed it (shown with -rP, and with a failure)
    start = out.find("speedup over the target alone, by prompt depth and load")
    print(out[start : out.find("\n", out.find("Break-even:", start)) + 1] if start >= 0 else out)
    assert result.ret == 0, out[-4000:]
    assert "Traceback" not in out and "diagnosis: speculative decoding" not in out, out[-4000:]
    assert "speedup over the target alone, by prompt depth and load" in out, out[-3000:]
    assert "crossover at C=1:" in out and "Break-even:" in out, out[-3000:]
    (found,) = json.loads((Path(pytester.path) / "rep" / "sweep.json").read_text())["breakeven"]
    assert found["baseline"] is True and found["message"] in out
    cells = found["cells"]
    assert sorted(c["depth"] for c in cells) == list(depths), cells
    for c in cells:
        # measured against the target alone: a speedup with its interval, at every depth
        speedup = c["speedup"]
        assert speedup is not None, c
        assert speedup["low"] <= speedup["estimate"] <= speedup["high"], c
        assert 20 <= c["requests"] <= 20 + 10, c  # the request budget, and one lap at most more
        # never a budget slower than speculation off
        if c["answered"] and c["answer_label"] != "off":
            assert speedup["high"] >= 1.0, c
        line = next(x for x in out.splitlines() if x.strip().startswith(f"{c['depth']} "))
        assert "x [" in line, line  # the map's row: the choice and its speedup
    return list(cells)
