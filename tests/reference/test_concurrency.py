"""32 concurrent streaming clients are all served correctly."""

from __future__ import annotations

import threading

import httpx

from pytest_ddtree.reference import ReferenceServer

from ._helpers import LONG, SHORT, Stream, post, stream

CLIENTS = 32


def test_32_streaming_clients(ref_server: ReferenceServer, client: httpx.Client) -> None:
    prompts = [LONG, SHORT, "Explain in detail how trains run.", "List 5 facts about bees."]
    expected = {
        p: post(client, p, max_tokens=96).json()["choices"][0]["message"]["content"]
        for p in prompts
    }
    results: dict[int, Stream | BaseException] = {}
    barrier = threading.Barrier(CLIENTS)

    def worker(k: int) -> None:
        try:
            with httpx.Client(base_url=ref_server.base_url, timeout=60) as c:
                barrier.wait(10)
                results[k] = stream(c, prompts[k % 4], max_tokens=96, tree_budget=16 * (1 + k % 8))
        except BaseException as e:  # recorded and asserted below
            results[k] = e

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == CLIENTS
    for k, res in results.items():
        assert isinstance(res, Stream), f"client {k}: {res!r}"
        assert res.status == 200 and res.done
        assert res.content == expected[prompts[k % 4]]
        assert res.stats is not None and res.stats["tree_budget"] == 16 * (1 + k % 8)
