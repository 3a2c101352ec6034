"""``ddtree``: the DDTree server's ``ddtree_stats`` block (the reference server's default)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_ddtree.core.dialects.base import Dialect, TokenizeShape, depth, integer, num
from pytest_ddtree.core.dialects.stats import SpecStats


class DDTree(Dialect):
    name = "ddtree"
    summary = "a top-level `ddtree_stats` object (the DDTree server, the reference server)"
    where = "ddtree_stats"
    budget_field = "tree_budget"
    reference_emits = True
    # the embedded reference server: prompt -> count + tokens
    tokenize = TokenizeShape("reference", "/tokenize", "prompt", (("add_special_tokens", False),))

    def carrier(self, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        stats = obj.get("ddtree_stats")
        return stats if isinstance(stats, Mapping) else None

    def normalise(self, raw: Mapping[str, Any]) -> SpecStats:
        return SpecStats(
            dialect=self.name,
            tree_budget=integer(raw.get("tree_budget")),
            decode_rounds=integer(raw.get("cycles")),
            mean_acceptance_length=num(raw.get("avg_acceptance")),
            server_tokens_per_second=num(raw.get("tok_per_sec")),
            block_size=integer(raw.get("block_size")),
            raw=dict(raw),
            **depth(raw, "acceptance_histogram", self.where),
        )
