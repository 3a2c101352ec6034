"""Client overhead: DDTreeClient against a bare httpx streaming loop, side by side.

Both stream the same 256-token temperature-0 request from one reference server
(subprocess, simulated latency off), interleaved A/B/A/B so drift hits both
equally. Prints the median wall time of each, their ratio and the absolute
difference. The reference server memoises prompts it has seen, which makes a
repeated request unrealistically fast (a few ms); ``--fresh`` gives every round
a prompt the server has not seen (both sides still send the same one).

    python benchmarks/bench_client.py [--rounds 60] [--fresh]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import httpx

from pytest_ddtree.reference import MODEL_ID, spawn_reference_server, tokenizer_path
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.tokens import load_counter

PROMPT = "Write a detailed essay about rivers and the towns along them."


def bare(http: httpx.Client, url: str, body: dict[str, object]) -> int:
    """What a hand-written benchmark does: stream, parse each event, collect text."""
    pieces: list[str] = []
    with http.stream("POST", url, json=body) as resp:
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            obj = json.loads(line[6:])
            for choice in obj.get("choices") or ():
                pieces.append((choice.get("delta") or {}).get("content") or "")
    return len("".join(pieces))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--fresh", action="store_true", help="a new prompt every round")
    args = parser.parse_args()
    with spawn_reference_server(simulated_latency=False) as server:
        counter = load_counter(str(tokenizer_path()))
        client = DDTreeClient(server.base_url, model=MODEL_ID, counter=counter)
        http = httpx.Client(timeout=60)
        url = server.base_url + "/chat/completions"
        body = {
            "model": MODEL_ID,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": args.max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "chat_template_kwargs": {"enable_thinking": False},
            "tree_budget": 64,
        }
        ours: list[float] = []
        theirs: list[float] = []
        for i in range(args.rounds + 5):
            prompt = f"{PROMPT} Part {i}." if args.fresh else PROMPT
            body["messages"] = [{"role": "user", "content": prompt}]

            def run_ours(prompt: str = prompt) -> float:
                t = time.perf_counter()
                c = client.chat(prompt, max_tokens=args.max_tokens, tree_budget=64)
                assert c.ok and c.completion_tokens == args.max_tokens, c.error
                return time.perf_counter() - t

            def run_bare() -> float:
                t = time.perf_counter()
                bare(http, url, body)
                return time.perf_counter() - t

            # With --fresh only the first request of a round meets a cold server, so the
            # side that goes first alternates and only first (cold) requests are kept.
            ours_first = not args.fresh or i % 2 == 0
            if ours_first:
                a = run_ours()
                b = run_bare()
            else:
                b = run_bare()
                a = run_ours()
            if i < 5:  # warm-up
                continue
            if not args.fresh:
                ours.append(a)
                theirs.append(b)
            elif ours_first:
                ours.append(a)
            else:
                theirs.append(b)
        client.close()
        http.close()
    m_ours = statistics.median(ours)
    m_theirs = statistics.median(theirs)
    kind = "a new prompt each round" if args.fresh else "one repeated prompt"
    print(f"streamed {args.max_tokens}-token request, {args.rounds} interleaved rounds, {kind}")
    print(f"  bare httpx loop : median {m_theirs * 1000:7.2f} ms")
    print(f"  DDTreeClient    : median {m_ours * 1000:7.2f} ms")
    print(
        f"  overhead        : {100 * (m_ours / m_theirs - 1):+.1f}% "
        f"({(m_ours - m_theirs) * 1000:+.2f} ms per request; target <= +5%)"
    )


if __name__ == "__main__":
    main()
