"""Load testing: latency percentiles under concurrency or request rate, every request validated.

Pure (no pytest): arrival schedules (``arrivals``), the async httpx runner
(``runner``), per-point statistics (``metrics``), SLOs and goodput (``slo``),
the budget × load recommendation (``recommend``), the records a call leaves
and their merge (``record``) and ``LoadTester``, the object
behind the ``ddtree_load`` fixture (``tester``). Names are imported on first
use, so parsing an option does not load the HTTP stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_ddtree.load.arrivals import (
        LoadPoint,
        arrival_offsets,
        parse_concurrencies,
        parse_rates,
    )
    from pytest_ddtree.load.metrics import (
        ClientHealth,
        LoadSample,
        PointStats,
        percentiles,
        summarize_point,
    )
    from pytest_ddtree.load.recommend import Choice, Schedule, recommend
    from pytest_ddtree.load.record import LoadRecord, LoadTestResult, merge_records
    from pytest_ddtree.load.runner import Endpoint
    from pytest_ddtree.load.slo import SLO, parse_slo
    from pytest_ddtree.load.tester import (
        LoadError,
        LoadResult,
        LoadTester,
        analyse,
        render_table,
    )

_EXPORTS = {
    "LoadPoint": "arrivals",
    "arrival_offsets": "arrivals",
    "parse_concurrencies": "arrivals",
    "parse_rates": "arrivals",
    "ClientHealth": "metrics",
    "LoadSample": "metrics",
    "PointStats": "metrics",
    "percentiles": "metrics",
    "summarize_point": "metrics",
    "Choice": "recommend",
    "Schedule": "recommend",
    "recommend": "recommend",
    "LoadRecord": "record",
    "LoadTestResult": "record",
    "merge_records": "record",
    "Endpoint": "runner",
    "SLO": "slo",
    "parse_slo": "slo",
    "LoadError": "tester",
    "LoadResult": "tester",
    "LoadTester": "tester",
    "analyse": "tester",
    "render_table": "tester",
}

__all__ = [
    "SLO",
    "Choice",
    "ClientHealth",
    "Endpoint",
    "LoadError",
    "LoadPoint",
    "LoadRecord",
    "LoadResult",
    "LoadSample",
    "LoadTestResult",
    "LoadTester",
    "PointStats",
    "Schedule",
    "analyse",
    "arrival_offsets",
    "merge_records",
    "parse_concurrencies",
    "parse_rates",
    "parse_slo",
    "percentiles",
    "recommend",
    "render_table",
    "summarize_point",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_ddtree.load' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"pytest_ddtree.load.{module}"), name)
    globals()[name] = value
    return value
