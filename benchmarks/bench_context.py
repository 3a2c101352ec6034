"""Speculation against the target alone, by prompt depth: where does speculation stop paying?

Sends prompts of exact depths (``pytest_ddtree.core.context.prompts_at``, counted with the
server's own ``/tokenize``, the chat template's tokens read off one answer) to a speculative
server and to its target-only twin, interleaved, and prints per depth: the prompt tokens the
server reported (they must equal the depth), the decode rates (completion tokens after the
first, over the time after the first content) and the speedup of their medians.

Without ``--endpoint`` it spawns the embedded reference server and its target-only twin
(simulated latency on, the default context knobs: see docs/reference-server.md); with
``--endpoint URL --baseline URL`` it measures two real servers (llama.cpp: ``--shape
llamacpp``), for instance ``python -m pytest_ddtree.engines --threads 1 --speculation ngram``
and ``--speculation none``.

Run: ``python benchmarks/bench_context.py [--depths 128,512,1024,2048,4096,8192] [--n 5]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import httpx

from pytest_ddtree.core.context import prompts_at, template_overhead
from pytest_ddtree.wire.tokens import ServerCounter


def _root(url: str) -> str:
    return url.rstrip("/").removesuffix("/v1")


def _timed(client: httpx.Client, url: str, text: str, max_tokens: int) -> dict[str, Any]:
    """One streamed answer at temperature 0: its usage and its decode rate."""
    body = {
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    first = last = None
    usage: dict[str, Any] = {}
    with client.stream("POST", f"{url}/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            choices = chunk.get("choices") or []
            if choices and (choices[0].get("delta") or {}).get("content"):
                last = time.perf_counter()
                first = first or last
    tokens = int(usage.get("completion_tokens", 0))
    rate = (tokens - 1) / (last - first) if first and last and last > first else float("nan")
    return {"prompt_tokens": usage.get("prompt_tokens"), "tokens": tokens, "rate": rate}


def measure(
    spec: str, base: str, depths: list[int], n: int, max_tokens: int, shape: str
) -> list[dict[str, Any]]:
    client = httpx.Client(timeout=600.0)
    counter = ServerCounter(_root(spec), client, shape=shape)
    probe = "Hi there."
    reported = _timed(client, spec, probe, 4)["prompt_tokens"]
    overhead = template_overhead(int(reported), probe, counter.count)
    rows = []
    for depth in depths:
        prompts = prompts_at(
            depth, n, counter.count, overhead=overhead, salt=f"bench-{time.time()}"
        )
        spec_runs, base_runs = [], []
        for p in prompts:  # interleaved: drift hits both sides alike
            spec_runs.append(_timed(client, spec, p.text, max_tokens))
            base_runs.append(_timed(client, base, p.text, max_tokens))
        s = statistics.median(r["rate"] for r in spec_runs)
        b = statistics.median(r["rate"] for r in base_runs)
        rows.append(
            {
                "depth": depth,
                "prompt_tokens": sorted({r["prompt_tokens"] for r in spec_runs + base_runs}),
                "spec_tok_s": round(s, 1),
                "target_tok_s": round(b, 1),
                "speedup": round(s / b, 2),
                "tokens": statistics.median(r["tokens"] for r in spec_runs),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depths", default="128,512,1024,2048,4096,8192")
    ap.add_argument("--n", type=int, default=5, help="prompts per depth (default 5)")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--endpoint", help="a speculative server's /v1 URL")
    ap.add_argument("--baseline", help="its target-only twin's /v1 URL")
    ap.add_argument("--shape", default="reference", help="/tokenize shape (llamacpp, vllm, ...)")
    ap.add_argument("--slowdown", type=float, default=1.0, help="reference server only")
    args = ap.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    servers = []
    if args.endpoint:
        spec, base = args.endpoint, args.baseline
    else:
        from pytest_ddtree.reference import CostModel, spawn_reference_server

        cost = CostModel(slowdown=args.slowdown)
        servers = [
            spawn_reference_server(cost=cost),
            spawn_reference_server(cost=cost, target_only=True),
        ]
        spec, base = (s.base_url for s in servers)
    try:
        measure(spec, base, depths, args.n, args.max_tokens, args.shape)
    finally:
        for s in servers:
            s.stop()


if __name__ == "__main__":
    main()
