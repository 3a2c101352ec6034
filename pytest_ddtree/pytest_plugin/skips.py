"""The plugin's skips, typed: each says why in words (its reason, for ``-rs``) and, apart, as
data (its kind, and the details a summary line needs), so the closing summary counts and
groups them without reading a reason back.

The kind travels with the test's report (an attribute of its own, which pytest-xdist carries
from the workers as it does every attribute of a report, and JUnit XML leaves out), so a
summary on the controller sees the skips of every worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

import pytest

__all__ = ["KEY", "Skip", "kind_of", "mark", "skip"]

#: the report's attribute that holds a plugin skip's kind and details
KEY = "ddtree_skip"

#: the kinds of skip the summary groups, by their summary words
LEFT_RACE = "budgets that left the race (slower than the margin)"
RACE_DECIDED = "the race was decided before them"
RACE_SPENT = "the race's request budget was spent before them"
ENDPOINT_DOWN = "the endpoint is down"
ENDPOINT_STALLED = "the endpoint stalled"
UNREACHABLE = "this host cannot reach the endpoint"
#: a feature the deployment refused (details: the feature, where, the server's message)
FEATURE = "feature"


class Skip(pytest.skip.Exception):  # type: ignore[name-defined,misc]
    """A plugin skip: pytest's, with its ``kind`` and ``details`` kept apart from the
    reason."""

    def __init__(self, reason: str, kind: str, details: Sequence[str] = ()) -> None:
        super().__init__(msg=reason)
        self.kind = kind
        self.details = tuple(details)


def skip(reason: str, kind: str, details: Sequence[str] = ()) -> NoReturn:
    """Skip the running test with ``reason``, counted under ``kind`` in the summary."""
    raise Skip(reason, kind, details)


def mark(report: pytest.TestReport, excinfo: Any) -> None:
    """Keep a plugin skip's kind and details on its report."""
    if excinfo is not None and isinstance(excinfo.value, Skip):
        setattr(report, KEY, [excinfo.value.kind, *excinfo.value.details])


def kind_of(report: Any) -> tuple[str, ...] | None:
    """A skipped report's kind and details (None: not one of the plugin's skips)."""
    value = getattr(report, KEY, None)
    return None if not value else tuple(str(v) for v in value)
