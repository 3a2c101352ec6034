"""Load testing: latency percentiles under concurrency or request rate, every request validated.

Pure (no pytest): arrival schedules (``arrivals``), the async httpx runner
(``runner``), per-point statistics (``metrics``), SLOs and goodput (``slo``),
the budget × load recommendation (``recommend``) and ``LoadTester``, the object
behind the ``ddtree_load`` fixture (``tester``).
"""

from __future__ import annotations

from pytest_ddtree.load.arrivals import LoadPoint, arrival_offsets, parse_concurrencies, parse_rates
from pytest_ddtree.load.metrics import (
    ClientHealth,
    LoadSample,
    PointStats,
    percentiles,
    summarize_point,
)
from pytest_ddtree.load.recommend import Choice, Schedule, recommend
from pytest_ddtree.load.runner import Endpoint
from pytest_ddtree.load.slo import SLO, parse_slo
from pytest_ddtree.load.tester import LoadError, LoadResult, LoadTester, analyse, render_table

__all__ = [
    "SLO",
    "Choice",
    "ClientHealth",
    "Endpoint",
    "LoadError",
    "LoadPoint",
    "LoadResult",
    "LoadSample",
    "LoadTester",
    "PointStats",
    "Schedule",
    "analyse",
    "arrival_offsets",
    "parse_concurrencies",
    "parse_rates",
    "parse_slo",
    "percentiles",
    "recommend",
    "render_table",
    "summarize_point",
]
