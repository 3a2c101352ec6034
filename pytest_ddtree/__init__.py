"""pytest-ddtree: validate and benchmark speculative-decoding LLM endpoints.

Every response is checked against output-quality invariants before any
timing is recorded, so a run that measured garbage fails instead of
producing a misleading number.

Public API: ``check`` and ``assert_valid`` (the invariants), ``Expectation``,
``Completion``, ``Violation``, ``InvariantError``, ``DDTreeClient``, the
fixture objects ``DDTreeCheck``, ``DDTreeBenchmark``, ``DDTreeSweep``,
``DDTreeLossless``, ``DDTreeDeterminism``, ``DDTreeDistribution`` and ``LoadTester``
(for annotations), and what a load run hands back or raises: ``LoadResult``,
``PointStats``, ``LoadPoint``, ``SLO`` and ``LoadError``. They
are imported on first use, so ``python -m pytest_ddtree.reference`` starts
without loading the plugin's dependencies.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if "pytest" in sys.modules:  # under pytest: rich assertion messages in the helpers
    sys.modules["pytest"].register_assert_rewrite("pytest_ddtree.invariants")

if TYPE_CHECKING:
    from pytest_ddtree.fixtures import (
        DDTreeBenchmark,
        DDTreeCheck,
        DDTreeDeterminism,
        DDTreeDistribution,
        DDTreeLossless,
        DDTreeSweep,
    )
    from pytest_ddtree.invariants import CODES, Expectation, assert_valid, check
    from pytest_ddtree.load import SLO, LoadError, LoadPoint, LoadResult, LoadTester, PointStats
    from pytest_ddtree.violation import InvariantError, Violation
    from pytest_ddtree.wire.client import DDTreeClient
    from pytest_ddtree.wire.completion import Completion, RequestSpec, SpecStats, Timings, Usage

__version__ = "0.1.0"

_EXPORTS = {
    "DDTreeClient": "pytest_ddtree.wire.client",
    "Completion": "pytest_ddtree.wire.completion",
    "RequestSpec": "pytest_ddtree.wire.completion",
    "SpecStats": "pytest_ddtree.wire.completion",
    "Timings": "pytest_ddtree.wire.completion",
    "Usage": "pytest_ddtree.wire.completion",
    "DDTreeBenchmark": "pytest_ddtree.fixtures",
    "DDTreeCheck": "pytest_ddtree.fixtures",
    "DDTreeDeterminism": "pytest_ddtree.fixtures",
    "DDTreeDistribution": "pytest_ddtree.fixtures",
    "DDTreeLossless": "pytest_ddtree.fixtures",
    "DDTreeSweep": "pytest_ddtree.fixtures",
    "LoadTester": "pytest_ddtree.load.tester",
    "LoadResult": "pytest_ddtree.load.tester",
    "LoadError": "pytest_ddtree.load.tester",
    "PointStats": "pytest_ddtree.load.metrics",
    "LoadPoint": "pytest_ddtree.load.arrivals",
    "SLO": "pytest_ddtree.load.slo",
    "CODES": "pytest_ddtree.invariants",
    "Expectation": "pytest_ddtree.invariants",
    "assert_valid": "pytest_ddtree.invariants",
    "check": "pytest_ddtree.invariants",
    "InvariantError": "pytest_ddtree.violation",
    "Violation": "pytest_ddtree.violation",
    "settings_of": "pytest_ddtree.session",
}

__all__ = [
    "CODES",
    "SLO",
    "Completion",
    "DDTreeBenchmark",
    "DDTreeCheck",
    "DDTreeClient",
    "DDTreeDeterminism",
    "DDTreeDistribution",
    "DDTreeLossless",
    "DDTreeSweep",
    "Expectation",
    "InvariantError",
    "LoadError",
    "LoadPoint",
    "LoadResult",
    "LoadTester",
    "PointStats",
    "RequestSpec",
    "SpecStats",
    "Timings",
    "Usage",
    "Violation",
    "__version__",
    "assert_valid",
    "check",
    "settings_of",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_ddtree' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
