"""``omlx``: oMLX's ``dflash_ddtree_*`` fields in ``usage``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_ddtree.core.dialects.base import Dialect, integer, num
from pytest_ddtree.core.dialects.stats import SpecStats

#: the prefix of every oMLX statistics field in ``usage``
PREFIX = "dflash_ddtree_"


class OMLX(Dialect):
    name = "omlx"
    summary = f"`{PREFIX}*` fields in `usage` (oMLX)"
    where = "usage"
    reference_emits = True

    def carrier(self, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        usage = obj.get("usage")
        if isinstance(usage, Mapping) and any(str(k).startswith(PREFIX) for k in usage):
            return usage
        return None

    def normalise(self, raw: Mapping[str, Any]) -> SpecStats:
        return SpecStats(
            dialect=self.name,
            tree_budget=integer(raw.get(PREFIX + "tree_budget")),
            decode_rounds=integer(raw.get(PREFIX + "cycles_completed")),
            mean_acceptance_length=num(raw.get(PREFIX + "avg_acceptance")),
            server_tokens_per_second=num(raw.get(PREFIX + "tokens_per_second")),
            raw={k: v for k, v in raw.items() if str(k).startswith(PREFIX)},
        )
