"""pytest-ddtree: validate and benchmark speculative-decoding LLM endpoints.

Every response is checked against output-quality invariants before any
timing is recorded, so a run that measured garbage fails instead of
producing a misleading number.

Public API: ``check`` and ``assert_valid`` (the invariants), ``Expectation``,
``Completion``, ``Violation``, ``InvariantError``, ``DDTreeClient``, the
fixture objects ``DDTreeCheck``, ``DDTreeBenchmark``, ``DDTreeSweep``,
``DDTreeLossless``, ``DDTreeDeterminism``, ``DDTreeDistribution``,
``DDTreeColdWarmBatched`` and ``LoadTester``
(for annotations), and what a load run hands back or raises: ``LoadResult``,
``ArmStats``, ``LoadPoint``, ``SLO`` and ``LoadError``; what a test of the bundled suite
annotates or reads: ``Settings``, ``Prompt``, ``PromptSet``, ``PromptFileError``,
``load_prompts``, ``check_determinism``, ``check_counts`` and ``counts_not_comparable``. They
are imported on first use, so ``python -m pytest_ddtree.reference`` starts
without loading the plugin's dependencies.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if "pytest" in sys.modules:  # under pytest: rich assertion messages in the helpers
    sys.modules["pytest"].register_assert_rewrite("pytest_ddtree.checks.invariants")

if TYPE_CHECKING:
    from pytest_ddtree.checks.counts import check_counts, counts_not_comparable
    from pytest_ddtree.checks.invariants import (
        CODES,
        Expectation,
        assert_valid,
        check,
        check_determinism,
    )
    from pytest_ddtree.core.prompts import Prompt, PromptFileError, PromptSet, load_prompts
    from pytest_ddtree.core.settings import Settings
    from pytest_ddtree.core.violation import InvariantError, Violation
    from pytest_ddtree.measure.breakeven import BreakEvenMap
    from pytest_ddtree.measure.load import (
        SLO,
        ArmStats,
        LoadError,
        LoadPoint,
        LoadResult,
        LoadTester,
    )
    from pytest_ddtree.pytest_plugin.fixtures import (
        DDTreeBenchmark,
        DDTreeBreakEven,
        DDTreeCheck,
        DDTreeColdWarmBatched,
        DDTreeDeterminism,
        DDTreeDistribution,
        DDTreeLossless,
        DDTreeSweep,
    )
    from pytest_ddtree.wire.client import DDTreeClient
    from pytest_ddtree.wire.completion import Completion, RequestSpec, SpecStats, Timings, Usage

from pytest_ddtree.core import __version__

_EXPORTS = {
    "DDTreeClient": "pytest_ddtree.wire.client",
    "Completion": "pytest_ddtree.wire.completion",
    "RequestSpec": "pytest_ddtree.wire.completion",
    "SpecStats": "pytest_ddtree.wire.completion",
    "Timings": "pytest_ddtree.wire.completion",
    "Usage": "pytest_ddtree.wire.completion",
    "DDTreeBenchmark": "pytest_ddtree.pytest_plugin.fixtures",
    "DDTreeBreakEven": "pytest_ddtree.pytest_plugin.fixtures",
    "BreakEvenMap": "pytest_ddtree.measure.breakeven",
    "DDTreeCheck": "pytest_ddtree.pytest_plugin.fixtures",
    "DDTreeColdWarmBatched": "pytest_ddtree.pytest_plugin.fixtures",
    "DDTreeDeterminism": "pytest_ddtree.pytest_plugin.fixtures",
    "DDTreeDistribution": "pytest_ddtree.pytest_plugin.fixtures",
    "DDTreeLossless": "pytest_ddtree.pytest_plugin.fixtures",
    "DDTreeSweep": "pytest_ddtree.pytest_plugin.fixtures",
    "LoadTester": "pytest_ddtree.measure.load.tester",
    "LoadResult": "pytest_ddtree.measure.load.tester",
    "LoadError": "pytest_ddtree.measure.load.tester",
    "ArmStats": "pytest_ddtree.measure.arm",
    "LoadPoint": "pytest_ddtree.measure.load.arrivals",
    "SLO": "pytest_ddtree.core.slo",
    "CODES": "pytest_ddtree.checks.invariants",
    "Expectation": "pytest_ddtree.checks.invariants",
    "assert_valid": "pytest_ddtree.checks.invariants",
    "check": "pytest_ddtree.checks.invariants",
    "check_determinism": "pytest_ddtree.checks.invariants",
    "check_counts": "pytest_ddtree.checks.counts",
    "counts_not_comparable": "pytest_ddtree.checks.counts",
    "Prompt": "pytest_ddtree.core.prompts",
    "PromptFileError": "pytest_ddtree.core.prompts",
    "PromptSet": "pytest_ddtree.core.prompts",
    "load_prompts": "pytest_ddtree.core.prompts",
    "Settings": "pytest_ddtree.core.settings",
    "InvariantError": "pytest_ddtree.core.violation",
    "Violation": "pytest_ddtree.core.violation",
    "settings_of": "pytest_ddtree.pytest_plugin.session",
}

__all__ = [
    "CODES",
    "SLO",
    "ArmStats",
    "BreakEvenMap",
    "Completion",
    "DDTreeBenchmark",
    "DDTreeBreakEven",
    "DDTreeCheck",
    "DDTreeClient",
    "DDTreeColdWarmBatched",
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
    "Prompt",
    "PromptFileError",
    "PromptSet",
    "RequestSpec",
    "Settings",
    "SpecStats",
    "Timings",
    "Usage",
    "Violation",
    "__version__",
    "assert_valid",
    "check",
    "check_counts",
    "check_determinism",
    "counts_not_comparable",
    "load_prompts",
    "settings_of",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_ddtree' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
