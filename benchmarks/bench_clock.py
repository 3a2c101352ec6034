"""TTFT by the old clock (from the call's start) and the new one (from the first byte on the wire).

The sync client used to stamp ``sent`` when the call began, before httpx took a pooled
connection (or opened one); it now stamps it when the request's headers start to go out,
as the load runner does, and reports a new connection's setup apart (``connect``). This
sends N streamed requests to one reference server (subprocess on 127.0.0.1, simulated
latency off), each with a prompt the server has not seen, through ``DDTreeClient``: on a
new connection per request (no keep-alive), then on one kept-alive connection. It prints
the median of each figure in milliseconds: TTFT by the old definition (first content minus
the call's start, read from the same request), TTFT by the new one, the connection setup,
and the time from the call's start to the first byte on the wire.

    python benchmarks/bench_clock.py [--requests 60] [--max-tokens 16]
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import httpx

from pytest_ddtree.reference import MODEL_ID, spawn_reference_server
from pytest_ddtree.wire import _net
from pytest_ddtree.wire import client as client_module
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.clock import WireClock

PROMPT = "Write a short note about rivers and the towns along them"

#: when each attempt began, in order (the client's clock, recorded)
BEGAN: list[float] = []


class RecordingClock(WireClock):
    """The client's clock, keeping when each call began (the old ``sent``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        BEGAN.append(self.began)


def run(client: DDTreeClient, n: int, tag: str) -> dict[str, list[float]]:
    """N requests; per request the old and new TTFT, the connect time, the wait before the
    wire (milliseconds)."""
    out: dict[str, list[float]] = {"old": [], "new": [], "connect": [], "before": []}
    for i in range(n):
        BEGAN.clear()
        c = client.chat(f"{PROMPT} ({tag} {i}).")
        t = c.timings
        if not c.ok or t.first_content is None or len(BEGAN) != 1:
            raise SystemExit(f"request {i} ({tag}) failed: {c.error}")
        out["old"].append((t.first_content - BEGAN[0]) * 1e3)
        out["new"].append((t.first_content - t.sent) * 1e3)
        out["connect"].append((c.connect or 0.0) * 1e3)
        out["before"].append((t.sent - BEGAN[0]) * 1e3)
        if (c.connect is None) != (tag == "reused"):
            raise SystemExit(f"request {i} ({tag}): connect {c.connect!r}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()
    client_module.WireClock = RecordingClock  # type: ignore[misc]
    results: dict[str, dict[str, list[float]]] = {}
    with spawn_reference_server(simulated_latency=False) as server:
        options = {"model": MODEL_ID, "max_tokens": args.max_tokens}
        no_keepalive, _ = _net.make_transport(httpx.Limits(max_keepalive_connections=0))
        with DDTreeClient(server.base_url, transport=no_keepalive, **options) as client:
            client.chat(f"{PROMPT} (warm-up).")
            results["new connection"] = run(client, args.requests, "new")
        with DDTreeClient(server.base_url, **options) as client:
            client.chat(f"{PROMPT} (warm-up).")
            results["reused connection"] = run(client, args.requests, "reused")
    print(f"{args.requests} requests each, max_tokens {args.max_tokens}; medians in ms")
    print(
        f"{'':18}  {'TTFT old (call)':>15}  {'TTFT new (wire)':>15}  {'connect':>8}  "
        f"{'call->wire':>10}"
    )
    for name, r in results.items():
        med = {k: statistics.median(v) for k, v in r.items()}
        connect = f"{med['connect']:8.3f}" if any(r["connect"]) else f"{'none':>8}"
        print(
            f"{name:18}  {med['old']:15.3f}  {med['new']:15.3f}  {connect}  {med['before']:10.3f}"
        )


if __name__ == "__main__":
    main()
