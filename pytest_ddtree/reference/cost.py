"""Simulated accelerator cost of the reference server, and the optimum it implies.

A DDTree round costs one drafter pass plus one target verification pass over the whole tree.
The verification cost grows with the number of tree nodes (linearly, plus an optional
quadratic term for attention within the tree), so a bigger budget buys a longer accepted
path at a higher price per round: decode throughput peaks at an intermediate budget.

Concurrent requests share one simulated accelerator (``Accelerator``), as a batch does on a
GPU: a verification pass covers the tree nodes of every request in flight, so its cost
grows with the total. A budget that wins alone loses under load, and the optimum at a
concurrency C stays computable (``optimal_budget(..., concurrency=C)``, ``optimal_schedule``).

A long prompt weighs on speculation twice, as on real deployments: every verified position
(each tree node and the target's own token) attends to the prompt, so a big tree pays that
attention many times over (``CostModel.context_seconds``), and the drafter, trained on short
contexts, loses track of a long one (``draft_keep``). Both start past a knee, so a prompt of
a few dozen tokens costs exactly what it did, and past some depth the target alone is faster.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pytest_ddtree.core.settings import Settings

__all__ = [
    "DEFAULT_PROMPTS",
    "DRAFT_CONTEXT",
    "DRAFT_HALFLIFE",
    "Accelerator",
    "CostModel",
    "check_jitter",
    "draft_keep",
    "jitter_factor",
    "optimal_budget",
    "optimal_schedule",
]


@dataclass(frozen=True)
class CostModel:
    """Per-round cost, in milliseconds, of the simulated accelerator.

    Verification is memory-bound up to ``verify_free_nodes`` tree nodes (they ride along
    for free, as a small batch does on a GPU) and compute-bound beyond: each further node
    costs ``verify_per_node_ms``, plus ``verify_quadratic_ms`` per squared node count for
    attention within the tree. ``slowdown`` multiplies every figure (a slower machine, or
    a deliberate regression).

    The prompt's attention: past ``context_free_tokens`` prompt tokens (below them the
    attention hides behind reading the weights), each verified position costs
    ``verify_context_ms`` per 1000 further prompt tokens (``context_seconds``).
    """

    draft_ms: float = 0.8
    verify_base_ms: float = 2.0
    verify_free_nodes: int = 64
    verify_per_node_ms: float = 0.012
    verify_quadratic_ms: float = 0.0
    prefill_ms_per_token: float = 0.02
    slowdown: float = 1.0
    verify_context_ms: float = 0.01
    context_free_tokens: int = 512

    def __post_init__(self) -> None:
        for name in (
            "draft_ms",
            "verify_base_ms",
            "verify_per_node_ms",
            "verify_quadratic_ms",
            "prefill_ms_per_token",
            "verify_context_ms",
        ):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"CostModel.{name}: must be a number >= 0, got {value!r}")
        for name in ("verify_free_nodes", "context_free_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"CostModel.{name}: must be an integer >= 0, got {value!r}")
        sd = self.slowdown
        if not isinstance(sd, (int, float)) or not math.isfinite(sd) or sd <= 0:
            raise ValueError(f"CostModel.slowdown: must be a number > 0, got {self.slowdown!r}")

    def draft_seconds(self) -> float:
        """Cost of one drafter pass (one block, all positions at once)."""
        return self.draft_ms * self.slowdown / 1000.0

    def verify_seconds(self, nodes: int) -> float:
        """Cost of one target pass verifying a tree of ``nodes`` non-root nodes."""
        extra = max(0, nodes - self.verify_free_nodes)
        ms = (
            self.verify_base_ms
            + self.verify_per_node_ms * extra
            + self.verify_quadratic_ms * nodes * nodes
        )
        return ms * self.slowdown / 1000.0

    def round_seconds(self, nodes: int) -> float:
        """Cost of one speculative round with a tree of ``nodes`` non-root nodes."""
        return self.draft_seconds() + self.verify_seconds(nodes)

    def target_round_seconds(self) -> float:
        """Cost of one plain target decoding step (no drafter, a single token)."""
        return self.verify_seconds(0)

    def context_seconds(self, positions: int, prompt_tokens: int) -> float:
        """Cost of ``positions`` verified positions (a tree's nodes plus the target's own
        token; 1 without a tree) attending to a prompt of ``prompt_tokens`` tokens: nothing
        up to ``context_free_tokens``, then linear in the tokens past it."""
        past = max(0, prompt_tokens - self.context_free_tokens)
        return self.verify_context_ms * positions * past / 1000.0 * self.slowdown / 1000.0

    def prefill_seconds(self, prompt_tokens: int) -> float:
        """Cost of the prefill pass that also yields the first token, over the
        ``prompt_tokens`` it computes (the server's prefix cache spares the ones it holds)."""
        ms = self.prefill_ms_per_token * prompt_tokens + self.verify_base_ms
        return ms * self.slowdown / 1000.0


#: prompt tokens the drafter handles as well as a short prompt (its training context)
DRAFT_CONTEXT = 512
#: prompt tokens past ``DRAFT_CONTEXT`` over which the drafter's per-token acceptance halves
DRAFT_HALFLIFE = 2048


def draft_keep(
    prompt_tokens: int, context: int = DRAFT_CONTEXT, halflife: int = DRAFT_HALFLIFE
) -> float:
    """The chance that the drafter keeps track of each token the target would accept, after
    a prompt of ``prompt_tokens`` tokens: 1 up to ``context`` tokens, then halving every
    ``halflife`` tokens past it (``halflife`` 0: it never decays). A drafted token it loses
    is rejected, so acceptance falls with the prompt's length while the text stays the
    target's (lossless)."""
    past = prompt_tokens - context
    if halflife <= 0 or past <= 0:
        return 1.0
    return float(0.5 ** (past / halflife))


def check_jitter(cv: object) -> float:
    """``cv`` as a float when it is a usable coefficient of variation (0 to 1), else ValueError."""
    if isinstance(cv, bool) or not isinstance(cv, (int, float)):
        raise ValueError(f"jitter: must be a number between 0 and 1, got {cv!r}")
    if not math.isfinite(cv) or not 0 <= cv <= 1:
        raise ValueError(f"jitter: must be a number between 0 and 1, got {cv!r}")
    return float(cv)


def jitter_factor(cv: float, seed: int, request: int) -> float:
    """The noise on every simulated cost of the ``request``-th generation request.

    Lognormal with mean 1 and coefficient of variation ``cv`` (0: exactly 1), drawn
    from a stream seeded by ``seed`` and the request's ordinal, so a run is
    reproducible and an in-process simulation can draw the very same factors.
    Multiplicative and per request, as a real accelerator's run-to-run noise is
    (clocks, other tenants, memory placement): a whole request runs a bit faster
    or slower, rounds within it alike.
    """
    if cv == 0:
        return 1.0
    sigma = math.sqrt(math.log1p(cv * cv))
    rng = random.Random(f"ddtree-jitter:{seed}:{request}")
    return math.exp(rng.gauss(-sigma * sigma / 2, sigma))


class Accelerator:
    """The simulated accelerator the requests in flight share.

    Each request in flight registers the tree size of its current round; a
    verification pass then covers the nodes of every request (the batch), so
    its cost is ``CostModel.verify_seconds(total nodes in flight)``. A request
    in prefill, or decoding without a tree, adds no nodes. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[int, int] = {}
        self._next = 0

    def join(self) -> int:
        """Register a request; returns its handle."""
        with self._lock:
            self._next += 1
            self._nodes[self._next] = 0
            return self._next

    def leave(self, handle: int) -> None:
        """The request is done (idempotent)."""
        with self._lock:
            self._nodes.pop(handle, None)

    def step(self, handle: int, nodes: int) -> int:
        """Set the request's tree size for this round; the total nodes in the batch."""
        with self._lock:
            self._nodes[handle] = nodes
            return sum(self._nodes.values())

    @property
    def in_flight(self) -> int:
        """Requests currently registered."""
        with self._lock:
            return len(self._nodes)


DEFAULT_PROMPTS: tuple[str, ...] = (
    "Write a long essay about rivers and the valleys they shape.",
    "Explain in detail how a computer network handles a request.",
    "Write a detailed article about bees and their hives.",
    "Describe at length how bread is baked in a small kitchen.",
    "Write a long story about a train crossing the mountains.",
    "Explain in detail how the weather changes along the coast.",
)


def _check_arguments(budgets: Sequence[int], concurrency: int) -> None:
    """``optimal_budget``'s budgets and concurrency, or a one-line ``ValueError``."""
    if not budgets:
        raise ValueError("optimal_budget: budgets is empty")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"optimal_budget: concurrency {concurrency!r} is not an integer >= 1")
    for b in budgets:
        if not isinstance(b, int) or isinstance(b, bool) or b < 1:
            raise ValueError(f"optimal_budget: budget {b!r} is not a positive integer")


def optimal_budget(
    budgets: Sequence[int],
    prompts: Sequence[str] | None = None,
    cost: CostModel | None = None,
    max_tokens: int = Settings.max_tokens,
    block_size: int = 16,
    concurrency: int = 1,
    draft_context: int = DRAFT_CONTEXT,
    draft_halflife: int = DRAFT_HALFLIFE,
) -> tuple[int, dict[int, dict[str, float]]]:
    """The budget with the highest expected decode throughput under ``cost``.

    ``concurrency`` C: C requests at the same budget share the accelerator, so
    each verification pass also covers the other C - 1 requests' trees (their
    mean tree size); the per-request rate is what one of them sees. A long prompt is
    weighed as the server weighs it: its attention (``CostModel.context_seconds``) and a
    drafter that loses track of it (``draft_keep`` with ``draft_context``, ``draft_halflife``).

    Runs the model (no waiting) on ``prompts`` at each budget, temperature 0, measures the
    mean acceptance length of the decode rounds (the prefill round excluded, as a client's
    decode rate excludes the first token) and the mean tree size, and divides tokens per
    round by the cost model's seconds per round. Returns ``(best_budget, table)`` where
    ``table[budget]`` has ``tau``, ``nodes``, ``round_ms`` and ``tok_per_sec``.
    Deterministic: the same arguments always give the same answer.
    """
    from .model import get_model  # late: keeps ``import cost`` free of the model load

    _check_arguments(budgets, concurrency)
    cost = cost or CostModel()
    model = get_model()
    texts = list(prompts) if prompts is not None else list(DEFAULT_PROMPTS)
    table: dict[int, dict[str, float]] = {}
    for budget in budgets:
        tokens = rounds = nodes = 0
        seconds = 0.0
        trees: list[tuple[int, int]] = []  # (nodes, prompt tokens) of each decode round
        for text in texts:
            rendered = model.render_chat([("user", text)], False)
            prompt_tokens = len(model.encode(rendered))
            keep = draft_keep(prompt_tokens, draft_context, draft_halflife)
            plan = replace(model.plan(text, rendered), draft_keep=keep)
            produced = 0
            for i, rd in enumerate(model.generate(plan, max_tokens, budget, block_size)):
                take = min(len(rd.tokens), max_tokens - produced)
                if rd.tokens[take - 1 : take] == [model.eos]:
                    take -= 1
                produced += take
                if i == 0:
                    continue
                tokens += take
                rounds += 1
                nodes += rd.nodes
                trees.append((rd.nodes, prompt_tokens))
        others = (concurrency - 1) * (nodes / rounds if rounds else 0.0)
        for n, context in trees:
            seconds += cost.draft_seconds() + cost.verify_seconds(round(n + others))
            seconds += cost.context_seconds(n + 1, context)
        tau = tokens / rounds if rounds else 1.0
        table[budget] = {
            "tau": tau,
            "nodes": nodes / rounds if rounds else 0.0,
            "round_ms": 1000.0 * seconds / rounds if rounds else 0.0,
            "tok_per_sec": tokens / seconds if seconds else 0.0,
        }
    best = max(table, key=lambda b: (table[b]["tok_per_sec"], -b))
    return best, table


def optimal_schedule(
    budgets: Sequence[int],
    concurrencies: Sequence[int],
    prompts: Sequence[str] | None = None,
    cost: CostModel | None = None,
    max_tokens: int = Settings.max_tokens,
    block_size: int = 16,
) -> dict[int, int]:
    """The optimal budget at each concurrency (``optimal_budget(..., concurrency=C)``)."""
    return {
        c: optimal_budget(budgets, prompts, cost, max_tokens, block_size, concurrency=c)[0]
        for c in concurrencies
    }
