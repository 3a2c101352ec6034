"""How far the two former decode-rate formulas differ on the same streamed completions.

The sweep divided the tokens after the first content event by the span from the first
to the last content event; the load took ``(e2e - TTFT) / (output tokens - 1)`` (its
TPOT). Both are computed here, beside the one formula that replaced them
(``wire.completion.decode_rate``), from each completion of one endpoint, with its
``/tokenize`` counting the first event's tokens, and the relative difference of the
rates they imply is printed, per request and as a median.

    python -m pytest_ddtree.engines --speculation ngram --threads 1 --port 0 &
    PYTHONPATH=. python benchmarks/bench_decode_formula.py --base-url http://127.0.0.1:PORT/v1
"""

from __future__ import annotations

import argparse
import statistics

from pytest_ddtree.wire.client import DDTreeClient, root_url
from pytest_ddtree.wire.completion import Completion
from pytest_ddtree.wire.tokens import ServerCounter

PROMPTS = (
    "Count from one to forty in words, separated by commas.",
    "Repeat the sentence 'the cat sat on the mat' ten times.",
    "List the days of the week, then list them again backwards.",
    "Write the alphabet in capital letters, one letter per line.",
    "Explain in three sentences what a hash table is.",
)


def span_rate(c: Completion) -> float | None:
    """The sweep's former formula: tokens after the first event over the events' span."""
    n, times = c.completion_tokens, c.timings.chunk_times
    if n is None or len(times) < 2 or times[-1] <= times[0]:
        return None
    return (n - c.timings.first_event_tokens) / (times[-1] - times[0])


def tpot_rate(c: Completion) -> float | None:
    """The load's former formula, as a rate: ``(n - 1) / (e2e - TTFT)``."""
    n, ttft = c.completion_tokens, c.ttft
    if n is None or n < 2 or ttft is None or c.end_to_end <= ttft:
        return None
    return (n - 1) / (c.end_to_end - ttft)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    client = DDTreeClient(args.base_url, budget_mode="none", dialect="llamacpp")
    client.counter = ServerCounter(root_url(args.base_url), client.http, shape="llamacpp")
    diffs: list[float] = []
    with client:
        for i in range(args.requests):
            c = client.chat(
                [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
                max_tokens=args.max_tokens,
                temperature=0,
                stream=True,
            )
            span, tpot, now = span_rate(c), tpot_rate(c), c.decode_tokens_per_second
            first = c.timings.first_chunk_tokens
            line = f"{i}: tokens {c.completion_tokens} events {len(c.timings.chunk_times)}"
            tail = c.timings.done - c.timings.chunk_times[-1]
            line += f" first-event tokens {first} tail {tail:.4f}s"
            if span is None or tpot is None:
                print(line + "  (no rate)")
                continue
            diffs.append(tpot / span - 1)
            print(f"{line}  span {span:.1f} tok/s  tpot {tpot:.1f} tok/s  {diffs[-1]:+.2%}")
            if now is not None:
                print(f"    the one formula now: {now:.1f} tok/s")
    if diffs:
        print(
            f"median relative difference (tpot-implied over span rate): "
            f"{statistics.median(diffs):+.2%} over {len(diffs)} requests "
            f"(min {min(diffs):+.2%}, max {max(diffs):+.2%})"
        )


if __name__ == "__main__":
    main()
