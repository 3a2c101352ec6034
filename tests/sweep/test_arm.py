"""One statistics type per arm: a sweep budget and a load point are the same ``ArmStats``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.measure.arm import ArmStats, budget_json
from pytest_ddtree.measure.load.tester import analyse
from pytest_ddtree.measure.sample import SERIAL, Sample
from pytest_ddtree.measure.sweep import summarize

from ._factory import synthetic_sweep

#: the figures both paths read, under one name each
SHARED = (
    *("tree_budget", "point", "requests", "valid", "invalid", "codes", "decode_median"),
    *("decode_q1", "decode_q3", "ttft", "tpot", "e2e", "mean_acceptance_length"),
    *("mean_acceptance_rate", "mean_decode_rounds", "spec"),
)


def _serial_samples() -> list[Sample]:
    """A sweep's samples of two budgets, each request sent after the last (one invalid)."""
    samples = synthetic_sweep({16: 900.0, 64: 1000.0})
    samples = [
        replace(s, start=float(i), end_to_end=0.5, gaps=(0.01, 0.02)) for i, s in enumerate(samples)
    ]
    bad = replace(samples[0], valid=False, codes=("early-stop",), round=9, start=99.0)
    return [*samples, bad]


def test_a_sweep_budget_and_a_serial_load_point_of_the_same_samples_are_one_arm() -> None:
    samples = _serial_samples()
    swept = {st.tree_budget: st for st in summarize(samples).budgets}
    loaded, _ = analyse([replace(s, point=SERIAL) for s in samples])
    assert {st.tree_budget for st in loaded} == set(swept) == {16, 64}
    for point in loaded:
        budget = swept[point.tree_budget]
        assert type(point) is type(budget) is ArmStats
        for name in SHARED:
            assert getattr(point, name) == getattr(budget, name), name
    assert swept[16].codes == {"early-stop": 1} and swept[16].invalid == 1


def test_each_path_writes_the_figures_it_reads_and_computes_no_other() -> None:
    samples = [replace(s, point=SERIAL) for s in _serial_samples() if s.tree_budget == 64]
    arm = ArmStats.of(samples)
    point = jsonmodel.to_json(arm)
    # a load point's form computes no bootstrap interval, which only the sweep writes
    assert not {"decode_ci", "ttft_ci", "acceptance_ci"} & vars(arm).keys()
    budget = budget_json(arm)
    assert {"decode_ci", "ttft_ci", "acceptance_ci"} <= vars(arm).keys()
    # one figure, one value, under each form's key
    assert point["requests"] == budget["total"] == len(samples)
    assert point["ttft"]["p50_ms"] == pytest.approx(budget["ttft"]["p50"] * 1000)
    assert point["mean_acceptance_length"] == budget["mean_acceptance_length"]


def test_an_arm_is_one_budget_at_one_load_point() -> None:
    samples = _serial_samples()
    with pytest.raises(ValueError, match="mixed points"):
        ArmStats.of(samples)  # two budgets
    with pytest.raises(ValueError, match="no samples"):
        ArmStats.of([])
