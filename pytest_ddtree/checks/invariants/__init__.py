"""Output-quality invariants: pure checks over a ``Completion``.

Each check returns ``Violation`` values with a stable code (see ``CODES``), a
one-line message and the evidence. Nothing here imports pytest; the plugin
calls ``check``/``assert_valid`` and turns violations into test failures.

>>> from pytest_ddtree.checks.invariants import check
>>> violations = check(completion, min_tokens=64)          # doctest: +SKIP
"""

from __future__ import annotations

from pytest_ddtree.checks.invariants._across import (
    BudgetSample,
    check_budget_ignored,
    check_determinism,
)
from pytest_ddtree.checks.invariants._core import Findings, assert_valid, check
from pytest_ddtree.checks.invariants._schema import SCHEMA_NAMES, load_schema, schema_errors
from pytest_ddtree.checks.invariants._stats import unstated
from pytest_ddtree.core.codes import CODE_LAYERS, CODES, LAYERS
from pytest_ddtree.core.expectation import (
    DEFAULT_MIN_TOKENS,
    DEFAULT_REASONING_MARKERS,
    DEFAULT_ROLE_MARKERS,
    DEFAULT_SPECIAL_TOKENS,
    Expectation,
)
from pytest_ddtree.core.violation import Withheld

__all__ = [
    "CODES",
    "CODE_LAYERS",
    "DEFAULT_MIN_TOKENS",
    "DEFAULT_REASONING_MARKERS",
    "DEFAULT_ROLE_MARKERS",
    "DEFAULT_SPECIAL_TOKENS",
    "LAYERS",
    "SCHEMA_NAMES",
    "BudgetSample",
    "Expectation",
    "Findings",
    "Withheld",
    "assert_valid",
    "check",
    "check_budget_ignored",
    "check_determinism",
    "load_schema",
    "schema_errors",
    "unstated",
]
