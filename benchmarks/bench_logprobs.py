"""How far apart are a speculative engine's log-probabilities and its target-only twin's?

    python benchmarks/bench_logprobs.py --engine llamacpp [--prompts 6] [--max-tokens 96]
    python benchmarks/bench_logprobs.py --engine vllm     (DDTREE_VLLM_PYTHON, DDTREE_ENGINE_CACHE)
    python benchmarks/bench_logprobs.py --engine sglang   (target only: SGLang's n-gram needs CUDA)

Starts the engine target-only, asks each of the bundled suite's first prompts at temperature
0 for its log-probabilities (chat, ``logprobs: true``, ``top_logprobs: 2``; streamed and not),
stops it, then does the same with n-gram speculation. For each answer it prints the entries
against ``usage.completion_tokens`` and the finish reason, the ``logprobs`` check's findings,
and, per prompt, the speculative answer's agreement with the target-only one
(``lossless.logprob_agreement``: positions compared, max |delta logprob|). One engine runs at
a time, on 127.0.0.1.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_ddtree import engines
from pytest_ddtree.checks.invariants import check
from pytest_ddtree.checks.lossless import logprob_agreement
from pytest_ddtree.core.prompts import load_prompts
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion

PROMPTS = Path(__file__).resolve().parents[1] / "pytest_ddtree" / "suite" / "prompts.json"
ASKED = {"logprobs": True, "top_logprobs": 2}


def _starter(engine: str, speculation: str) -> Callable[[], Any]:
    if engine == "llamacpp":
        return lambda: engines.start_llamacpp(speculation=speculation)  # type: ignore[arg-type]
    if engine == "vllm":
        return lambda: engines.start_vllm(speculation=speculation)  # type: ignore[arg-type]
    return lambda: engines.start_sglang()


def _collect(
    server: Any, prompts: list[Any], max_tokens: int
) -> dict[tuple[str, bool], Completion]:
    out: dict[tuple[str, bool], Completion] = {}
    with DDTreeClient(server.base_url, model=server.model, budget_mode="none") as client:
        for p in prompts:
            for stream in (False, True):
                c = client.request(
                    p.messages, max_tokens=max_tokens, temperature=0.0, stream=stream, **ASKED
                )
                out[(p.id, stream)] = c
    return out


def _line(label: str, key: tuple[str, bool], c: Completion) -> str:
    n = len(c.logprobs or ())
    used = c.usage.completion_tokens if c.usage else None
    found = [f"[{v.code}] {v.message}" for v in check(c, min_tokens=0) if v.code == "logprobs"]
    zeros = sum(1 for e in c.logprobs or () if e.logprob == 0.0)
    mode = "stream" if key[1] else "plain"
    return (
        f"{label:7} {key[0]:16} {mode:6} entries={n:3} completion_tokens={used} "
        f"finish={c.finish_reason} zeros={zeros} logprobs-check={found or 'pass'}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=("llamacpp", "vllm", "sglang"), default="llamacpp")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=96)
    args = ap.parse_args()
    prompts = [p for p in load_prompts(PROMPTS).prompts if not p.conversation][: args.prompts]
    runs: dict[str, dict[tuple[str, bool], Completion]] = {}
    kinds = ("none",) if args.engine == "sglang" else ("none", "ngram")
    for kind in kinds:
        server = _starter(args.engine, kind)()
        try:
            runs[kind] = _collect(server, prompts, args.max_tokens)
        finally:
            server.stop()
        for key, c in runs[kind].items():
            print(_line("target" if kind == "none" else kind, key, c))
    if "ngram" not in runs:
        return
    worst = 0.0
    for key, spec in runs["ngram"].items():
        agree = logprob_agreement(runs["none"][key], spec)
        if agree is None:
            print(f"agree   {key[0]:16} {'stream' if key[1] else 'plain':6} no logprobs")
            continue
        worst = max(worst, agree.delta)
        mode = "stream" if key[1] else "plain"
        print(
            f"agree   {key[0]:16} {mode:6} positions={agree.positions:3} "
            f"max|dlogprob|={agree.delta:.3g} at token {agree.position} ({agree.token!r})"
        )
    print(f"{args.engine}: max |delta logprob| over every compared position: {worst:.3g}")


if __name__ == "__main__":
    main()
