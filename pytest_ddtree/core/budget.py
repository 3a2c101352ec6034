"""``Budget``: one tree budget, and every way it is named and ordered.

A budget is a positive integer, or ``None`` for the server's own (no budget sent). The
label (``64``, ``server-default``), the test id (``tree_budget=64``), the pytest-benchmark
group (``tree_budget=64``, with a temperature ``tree_budget=64 temperature=0.7``) and the
order of every table (the server's own first, then by number) are defined here once.
Records keep the plain ``int | None`` (that is their JSON); ``Budget(b)`` names and orders it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

__all__ = ["SERVER_DEFAULT", "Budget", "budget_order", "group_order"]

#: the label of the server's own budget
SERVER_DEFAULT = "server-default"

#: ``tree_budget=64`` (or ``tree_budget=server-default``) in a test id or a group name
_IN_NAME = re.compile(r"tree_budget=(\d+|server-default)")


@functools.total_ordering
@dataclass(frozen=True)
class Budget:
    """One tree budget: ``value`` requested, or None for the server's own."""

    value: int | None

    @property
    def label(self) -> str:
        """How the budget is named in tables and messages: ``64`` or ``server-default``."""
        return SERVER_DEFAULT if self.value is None else str(self.value)

    @property
    def test_id(self) -> str:
        """The test id part (and benchmark group) of the budget: ``tree_budget=64``."""
        return f"tree_budget={self.label}"

    def group(self, temperature: float | None = None) -> str:
        """The pytest-benchmark group: ``tree_budget=64``, or with a temperature
        ``tree_budget=64 temperature=0.7`` (never compared across temperatures)."""
        return (
            self.test_id if temperature is None else f"{self.test_id} temperature={temperature:g}"
        )

    @property
    def sort_key(self) -> int:
        """The order of every table: the server's own budget first, then by number."""
        return -1 if self.value is None else self.value

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Budget):
            return NotImplemented
        return self.sort_key < other.sort_key

    @classmethod
    def in_name(cls, name: object) -> Budget | None:
        """The budget a test id or group name carries (``...[tree_budget=64]``), or None."""
        m = _IN_NAME.search(str(name or ""))
        if m is None:
            return None
        return cls(None if m.group(1) == SERVER_DEFAULT else int(m.group(1)))


def budget_order(value: int | None) -> int:
    """Sort key of a plain budget value (``sorted(budgets, key=budget_order)``)."""
    return Budget(value).sort_key


def group_order(name: object) -> int:
    """Sort key of a test id or group name by the budget it carries (none: first)."""
    found = Budget.in_name(name)
    return -1 if found is None else found.sort_key
