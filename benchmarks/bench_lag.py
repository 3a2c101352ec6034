"""Event-loop lag of the load runner at C=1, 4 and 16: the figures the SATURATED rule rests on.

For each concurrency, ``--repeats`` load points (``--requests`` streamed requests each) run
against a server in another process; each point's lag distribution (p50, p99, max), the
share of the wall time the loop woke late (``lag share``: the sum of the lateness over the
point's wall time), the loop thread's CPU share, and the old and new verdicts are printed.

    python benchmarks/bench_lag.py                       # the reference server, simulated latency
    python benchmarks/bench_lag.py --endpoint http://127.0.0.1:PORT/v1 --model ID   # llama.cpp

Say in the table whether the machine was quiet or busy (``uptime`` before and after).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics

from pytest_ddtree.measure.load import LoadPoint
from pytest_ddtree.measure.load.metrics import CPU_LIMIT, LAG_LIMIT
from pytest_ddtree.measure.load.runner import run_point
from pytest_ddtree.reference import MODEL_ID, spawn_reference_server
from pytest_ddtree.reference.cost import DEFAULT_PROMPTS, CostModel
from pytest_ddtree.wire.protocol import EndpointConfig


def one(endpoint: EndpointConfig, c: int, n: int, budget: int | None, max_tokens: int) -> str:
    specs = [
        endpoint.spec(
            DEFAULT_PROMPTS[i % len(DEFAULT_PROMPTS)], tree_budget=budget, max_tokens=max_tokens
        )
        for i in range(n)
    ]
    raws, _, _, h = asyncio.run(run_point(endpoint, specs, LoadPoint("concurrency", c)))
    errors = sum(1 for r in raws if r.error)
    old = h.lag_p99 > LAG_LIMIT or h.cpu_share > CPU_LIMIT
    return (
        f"C={c:<3} n={n:<3} lag p50/p99/max {h.lag_p50 * 1e3:5.1f}/{h.lag_p99 * 1e3:6.1f}/"
        f"{h.lag_max * 1e3:6.1f} ms  lag share {h.lag_share:6.1%}  loop CPU {h.cpu_share:5.1%}  "
        f"old={'SATURATED' if old else 'ok':9} new={h.state():9} errors={errors}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--endpoint")
    p.add_argument("--model", default=None)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--requests", type=int, default=0, help="per point (default max(16, 4C))")
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--concurrency", default="1,4,16")
    args = p.parse_args()
    print("load average:", os.getloadavg())
    server = None
    if args.endpoint:
        endpoint, budget = EndpointConfig(args.endpoint, model=args.model), None
    else:
        server = spawn_reference_server(simulated_latency=True, cost=CostModel(slowdown=0.4))
        endpoint, budget = EndpointConfig(server.base_url, model=MODEL_ID), 64
    try:
        for c in (int(x) for x in args.concurrency.split(",")):
            n = args.requests or max(16, 4 * c)
            for _ in range(args.repeats):
                print(one(endpoint, c, n, budget, args.max_tokens), flush=True)
    finally:
        if server is not None:
            server.stop()
    print("load average:", os.getloadavg())
    _ = statistics


if __name__ == "__main__":
    main()
