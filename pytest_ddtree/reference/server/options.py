"""The reference server's options (``ServerOptions``), checked, and the command line that
reproduces them (``options_to_argv``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from pytest_ddtree.core import dialects
from pytest_ddtree.core.dialects.ddtree import DDTree

from ..cost import DRAFT_CONTEXT, DRAFT_HALFLIFE, CostModel, check_jitter, draft_keep
from ..faults import parse_faults
from ..model import MODEL_ID
from ..request import (
    MAX_MODEL_LEN,
    MAX_TREE_BUDGET,
)

#: the dialects this server can emit (its ``--stats-dialect`` choices), from the registry
STATS_DIALECTS = dialects.reference_names()


@dataclass(frozen=True)
class ServerOptions:
    """Every option of the reference server; the command line maps onto these fields.

    ``host``/``port``: where to listen (port 0 picks a free one). ``target_only``: plain
    target decoding, the baseline (no drafter; speculation faults are ignored).
    ``faults``: names from :data:`FAULTS` applied to every request. ``simulated_latency``:
    wait the cost model's time per round (off for fast tests). ``default_tree_budget``:
    budget of requests without ``tree_budget``. ``block_size``: drafter block (tree depth is
    ``block_size - 1``). ``cost``: the simulated accelerator. ``seed``: seeds sampling of
    requests with ``temperature > 0`` and no ``seed``. ``stats_dialect``: where statistics
    are reported (``ddtree``, ``vllm``, ``omlx`` or ``none``). ``hang_seconds``: how long the
    ``hang`` fault stalls. ``model_id``: the model id served. ``slowdown_after``: after
    this many generation requests, every simulated cost is multiplied by
    ``slowdown_factor`` (a server that degrades mid-run: throttling, another tenant).
    ``jitter``: the coefficient of variation of a seeded, multiplicative noise on each
    generation request's simulated costs (0: none; see :func:`~.cost.jitter_factor`).
    ``draft_context``, ``draft_halflife``: past ``draft_context`` prompt tokens the drafter
    loses track of the context, its per-token acceptance halving every ``draft_halflife``
    tokens (0: never; see :func:`~.cost.draft_keep`). ``max_model_len``: the context; a
    request whose prompt tokens and ``max_tokens`` exceed it is refused with HTTP 400, as
    vLLM refuses it. ``state_context``: ``GET /models`` states ``max_model_len`` (False: it
    states no context length, as some servers do not).
    """

    host: str = "127.0.0.1"
    port: int = 0
    target_only: bool = False
    faults: tuple[str, ...] = ()
    simulated_latency: bool = True
    default_tree_budget: int = 64
    block_size: int = 16
    cost: CostModel = field(default_factory=CostModel)
    seed: int = 0
    stats_dialect: str = DDTree.name
    hang_seconds: float = 600.0
    model_id: str = MODEL_ID
    slowdown_after: int | None = None
    slowdown_factor: float = 3.0
    jitter: float = 0.0
    draft_context: int = DRAFT_CONTEXT
    draft_halflife: int = DRAFT_HALFLIFE
    max_model_len: int = MAX_MODEL_LEN
    state_context: bool = True

    def draft_keep(self, prompt_tokens: int) -> float:
        """The drafter's per-token keep after a prompt of ``prompt_tokens`` tokens."""
        return draft_keep(prompt_tokens, self.draft_context, self.draft_halflife)

    def __post_init__(self) -> None:
        _check_slowdown_after(self.slowdown_after, self.slowdown_factor)
        for name in ("draft_context", "draft_halflife"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name}: must be an integer >= 0, got {value!r}")
        n = self.max_model_len
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_MODEL_LEN:
            raise ValueError(f"max_model_len: must be an integer in 1..{MAX_MODEL_LEN}, got {n!r}")
        object.__setattr__(self, "jitter", check_jitter(self.jitter))
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"port: must be an integer in 0..65535, got {self.port!r}")
        b = self.default_tree_budget
        if not isinstance(b, int) or isinstance(b, bool) or not 1 <= b <= MAX_TREE_BUDGET:
            raise ValueError(f"default_tree_budget: must be in 1..{MAX_TREE_BUDGET}, got {b!r}")
        bs = self.block_size
        if not isinstance(bs, int) or isinstance(bs, bool) or not 2 <= bs <= 64:
            raise ValueError(f"block_size: must be an integer in 2..64, got {bs!r}")
        if self.stats_dialect not in STATS_DIALECTS:
            raise ValueError(
                f"stats_dialect: must be one of {', '.join(STATS_DIALECTS)}, "
                f"got {self.stats_dialect!r}"
            )
        hs = self.hang_seconds
        if not isinstance(hs, (int, float)) or not math.isfinite(hs) or hs < 0:
            raise ValueError(f"hang_seconds: must be a number >= 0, got {self.hang_seconds!r}")
        if not isinstance(self.cost, CostModel):
            raise ValueError(f"cost: must be a CostModel, got {type(self.cost).__name__}")
        raw: Any = self.faults
        faults = (raw,) if isinstance(raw, str) else tuple(raw)
        parse_faults(faults, "faults")
        object.__setattr__(self, "faults", faults)


def _check_slowdown_after(after: object, factor: object) -> None:
    if after is not None and (not isinstance(after, int) or isinstance(after, bool) or after < 0):
        raise ValueError(f"slowdown_after: must be an integer >= 0, got {after!r}")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise ValueError(f"slowdown_factor: must be a number > 0, got {factor!r}")
    if not math.isfinite(factor) or factor <= 0:
        raise ValueError(f"slowdown_factor: must be a number > 0, got {factor!r}")


def _options(kwargs: dict[str, Any]) -> ServerOptions:
    names = {f.name for f in fields(ServerOptions)}
    unknown = sorted(set(kwargs) - names)
    if unknown:
        raise TypeError(f"unknown reference server option(s): {', '.join(unknown)}")
    return ServerOptions(**kwargs)


def options_to_argv(options: ServerOptions) -> list[str]:
    """Command-line arguments reproducing ``options`` (from the flag table, ``..flags``)."""
    from ..flags import options_to_argv as from_flag_table  # ..flags reads this module

    return from_flag_table(options)
