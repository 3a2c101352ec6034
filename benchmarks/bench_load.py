"""Load mode: client cost, 64 concurrent streams, TTFT against the server's stamp, schedule.

Four measurements against reference servers in subprocesses (so their CPU is not the
client's), all on 127.0.0.1:

1. ``cpu``: client CPU per streamed token of the load runner against a bare async httpx
   loop that only reads the same streams (same requests, same concurrency, latency off),
   interleaved A/B/A/B in one run. The runner's hot path is reported alone and with the
   validation of every response (the project's invariants, exact tokenizer) added.
2. ``c64``: 64 concurrent streams (simulated latency on): errors and achieved concurrency.
3. ``ttft``: at C=1, the client's TTFT against the server's own ``ddtree_stats.ttft_ms``.
4. ``schedule``: the measured budget schedule against ``optimal_schedule`` of the cost model.

    python benchmarks/bench_load.py [cpu c64 ttft schedule] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

import httpx

from pytest_ddtree.checks.invariants import check
from pytest_ddtree.measure.load import LoadPoint, LoadTester
from pytest_ddtree.measure.load.runner import run_point, validate
from pytest_ddtree.reference import MODEL_ID, spawn_reference_server, tokenizer_path
from pytest_ddtree.reference.cost import DEFAULT_PROMPTS, optimal_schedule
from pytest_ddtree.report.load_text import failure_text, schedule_text
from pytest_ddtree.wire.protocol import EndpointConfig
from pytest_ddtree.wire.tokens import load_counter

PROMPTS = list(DEFAULT_PROMPTS)


async def bare(
    url: str, bodies: list[dict[str, Any]], c: int, *, per_connection: bool = False
) -> tuple[float, float, int]:
    """Read the streams and nothing else: (loop-thread CPU s, wall s, data lines).

    One ``httpx.AsyncClient`` with a pool of C (what a hand-written loop does), or with
    ``per_connection`` one single-connection client per stream (the runner's layout).
    """
    lines = 0
    k = 1 if per_connection else c
    limits = httpx.Limits(max_connections=k, max_keepalive_connections=k)
    clients = [httpx.AsyncClient(limits=limits, timeout=60) for _ in range(c if k == 1 else 1)]
    models = url.rsplit("/", 2)[0] + "/models"
    try:
        await asyncio.gather(*(clients[i % len(clients)].get(models) for i in range(c)))
        queue = iter(bodies)
        cpu0, t0 = time.thread_time(), time.perf_counter()

        async def worker(http: httpx.AsyncClient) -> None:
            nonlocal lines
            for body in queue:
                async with http.stream("POST", url, json=body) as resp:
                    async for line in resp.aiter_lines():
                        if line.startswith("data: "):
                            lines += 1

        await asyncio.gather(*(worker(clients[i % len(clients)]) for i in range(c)))
        return time.thread_time() - cpu0, time.perf_counter() - t0, lines
    finally:
        for http in clients:
            await http.aclose()


def bench_cpu(rounds: int, c: int, n: int, out: dict[str, Any]) -> None:
    counter = load_counter(str(tokenizer_path()))
    with spawn_reference_server(simulated_latency=False) as srv:
        ep = EndpointConfig(srv.base_url, model=MODEL_ID)
        specs = [
            ep.spec(PROMPTS[i % len(PROMPTS)], tree_budget=64, max_tokens=256) for i in range(n)
        ]
        bodies = [dict(s.body) for s in specs]
        url = specs[0].url
        point = LoadPoint("concurrency", c)
        ours, ours_val, base, base1, events = [], [], [], [], []
        for _ in range(rounds):
            cpu_b, _, lines = asyncio.run(bare(url, bodies, c))
            cpu_b1, _, _ = asyncio.run(bare(url, bodies, c, per_connection=True))
            raws, w0, p0, health = asyncio.run(run_point(ep, specs, point))
            cpu0 = time.thread_time()
            samples = validate(
                raws, point, w0, p0, judge=lambda x: check(x, counter=counter), counter=counter
            )
            vcpu = time.thread_time() - cpu0
            tokens = sum(s.output_tokens or 0 for s in samples)
            bad = [s for s in samples if not s.valid]
            if bad:
                sys.exit(f"invalid responses in the CPU benchmark: {bad[0].evidence}")
            base.append(cpu_b / tokens)
            base1.append(cpu_b1 / tokens)
            ours.append(health.cpu_seconds / tokens)
            ours_val.append((health.cpu_seconds + vcpu) / tokens)
            events.append(lines / n)
        res = {
            "concurrency": c,
            "requests": n,
            "rounds": rounds,
            "tokens_per_request": tokens / n,
            "events_per_request": statistics.median(events),
            "bare_us_per_token": statistics.median(base) * 1e6,
            "bare_per_connection_us_per_token": statistics.median(base1) * 1e6,
            "runner_us_per_token": statistics.median(ours) * 1e6,
            "runner_with_validation_us_per_token": statistics.median(ours_val) * 1e6,
        }
        res["ratio_stream"] = res["runner_us_per_token"] / res["bare_us_per_token"]
        res["ratio_with_validation"] = (
            res["runner_with_validation_us_per_token"] / res["bare_us_per_token"]
        )
        res["ratio_stream_vs_per_connection"] = (
            res["runner_us_per_token"] / res["bare_per_connection_us_per_token"]
        )
        res["ratio_with_validation_vs_per_connection"] = (
            res["runner_with_validation_us_per_token"] / res["bare_per_connection_us_per_token"]
        )
        out["cpu"] = res
        print(
            f"cpu: C={c}, {n} requests x {rounds} rounds, {res['tokens_per_request']:.0f} tok/req, "
            f"{res['events_per_request']:.0f} events/req\n"
            f"  bare async httpx loop (read only): {res['bare_us_per_token']:.2f} us/token\n"
            f"  same, one connection per client:   "
            f"{res['bare_per_connection_us_per_token']:.2f} us/token\n"
            f"  load runner, stream hot path:      {res['runner_us_per_token']:.2f} us/token "
            f"({res['ratio_stream']:.2f}x)\n"
            f"  load runner + every response validated: "
            f"{res['runner_with_validation_us_per_token']:.2f} us/token "
            f"({res['ratio_with_validation']:.2f}x)\n"
            f"  against the one-connection bare loop: stream "
            f"{res['ratio_stream_vs_per_connection']:.2f}x, validated "
            f"{res['ratio_with_validation_vs_per_connection']:.2f}x"
        )


def bench_c64(out: dict[str, Any]) -> None:
    counter = load_counter(str(tokenizer_path()))
    with spawn_reference_server() as srv:
        tester = LoadTester(
            EndpointConfig(srv.base_url, model=MODEL_ID),
            judge=lambda x: check(x, counter=counter),
            describe=failure_text,
            tree_budgets=[32],
            concurrencies=[64],
            requests=1024,
            counter=counter,
        )
        r = tester(PROMPTS)
        s = r.stats[0]
        assert s.client is not None
        out["c64"] = {
            "requests": s.requests,
            "invalid": s.invalid,
            "achieved_concurrency": s.achieved_concurrency,
            "ttft_p50_ms": s.ttft.p50 * 1000 if s.ttft else None,
            "ttft_p99_ms": s.ttft.p99 * 1000 if s.ttft else None,
            "tpot_p50_ms": s.tpot.p50 * 1000 if s.tpot else None,
            "client_cpu_share": s.client.cpu_share,
            "client_us_per_token": (s.client.cpu_per_token or 0) * 1e6,
            "client_us_per_event": s.client.cpu_seconds
            / max(1, sum(len(x.gaps) + 1 for x in r.samples))
            * 1e6,
            "output_tokens_per_second": s.output_tokens_per_second,
            "lag_p99_ms": s.client.lag_p99 * 1000,
            "saturated": s.client.saturated,
        }
        print(f"c64: {r.table()}")
        c = out["c64"]
        print(
            f"c64: {c['requests']} requests, {c['invalid']} invalid, achieved concurrency "
            f"{c['achieved_concurrency']:.1f} of 64 ({c['achieved_concurrency'] / 64:.1%}); "
            f"client {c['client_us_per_token']:.1f} us/token, {c['client_us_per_event']:.0f} "
            f"us/content event, {c['client_cpu_share']:.0%} of a core, lag p99 "
            f"{c['lag_p99_ms']:.1f} ms"
        )


def bench_ttft(n: int, out: dict[str, Any]) -> None:
    counter = load_counter(str(tokenizer_path()))
    with spawn_reference_server() as srv:
        tester = LoadTester(
            EndpointConfig(srv.base_url, model=MODEL_ID),
            judge=lambda x: check(x, counter=counter),
            describe=failure_text,
            tree_budgets=[64],
            concurrencies=[1],
            requests=n,
            counter=counter,
        )
        r = tester(PROMPTS)
        diffs = [s.ttft - s.server_ttft for s in r.samples if s.ttft and s.server_ttft]
        client = statistics.median(s.ttft for s in r.samples if s.ttft)
        server = statistics.median(s.server_ttft for s in r.samples if s.server_ttft)
        rel = [
            (s.ttft - s.server_ttft) / s.server_ttft for s in r.samples if s.ttft and s.server_ttft
        ]
        out["ttft"] = {
            "requests": len(diffs),
            "client_median_ms": client * 1000,
            "server_median_ms": server * 1000,
            "diff_median_ms": statistics.median(diffs) * 1000,
            "diff_p90_ms": statistics.quantiles(diffs, n=10, method="inclusive")[8] * 1000,
            "client_minus_server_medians_ms": (client - server) * 1000,
            "diff_max_ms": max(diffs) * 1000,
            "rel_median": statistics.median(rel),
            "within_5pct_or_0.5ms": sum(
                1 for d, q in zip(diffs, rel, strict=True) if abs(d) <= 5e-4 or abs(q) <= 0.05
            ),
        }
        t = out["ttft"]
        print(
            f"ttft: C=1, {t['requests']} requests: client median {t['client_median_ms']:.3f} ms, "
            f"server stamp median {t['server_median_ms']:.3f} ms, difference median "
            f"{t['diff_median_ms']:.3f} ms (p90 {t['diff_p90_ms']:.3f}, "
            f"max {t['diff_max_ms']:.3f} ms, {t['rel_median']:.1%}); "
            f"{t['within_5pct_or_0.5ms']}/{t['requests']} within 5% or 0.5 ms"
        )


def bench_schedule(budgets: list[int], cs: list[int], out: dict[str, Any]) -> None:
    counter = load_counter(str(tokenizer_path()))
    expected = optimal_schedule(budgets, cs, prompts=PROMPTS)
    with spawn_reference_server() as srv:
        tester = LoadTester(
            EndpointConfig(srv.base_url, model=MODEL_ID),
            judge=lambda x: check(x, counter=counter),
            describe=failure_text,
            tree_budgets=budgets,
            concurrencies=cs,
            counter=counter,
        )
        r = tester(PROMPTS)
        print(r.table())
        measured = {c.point.concurrency: c.tree_budget for c in r.schedule.choices}
        out["schedule"] = {
            "measured": schedule_text(r.schedule),
            "measured_by_c": measured,
            "optimum_by_c": expected,
            "matches": measured == expected,
            "choices": [c.to_json() for c in r.schedule.choices],
        }
        print(
            f"schedule: measured {measured}, computed optimum {expected}: "
            f"{'MATCH' if measured == expected else 'DIFFER'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="*", default=["cpu", "c64", "ttft", "schedule"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--requests", type=int, default=192)
    parser.add_argument("--json")
    args = parser.parse_args()
    out: dict[str, Any] = {}
    if "cpu" in args.parts:
        bench_cpu(args.rounds, args.concurrency, args.requests, out)
    if "c64" in args.parts:
        bench_c64(out)
    if "ttft" in args.parts:
        bench_ttft(32, out)
    if "schedule" in args.parts:
        bench_schedule([16, 32, 64, 128], [1, 2, 4, 8], out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
