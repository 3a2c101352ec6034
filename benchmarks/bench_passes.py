"""Do benchmark tests decide the budget when they race in passes over the prompts?

    python benchmarks/bench_passes.py [--runs 200] [--jitter 0.01] [--test-jitter 0.01]

The bundled suite's timed sweep as pytest collects it: one ``ddtree_benchmark`` test per
sweep prompt, budget and pass (``--ddtree-sweep-passes``), each of 3 timed rounds, visited
pass by pass and prompt by prompt and raced by the plugin's own
:class:`~pytest_ddtree.measure.sweep.benchrace.BenchRace`. The decode rates are the
reference server's model and cost model in virtual time (as in ``bench_race.py``),
times a factor each test shares (``--test-jitter``: the conditions of one test, back to
back) and one each request has (``--jitter``). For each number of passes: how often the
race recommends the right budget (the smallest within the margin of the truly best),
ends undecided or names another, how many of the collected tests ran, and, with two
budgets of the same truth, how often one is called slower than the other.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_race import BUDGETS, World, prompt_costs, right_answer

from pytest_ddtree.measure.sweep.benchrace import BenchRace
from pytest_ddtree.measure.sweep.race import RaceRule
from pytest_ddtree.reference.cost import jitter_factor

REPS = 3  # the suite's --ddtree-rounds


def race(
    costs: dict[tuple[str, int], tuple[int, float]],
    arms: dict[int, int],
    passes: int,
    run: int,
    jitter: float,
    test_jitter: float,
) -> tuple[BenchRace, int]:
    """One run: ``arms`` (key -> budget) raced over ``passes``; (the race, tests run)."""
    prompts = sorted({p for p, _ in costs})
    bench = BenchRace.of(sorted(arms), RaceRule(), REPS)
    ran = 0
    for pass_ in range(1, passes + 1):
        for i, prompt in enumerate(prompts):
            for key in sorted(arms):
                if bench.admit(prompt, key, pass_) is not None:
                    continue
                ran += 1
                tokens, seconds = costs[prompt, arms[key]]
                cell = (key * 1000 + pass_) * 100 + i
                test = jitter_factor(test_jitter, run, -cell - 1)
                for rep in range(REPS):
                    noise = test * jitter_factor(jitter, run, cell * 10 + rep + 1)
                    bench.race.add(key, tokens / (seconds * noise), prompt)
    bench.race.finish()
    return bench, ran


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--jitter", type=float, default=0.01)
    parser.add_argument("--test-jitter", type=float, default=0.01)
    parser.add_argument("--passes", default="1,2,3,4,6")
    args = parser.parse_args()
    costs = prompt_costs(BUDGETS)
    prompts = sorted({p for p, _ in costs})
    truth = right_answer(World(costs, tuple(prompts), args.jitter), BUDGETS, 0.02)
    print(
        f"{args.runs} runs, budgets {','.join(map(str, BUDGETS))}, {len(prompts)} prompts, "
        f"{REPS} timed rounds a test, request jitter {args.jitter:.0%}, test jitter "
        f"{args.test_jitter:.0%}; right answer {truth}"
    )
    print("passes  right  undecided  other  tests run median/max of collected  equal called apart")
    for passes in (int(x) for x in args.passes.split(",")):
        right = undecided = other = apart = 0
        ran: list[int] = []
        for run in range(args.runs):
            bench, n = race(costs, {b: b for b in BUDGETS}, passes, run, *vars_of(args))
            j = bench.race.judgement()
            ran.append(n)
            if not j.decided:
                undecided += 1
            elif j.recommended == truth:
                right += 1
            else:
                other += 1
            eq, _ = race(costs, {0: 64, 1: 64}, passes, 10_000 + run, *vars_of(args))
            apart += any(s.status == "out" for s in eq.race.judgement().standings)
        r = args.runs
        collected = passes * len(prompts) * len(BUDGETS)
        print(
            f"{passes:>6}  {right / r:5.1%}  {undecided / r:9.1%}  {other / r:5.1%}  "
            f"{statistics.median(ran):>9.0f}/{max(ran)} of {collected:<14}  {apart / r:5.1%}"
        )


def vars_of(args: argparse.Namespace) -> tuple[float, float]:
    return args.jitter, args.test_jitter


if __name__ == "__main__":
    main()
