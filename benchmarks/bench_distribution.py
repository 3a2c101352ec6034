"""False alarms and power of the losslessness-in-distribution test (``ddtree_distribution``).

    python benchmarks/bench_distribution.py [--reps 200] [--samples 40] [--max-tokens 96]
        [--budget 1024] [--temperature 0.7] [--http-reps 20] [--engine-reps 0]

Each repetition samples N answers from "the server" and N from the target-only baseline,
each with its own seed (new seeds every repetition), and runs the test at alpha 0.05 as
the fixture does. The healthy server's rejection rate is the false-alarm rate; the rate on
the ``draft-confidence`` fault (a verifier that accepts a drafted token whenever the
drafter gives it probability 0.5 or more) is the power. Repetitions cycle through the
suite's three sweep prompts (long prose).

The bulk runs the reference model in-process (the same model and decoding loop the server
runs, without HTTP); ``--http-reps`` repetitions then go through the real HTTP servers (the
embedded server and its target-only twin, as child processes) via ``run_distribution``.
``--engine-reps`` repetitions compare llama.cpp with draft-model speculation against its
target-only twin (SmolLM2-135M, one thread each; ``--engine-samples`` answers of
``--engine-max-tokens`` tokens per side): their false-alarm count and p-values.
Seeded: the same arguments print the same figures.
"""

from __future__ import annotations

import argparse
import math
import time

from pytest_ddtree.checks.distribution import (
    DEFAULT_ALPHA,
    compare_answers,
    request_seeds,
    run_distribution,
)
from pytest_ddtree.reference.model import ReferenceModel, get_model

PROMPTS = (
    "Write a long essay about rivers and the valleys they shape.",
    "Write a detailed story about a train crossing the mountains at night.",
    "Explain in detail how a web server handles a user login, from the request to the response.",
)
FAULT = "draft-confidence"


def _answer(
    model: ReferenceModel,
    prompt: str,
    seed: int,
    args: argparse.Namespace,
    budget: int | None,
    faults: frozenset[str] = frozenset(),
) -> str:
    """The content the reference server would send for this request (thinking off)."""
    rendered = ReferenceModel.render_chat([("user", prompt)], False)
    plan = model.plan(prompt, rendered, temperature=args.temperature, seed=seed, faults=faults)
    tokens: list[int] = []
    for rd in model.generate(plan, args.max_tokens, budget):
        tokens.extend(rd.tokens)
        if model.eos in tokens:
            tokens = tokens[: tokens.index(model.eos)]
            break
        if len(tokens) >= args.max_tokens:
            tokens = tokens[: args.max_tokens]
            break
    return model.decode(tokens)


def _interval(hits: int, n: int) -> str:
    """The rate with its Wilson 95% interval."""
    if n == 0:
        return "-"
    z, p = 1.96, hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{hits}/{n} = {p:.1%} [95% CI {max(0, centre - half):.1%}, {centre + half:.1%}]"


def in_process(args: argparse.Namespace) -> None:
    model = get_model()
    n = args.samples
    rejected = {"healthy": 0, FAULT: 0}
    start = time.perf_counter()
    for rep in range(args.reps):
        prompt = PROMPTS[rep % len(PROMPTS)]
        seeds = request_seeds(1 + rep, 2 * n)  # fresh seeds every repetition, as the fixture's
        baseline = [_answer(model, prompt, s, args, None) for s in seeds[n:]]
        for name, faults in (("healthy", frozenset()), (FAULT, frozenset({FAULT}))):
            ours = [_answer(model, prompt, s, args, args.budget, faults) for s in seeds[:n]]
            result = compare_answers(ours, baseline, seed=rep)
            rejected[name] += result.differs
    took = time.perf_counter() - start
    print(
        f"in-process, {args.reps} repetitions, N = {n} per side, max_tokens {args.max_tokens}, "
        f"tree_budget {args.budget}, temperature {args.temperature:g}, alpha {DEFAULT_ALPHA} "
        f"({took:.0f} s)"
    )
    print(f"  false alarms (healthy): {_interval(rejected['healthy'], args.reps)}")
    print(f"  power ({FAULT}):  {_interval(rejected[FAULT], args.reps)}")


def over_http(args: argparse.Namespace) -> None:
    from pytest_ddtree.reference import spawn_reference_server
    from pytest_ddtree.wire.client import DDTreeClient

    main = spawn_reference_server(simulated_latency=False)
    twin = spawn_reference_server(simulated_latency=False, target_only=True)
    client = DDTreeClient(main.base_url, model="ddtree-reference")
    baseline = DDTreeClient(twin.base_url, model="ddtree-reference", budget_mode="none")
    n = args.samples
    rejected = {"healthy": 0, FAULT: 0}
    p_values: dict[str, list[float]] = {"healthy": [], FAULT: []}
    start = time.perf_counter()
    try:
        for rep in range(args.http_reps):
            prompt = PROMPTS[rep % len(PROMPTS)]
            for name, headers in (("healthy", {}), (FAULT, {"X-DDTree-Fault": FAULT})):
                res = run_distribution(
                    client,
                    baseline,
                    prompt,
                    temperature=args.temperature,
                    samples=n,
                    alpha=DEFAULT_ALPHA,
                    max_tokens=args.max_tokens,
                    seed=1_000_000 + rep,
                    tree_budget=args.budget,
                    headers=headers,
                )
                if res.result is None:
                    raise SystemExit(f"repetition {rep} ({name}): {res.not_comparable}")
                rejected[name] += res.result.differs
                p_values[name].append(res.result.p_value)
    finally:
        client.close()
        baseline.close()
        main.stop()
        twin.stop()
    took = time.perf_counter() - start
    print(
        f"over HTTP (embedded server and its target-only twin), {args.http_reps} repetitions "
        f"({took:.0f} s)"
    )
    for name in ("healthy", FAULT):
        shown = " ".join(f"{p:.3f}" for p in p_values[name])
        label = "false alarms (healthy)" if name == "healthy" else f"power ({FAULT})"
        print(f"  {label}: {_interval(rejected[name], args.http_reps)}; p-values: {shown}")


def on_llamacpp(args: argparse.Namespace) -> None:
    import httpx

    from pytest_ddtree import engines
    from pytest_ddtree.wire.client import DDTreeClient
    from pytest_ddtree.wire.tokens import ServerCounter

    if (why := engines.missing()) is not None:
        raise SystemExit(why)
    draft = engines.start_llamacpp(speculation="draft")
    target = engines.start_llamacpp(speculation="none")
    http = httpx.Client(timeout=60)

    def client(server: engines.LlamaCppServer) -> DDTreeClient:
        counter = ServerCounter(server.root_url, http, shape="llamacpp")
        return DDTreeClient(
            server.base_url, model=server.model, budget_mode="none", counter=counter
        )

    ours, theirs = client(draft), client(target)
    p_values: list[float] = []
    start = time.perf_counter()
    try:
        for rep in range(args.engine_reps):
            res = run_distribution(
                ours,
                theirs,
                "Describe how bread is baked in a small kitchen.",
                temperature=args.temperature,
                samples=args.engine_samples,
                alpha=DEFAULT_ALPHA,
                max_tokens=args.engine_max_tokens,
                seed=1 + rep,
            )
            if res.result is None:
                raise SystemExit(f"repetition {rep}: {res.not_comparable}")
            p_values.append(res.result.p_value)
    finally:
        ours.close()
        theirs.close()
        http.close()
        draft.stop()
        target.stop()
    took = time.perf_counter() - start
    alarms = sum(p <= DEFAULT_ALPHA for p in p_values)
    print(
        f"llama.cpp draft speculation vs target-only, {args.engine_reps} repetitions, "
        f"N = {args.engine_samples}, max_tokens {args.engine_max_tokens} ({took:.0f} s)"
    )
    shown = " ".join(f"{p:.3f}" for p in p_values)
    print(f"  false alarms: {_interval(alarms, len(p_values))}; p-values: {shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--budget", type=int, default=1024)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--http-reps", type=int, default=20)
    parser.add_argument("--engine-reps", type=int, default=0)
    parser.add_argument("--engine-samples", type=int, default=24)
    parser.add_argument("--engine-max-tokens", type=int, default=40)
    args = parser.parse_args()
    if args.reps:
        in_process(args)
    if args.http_reps:
        over_http(args)
    if args.engine_reps:
        on_llamacpp(args)


if __name__ == "__main__":
    main()
