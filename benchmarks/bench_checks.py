"""How long do all the invariants take on one 1,024-token completion?

Target: under 1 ms median for ``check(completion, counter=...)``.

    python benchmarks/bench_checks.py [--rounds 2000]

Fetches real 1,024-token completions (streamed, about 300 chunks, and not) from
the embedded reference server with simulated latency off, and one that loops until
``max_tokens`` (its ``degenerate`` fault, the path where ``degenerate`` measures the
loop and builds its evidence), then times ``check`` in-process. "warm" is what the
plugin does: the client already counted the text
with the same counter, whose cache then answers. "cold" empties the counter's
cache before every call, so the tokenizer runs each time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from pytest_ddtree.checks.invariants import check
from pytest_ddtree.reference import start_reference_server, tokenizer_path
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion
from pytest_ddtree.wire.tokens import _LRU, TokenizerCounter

PROMPT = "Write a long essay about the history of bridges, with many details."


def timed(fn: Callable[[], object], rounds: int) -> list[float]:
    """Per-call wall times in microseconds."""
    for _ in range(min(50, rounds)):
        fn()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def report(label: str, samples: list[float]) -> None:
    samples = sorted(samples)
    p90 = samples[int(0.9 * (len(samples) - 1))]
    print(
        f"{label:44s} median {statistics.median(samples):8.1f} us   p90 {p90:8.1f} us   "
        f"min {samples[0]:8.1f} us   (n={len(samples)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    counter = TokenizerCounter(tokenizer_path())
    server = start_reference_server(simulated_latency=False)
    looping = start_reference_server(simulated_latency=False, faults=("degenerate",))
    try:
        with DDTreeClient(server.base_url, counter=counter) as client:
            runs: dict[str, Completion] = {
                "stream": client.chat(PROMPT, max_tokens=1024, tree_budget=64, stream=True),
                "no-stream": client.chat(PROMPT, max_tokens=1024, tree_budget=64, stream=False),
            }
        with DDTreeClient(looping.base_url, counter=counter) as client:
            # a loop until max_tokens: the violation path, where the loop is measured
            runs["loop, no-stream"] = client.chat(
                PROMPT, max_tokens=1024, tree_budget=64, stream=False
            )
    finally:
        server.stop()
        looping.stop()
    for mode, c in runs.items():
        chunks = len(c.raw) if isinstance(c.raw, list) else 1
        print(
            f"{mode}: {c.completion_tokens} tokens, {len(c.text)} chars, {chunks} chunk(s), "
            f"violations: {[v.code for v in check(c, counter=counter)]}"
        )
    for mode, c in runs.items():

        def cold(c: Completion = c) -> None:
            counter._cache = _LRU()
            check(c, counter=counter)

        report(
            f"check, {mode}, counter warm",
            timed(lambda c=c: check(c, counter=counter), args.rounds),
        )
        report(f"check, {mode}, counter cold", timed(cold, max(200, args.rounds // 5)))
        report(f"check, {mode}, no counter", timed(lambda c=c: check(c), args.rounds))


if __name__ == "__main__":
    main()
