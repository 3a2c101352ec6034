"""Benchmark of the embedded reference server.

Measures, on this machine:

* start-up: ``spawn_reference_server`` until the first accepted connection;
* single-client throughput with simulated latency off (completion tokens per second of wall
  time, non-streaming and streaming, at the default budget);
* N concurrent streaming clients (default 32): errors and aggregate throughput;
* optionally (``--sweep``) decode throughput per budget with simulated latency on, next to
  the computed optimum.

Run: ``python benchmarks/bench_reference.py [--requests 40] [--clients 32] [--sweep]``.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
from typing import Any

import httpx

from pytest_ddtree.reference import optimal_budget, spawn_reference_server, start_reference_server

PROMPTS = (
    "Write a long essay about rivers and the valleys they shape.",
    "Explain in detail how a computer network handles a request.",
    "Write a detailed article about bees and their hives.",
    "Describe at length how bread is baked in a small kitchen.",
)


def _prompt(i: int, cold: bool) -> str:
    # a cold prompt is new to the server: the drafter's and the tree caches miss at first
    base = PROMPTS[i % len(PROMPTS)]
    return f"{base} Part {i}." if cold else base


def _body(
    i: int, max_tokens: int, stream: bool, budget: int | None = None, cold: bool = False
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": _prompt(i, cold)}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if budget is not None:
        body["tree_budget"] = budget
    return body


def bench_startup(trials: int) -> dict[str, float]:
    """Seconds from spawning the child until a TCP connection is accepted."""
    times = []
    for _ in range(trials):
        t0 = time.perf_counter()
        srv = spawn_reference_server(simulated_latency=False)
        with socket.create_connection((srv.host, srv.port), timeout=5):
            times.append(time.perf_counter() - t0)
        srv.stop()
    return {"median_s": statistics.median(times), "max_s": max(times)}


def _stream_tokens(client: httpx.Client, body: dict[str, Any]) -> int:
    tokens = 0
    done = False
    with client.stream("POST", "/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                continue
            obj = json.loads(data)
            if "error" in obj:
                raise RuntimeError(f"in-band error: {obj['error']}")
            if obj.get("usage"):
                tokens = obj["usage"]["completion_tokens"]
    if not done:
        raise RuntimeError("stream ended without [DONE]")
    return tokens


def bench_single(base_url: str, requests: int, max_tokens: int) -> dict[str, float]:
    """One client, sequential requests: completion tokens per wall-clock second.

    ``cold_*`` figures use a distinct prompt per request (and run first, on a fresh server).
    """
    out: dict[str, float] = {}
    with httpx.Client(base_url=base_url, timeout=60) as c:
        for cold in (True, False):
            for stream in (False, True):
                tokens = 0
                t0 = time.perf_counter()
                for i in range(requests):
                    k = i + (requests if stream else 0)  # cold prompts never repeat
                    if stream:
                        tokens += _stream_tokens(c, _body(k, max_tokens, True, cold=cold))
                    else:
                        body = _body(k, max_tokens, False, cold=cold)
                        r = c.post("/chat/completions", json=body)
                        r.raise_for_status()
                        tokens += r.json()["usage"]["completion_tokens"]
                dt = time.perf_counter() - t0
                name = ("cold_" if cold else "") + ("stream" if stream else "nonstream")
                out[name + "_tok_per_s"] = round(tokens / dt)
    return out


def bench_concurrent(base_url: str, clients: int, max_tokens: int) -> dict[str, float]:
    """``clients`` threads each streaming two requests at once."""
    errors: list[str] = []
    tokens = [0] * clients
    barrier = threading.Barrier(clients)

    def worker(k: int) -> None:
        try:
            with httpx.Client(base_url=base_url, timeout=120) as c:
                barrier.wait()
                for j in range(2):
                    tokens[k] += _stream_tokens(c, _body(k + j, max_tokens, True))
        except Exception as e:  # every failure is counted and reported
            errors.append(f"{type(e).__name__}: {e}")

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    return {
        "clients": clients,
        "errors": len(errors),
        "aggregate_tok_per_s": sum(tokens) / dt,
        "seconds": dt,
    }


def bench_sweep(budgets: list[int], rounds: int) -> dict[str, Any]:
    """Decode rate per budget with simulated latency on, against :func:`optimal_budget`."""
    best, table = optimal_budget(budgets)
    measured: dict[int, list[float]] = {b: [] for b in budgets}
    with start_reference_server() as srv, httpx.Client(base_url=srv.base_url, timeout=60) as c:
        for _ in range(rounds):
            for b in budgets:
                for i in range(len(PROMPTS)):
                    r = c.post("/chat/completions", json=_body(i, 128, False, b))
                    measured[b].append(r.json()["ddtree_stats"]["tok_per_sec"])
    med = {b: statistics.median(v) for b, v in measured.items()}
    return {
        "computed_best": best,
        "measured_best": max(med, key=lambda b: med[b]),
        "per_budget": {
            b: {"computed": round(table[b]["tok_per_sec"]), "measured": round(med[b])}
            for b in budgets
        },
    }


def main() -> None:
    """Run every benchmark and print one JSON document."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--startup-trials", type=int, default=5)
    p.add_argument("--sweep", action="store_true")
    a = p.parse_args()
    result: dict[str, Any] = {"startup": bench_startup(a.startup_trials)}
    with start_reference_server(simulated_latency=False) as srv:
        result["single_client"] = bench_single(srv.base_url, a.requests, a.max_tokens)
        result["concurrent"] = bench_concurrent(srv.base_url, a.clients, 128)
    with spawn_reference_server(simulated_latency=False) as srv:
        result["single_client_subprocess"] = bench_single(srv.base_url, a.requests, a.max_tokens)
    if a.sweep:
        result["sweep"] = bench_sweep([16, 32, 64, 128, 256, 512, 1024], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
