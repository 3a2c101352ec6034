"""Load testing: latency percentiles under concurrency or request rate, every request validated.

Pure (no pytest): arrival schedules (``arrivals``), the async httpx runner
(``runner``), per-point statistics and goodput (``metrics``; the ``SLO`` itself is
``pytest_ddtree.core.slo``, as the settings hold one),
the budget × load recommendation (``recommend``), the records a call leaves
and their merge (``record``) and ``LoadTester``, the object
behind the ``ddtree_load`` fixture (``tester``). Names are imported on first
use, so parsing an option does not load the HTTP stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_ddtree.core.settings import parse_concurrencies, parse_rates
    from pytest_ddtree.core.slo import SLO, parse_slo
    from pytest_ddtree.measure.arm import ArmStats, percentiles
    from pytest_ddtree.measure.load.arrivals import LoadPoint, arrival_offsets
    from pytest_ddtree.measure.load.metrics import ClientHealth, summarize_point
    from pytest_ddtree.measure.load.recommend import Choice, Schedule, recommend
    from pytest_ddtree.measure.load.record import LoadRecord, LoadTestResult, merge_records
    from pytest_ddtree.measure.load.tester import (
        LoadError,
        LoadResult,
        LoadTester,
        analyse,
    )
    from pytest_ddtree.measure.sample import Sample

_EXPORTS = {
    "LoadPoint": "arrivals",
    "arrival_offsets": "arrivals",
    "parse_concurrencies": "pytest_ddtree.core.settings",
    "parse_rates": "pytest_ddtree.core.settings",
    "ClientHealth": "metrics",
    "Sample": "pytest_ddtree.measure.sample",
    "ArmStats": "pytest_ddtree.measure.arm",
    "percentiles": "pytest_ddtree.measure.arm",
    "summarize_point": "metrics",
    "Choice": "recommend",
    "Schedule": "recommend",
    "recommend": "recommend",
    "LoadRecord": "record",
    "LoadTestResult": "record",
    "merge_records": "record",
    "SLO": "pytest_ddtree.core.slo",
    "parse_slo": "pytest_ddtree.core.slo",
    "LoadError": "tester",
    "LoadResult": "tester",
    "LoadTester": "tester",
    "analyse": "tester",
}

__all__ = [
    "SLO",
    "ArmStats",
    "Choice",
    "ClientHealth",
    "LoadError",
    "LoadPoint",
    "LoadRecord",
    "LoadResult",
    "LoadTestResult",
    "LoadTester",
    "Sample",
    "Schedule",
    "analyse",
    "arrival_offsets",
    "merge_records",
    "parse_concurrencies",
    "parse_rates",
    "parse_slo",
    "percentiles",
    "recommend",
    "summarize_point",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_ddtree.measure.load' has no attribute {name!r}")
    if "." not in module:
        module = f"pytest_ddtree.measure.load.{module}"
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
