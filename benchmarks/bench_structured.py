"""Cost of constrained decoding on the embedded reference server.

Times, in process with simulated latency off (so the figures are the server's own compute),
the median wall time of one request at each budget:

* a plain request (no ``response_format``, no tools): the path constrained decoding must not
  slow (run it against an older checkout with ``--plain-only`` for the figure before);
* a JSON-schema request (``response_format`` with a small object schema), and a tool call.

Run: ``python benchmarks/bench_structured.py [--requests 30] [--budgets 16,256] [--plain-only]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import httpx

from pytest_ddtree.reference import start_reference_server

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer"},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
PROMPT = "What will the weather be in Venkabel?"
LONG = "Write a long essay about rivers and the valleys they shape."


def _time(client: httpx.Client, body: dict[str, Any], n: int) -> tuple[float, float, int]:
    """Median wall milliseconds of ``n`` requests (after one warm-up), the process's CPU
    milliseconds per request (client and server share the process; CPU time is what a
    loaded machine disturbs least) and the completion tokens."""
    r = client.post("/chat/completions", json=body)
    r.raise_for_status()
    tokens = int(r.json()["usage"]["completion_tokens"])
    times = []
    cpu0 = time.process_time()
    for _ in range(n):
        t0 = time.perf_counter()
        client.post("/chat/completions", json=body).raise_for_status()
        times.append((time.perf_counter() - t0) * 1000)
    cpu = (time.process_time() - cpu0) / n * 1000
    return statistics.median(times), cpu, tokens


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=30)
    p.add_argument("--budgets", default="16,256")
    p.add_argument("--plain-only", action="store_true")
    args = p.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    base = {"model": "ddtree-reference", "temperature": 0, "max_tokens": 256}
    cases: list[tuple[str, dict[str, Any]]] = [
        ("plain long (256 tokens)", {"messages": [{"role": "user", "content": LONG}]}),
        ("plain short", {"messages": [{"role": "user", "content": PROMPT}]}),
    ]
    if not args.plain_only:
        rf = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}
        tool = {"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}
        msgs = [{"role": "user", "content": PROMPT}]
        cases += [
            ("json_schema", {"messages": msgs, "response_format": rf}),
            (
                "tool call (required)",
                {"messages": msgs, "tools": [tool], "tool_choice": "required"},
            ),
        ]
    with (
        start_reference_server(simulated_latency=False) as server,
        httpx.Client(base_url=server.base_url, timeout=60) as client,
    ):
        print(f"{'request':<26} {'budget':>6} {'tokens':>6} {'median ms':>10} {'cpu ms':>7}")
        for name, body in cases:
            for budget in budgets:
                ms, cpu, tokens = _time(
                    client, {**base, **body, "tree_budget": budget}, args.requests
                )
                print(f"{name:<26} {budget:>6} {tokens:>6} {ms:>10.2f} {cpu:>7.2f}")


if __name__ == "__main__":
    main()
