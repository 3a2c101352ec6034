"""Concurrent requests share the simulated accelerator; the optimum budget falls with load."""

from __future__ import annotations

import threading

import httpx

from pytest_ddtree.reference import start_reference_server
from pytest_ddtree.reference.cost import Accelerator, CostModel, optimal_budget, optimal_schedule

BUDGETS = [16, 32, 64, 128, 256]


def test_accelerator_counts_the_trees_in_flight() -> None:
    acc = Accelerator()
    a, b = acc.join(), acc.join()
    assert acc.step(a, 64) == 64
    assert acc.step(b, 32) == 96
    assert acc.step(a, 0) == 32  # a request in prefill adds no nodes
    acc.leave(b)
    acc.leave(b)  # idempotent
    assert acc.in_flight == 1 and acc.step(a, 10) == 10


def test_optimum_falls_with_concurrency() -> None:
    schedule = optimal_schedule(BUDGETS, [1, 2, 4, 8, 16])
    picks = [schedule[c] for c in (1, 2, 4, 8, 16)]
    assert picks == sorted(picks, reverse=True) and picks[0] > picks[-1], schedule
    assert schedule[1] == optimal_budget(BUDGETS)[0]  # C=1 is the unbatched optimum
    _, alone = optimal_budget(BUDGETS)
    _, crowded = optimal_budget(BUDGETS, concurrency=8)
    for b in BUDGETS:  # a crowded verification pass is dearer, per round
        assert crowded[b]["round_ms"] > alone[b]["round_ms"]
        assert crowded[b]["tau"] == alone[b]["tau"]


def _verify_ms_per_round(clients: int, cost: CostModel) -> list[float]:
    out: list[float] = []
    barrier = threading.Barrier(clients)
    with start_reference_server(cost=cost) as srv:

        def one() -> None:
            with httpx.Client(base_url=srv.base_url, timeout=60) as c:
                barrier.wait(10)
                body = {
                    "messages": [{"role": "user", "content": "Write a long essay about rivers."}],
                    "max_tokens": 96,
                    "tree_budget": 64,
                }
                stats = c.post("/chat/completions", json=body).json()["ddtree_stats"]
                out.append(stats["verify_ms"] / max(stats["cycles"] - 1, 1))

        threads = [threading.Thread(target=one) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    return out


def test_concurrent_requests_share_the_verification_pass() -> None:
    # the reported simulated verify cost, not a wall-clock timing: alone, a 64-node tree
    # rides free; with 8 requests in flight the passes cover several trees
    cost = CostModel(verify_free_nodes=64, verify_per_node_ms=0.01)
    alone = _verify_ms_per_round(1, cost)
    crowded = _verify_ms_per_round(8, cost)
    assert len(crowded) == 8
    base = cost.verify_base_ms
    assert max(alone) <= base * 1.05
    assert min(crowded) > base + 0.01 * 64  # at least one other tree in every pass on average
