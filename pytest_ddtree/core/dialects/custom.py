"""``custom``: statistics wherever ``--ddtree-stats-map`` points (JSON pointers)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_ddtree.core.dialects.base import Dialect, integer, num
from pytest_ddtree.core.dialects.stats import SpecStats


def resolve_pointer(doc: Any, pointer: str) -> Any:
    """RFC 6901 JSON pointer lookup; None when the path does not exist."""
    if pointer == "":
        return doc
    node = doc
    for token in pointer.lstrip("/").split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping):
            if token not in node:
                return None
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node


class Custom(Dialect):
    name = "custom"
    summary = "mapped by hand with `--ddtree-stats-map FIELD=/json/pointer,...`"
    where = "the --ddtree-stats-map pointers"
    needs_stats_map = True

    def parse(
        self, objects: Sequence[Any], stats_map: Mapping[str, str] | None = None
    ) -> SpecStats | None:
        for obj in reversed(objects):
            found = {key: resolve_pointer(obj, ptr) for key, ptr in (stats_map or {}).items()}
            if any(v is not None for v in found.values()):
                return SpecStats(
                    dialect=self.name,
                    tree_budget=integer(found.get("tree_budget")),
                    decode_rounds=integer(found.get("decode_rounds")),
                    mean_acceptance_length=num(found.get("mean_acceptance_length")),
                    server_tokens_per_second=num(found.get("server_tokens_per_second")),
                    block_size=integer(found.get("block_size")),
                    num_draft_tokens=integer(found.get("num_draft_tokens")),
                    num_accepted_draft_tokens=integer(found.get("num_accepted_draft_tokens")),
                    raw={k: v for k, v in found.items() if v is not None},
                )
        return None
