"""``none``: statistics configured off (never what auto-detection finds).

Choosing ``--ddtree-dialect none`` says the endpoint reports no speculation statistics:
nothing is read and the stats checks do not run. Auto-detection that finds nothing
yields no dialect at all (``core.dialects.detect`` returns None), never this one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_ddtree.core.dialects.base import Dialect
from pytest_ddtree.core.dialects.stats import SpecStats


class Off(Dialect):
    name = "none"
    summary = "configured off: read no statistics (the stats checks do not run)"
    reports_statistics = False
    reference_emits = True

    def parse(
        self, objects: Sequence[Any], stats_map: Mapping[str, str] | None = None
    ) -> SpecStats | None:
        return None
