"""pytest-ddtree: validate and benchmark speculative-decoding LLM endpoints.

Every response is checked against output-quality invariants before any
timing is recorded, so a run that measured garbage fails instead of
producing a misleading number.

Public API: ``check`` and ``assert_valid`` (the invariants), ``Expectation``,
``Completion``, ``Violation``, ``InvariantError`` and ``DDTreeClient``.
"""

from __future__ import annotations

try:  # the assertion helpers get pytest's rich assertion messages when pytest is there
    import pytest

    pytest.register_assert_rewrite("pytest_ddtree.invariants")
except ImportError:  # pragma: no cover - pytest is a dependency, but the logic works without
    pass

from pytest_ddtree.client import DDTreeClient
from pytest_ddtree.completion import Completion, RequestSpec, SpecStats, Timings, Usage
from pytest_ddtree.invariants import CODES, Expectation, assert_valid, check
from pytest_ddtree.violation import InvariantError, Violation

__version__ = "0.1.0"

__all__ = [
    "CODES",
    "Completion",
    "DDTreeClient",
    "Expectation",
    "InvariantError",
    "RequestSpec",
    "SpecStats",
    "Timings",
    "Usage",
    "Violation",
    "__version__",
    "assert_valid",
    "check",
]
