"""Does racing the budgets keep the exhaustive sweep's answer at half its requests?

    python benchmarks/bench_race.py [--runs 200] [--jitter 0.05] [--block-jitter 0.03]

The reference server's own model and cost model run in-process in *virtual
time*: for each sweep prompt of the bundled suite and each budget, the model
generates the answer at temperature 0 exactly as the server does, and the cost
model prices every decode round (drafter pass plus verification of the tree)
exactly as the server sleeps it. Each request's decode rate is its decode
tokens over those seconds times the server's jitter factor
(:func:`~pytest_ddtree.reference.cost.jitter_factor`, lognormal with the given
coefficient of variation). Nothing sleeps, so 200 runs take seconds; the
jitter factor of a request is drawn from (run, budget, round, prompt), so the
adaptive race and the exhaustive sweep it is compared with see the very same
requests (a paired comparison). The truth is the noiseless table.

Four figures per method, over ``--runs`` seeded runs at budgets 16..1024:

- ``same as exhaustive``: the adaptive race recommends what an exhaustive
  sweep judged by the same rule recommends at the same per-budget n (the n the
  race's leader reached); ``requests`` is the race's share of that sweep's;
- ``right``: the recommendation is the truth's (the smallest budget within the
  margin of the truly best), ``undecided`` no recommendation;
- ``false faster``: two arms with *the same* truth (budget 64 twice) are raced
  (or swept); how often one is claimed faster than the other;
- ``1% faster``: the same pair with the second arm 1% faster, inside the margin:
  how often a race still calls one faster, and how often the old rule said
  "significantly faster" (a 1% win is no reason to deploy a bigger tree).

``--block-jitter`` adds noise shared by a block: one factor per visit of a budget
in a round (all its prompts, back to back), on top of the per-request jitter. The
last table always runs: two equal arms under shared block noise in the three shapes
a race meets - a benchmark race (one pytest-benchmark test per prompt and budget,
its timed rounds back to back), ``ddtree_sweep`` (a round visits every budget, each
with all prompts) and a load race (a run of C requests, each prompt twice in a
row) - and how often one is called "out" (it should stay near or below the
confidence's error rate). The race's unit is the block (its round), so shared block
noise is in its interval.

``old rule`` is the recommendation as it was before racing (the best median,
"significantly faster than every other valid budget" when a 95% bootstrap of
each median difference excludes zero), at 3 prompts x 3 rounds, kept here for
the comparison.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_ddtree.core.prompts import load_prompts
from pytest_ddtree.measure.sweep.adaptive import AUTO_ROUNDS
from pytest_ddtree.measure.sweep.race import Judgement, Race, RaceRule, judge
from pytest_ddtree.measure.sweep.statistics import bootstrap_median_difference
from pytest_ddtree.reference.cost import CostModel, jitter_factor
from pytest_ddtree.reference.model import get_model

BUDGETS = (16, 32, 64, 128, 256, 512, 1024)
SUITE = Path(__file__).resolve().parents[1] / "pytest_ddtree" / "suite"
MAX_TOKENS = 96  # the bundled suite's ddtree_max_tokens
BLOCK = 16


def prompt_costs(budgets: Sequence[int]) -> dict[tuple[str, int], tuple[int, float]]:
    """(prompt id, budget) -> (decode tokens, decode seconds) on the reference server."""
    model, cost = get_model(), CostModel()
    out: dict[tuple[str, int], tuple[int, float]] = {}
    for prompt in load_prompts(str(SUITE / "prompts.json")).sweep_prompts():
        text = prompt.messages if isinstance(prompt.messages, str) else prompt.messages[-1]
        text = text if isinstance(text, str) else str(text["content"])
        rendered = model.render_chat([("user", text)], False)
        plan = model.plan(text, rendered)
        for budget in budgets:
            tokens = produced = 0
            seconds = 0.0
            for i, rd in enumerate(model.generate(plan, MAX_TOKENS, budget, BLOCK)):
                take = min(len(rd.tokens), MAX_TOKENS - produced)
                if rd.tokens[take - 1 : take] == [model.eos]:
                    take -= 1
                produced += take
                if i:  # the first round's time is TTFT, as the client's decode rate has it
                    tokens += take
                    seconds += cost.draft_seconds() + cost.verify_seconds(rd.nodes)
            out[prompt.id, budget] = (tokens, seconds)
    return out


@dataclass
class World:
    """Virtual-time requests: ``rate(run, arm, round, prompt)``, the same for every method."""

    costs: dict[tuple[str, int], tuple[int, float]]
    prompts: tuple[str, ...]
    jitter: float
    #: coefficient of variation of a factor shared by one visit (run, arm, round)
    block: float = 0.0
    #: arm -> speed factor (an arm made a little faster than its budget is)
    boost: dict[int, float] = field(default_factory=dict)

    def rate(self, run: int, arm: int, budget: int, rnd: int, prompt: int) -> float:
        tokens, seconds = self.costs[self.prompts[prompt], budget]
        ordinal = ((arm * 1000 + rnd) * 100 + prompt) + 1
        noise = jitter_factor(self.jitter, run, ordinal)
        noise *= jitter_factor(self.block, run, -(arm * 1000 + rnd) - 1)  # the visit's own
        return self.boost.get(arm, 1.0) * tokens / (seconds * noise)

    def truth(self, budget: int) -> float:
        """The noiseless pooled median rate (one value a prompt)."""
        return statistics.median(
            self.costs[p, budget][0] / self.costs[p, budget][1] for p in self.prompts
        )


def right_answer(world: World, budgets: Sequence[int], margin: float) -> int:
    best = max(world.truth(b) for b in budgets)
    return min(b for b in budgets if world.truth(b) >= best * (1 - margin))


def run_race(world: World, arms: dict[int, int], rule: RaceRule, run: int) -> Race[int]:
    """Race ``arms`` (key -> budget), each round in the sweep's seeded shuffled order."""
    race: Race[int] = Race(arms, rule, per_lap=len(world.prompts), seed=run)
    rnd = 0
    while keys := race.next_lap():
        order = list(keys)
        random.Random(f"ddtree-sweep:{run}:{rnd}").shuffle(order)
        for key in order:
            for p in range(len(world.prompts)):
                race.add(key, world.rate(run, key, arms[key], rnd, p), world.prompts[p])
        rnd += 1
    return race


def sweep(
    world: World, arms: dict[int, int], rounds: int, run: int
) -> dict[int, list[tuple[float, str, int]]]:
    """Every arm's requests of ``rounds`` exhaustive rounds: (rate, prompt, round)."""
    return {
        key: [
            (world.rate(run, key, budget, r, p), world.prompts[p], r)
            for r in range(rounds)
            for p in range(len(world.prompts))
        ]
        for key, budget in arms.items()
    }


def old_rule(samples: dict[int, list[tuple[float, str, int]]], seed: int) -> tuple[int, bool]:
    """The recommendation before racing: (best median, "significantly faster" claimed)."""
    med = {k: statistics.median(v for v, *_ in vs) for k, vs in samples.items()}
    best = max(med, key=lambda k: (med[k], -k))
    tied = False
    for other in samples:
        if other == best:
            continue
        diff = bootstrap_median_difference(
            [x[0] for x in samples[other]],
            [x[0] for x in samples[best]],
            seed=seed,
            salt=f"{best}-{other}",
            strata_a=[x[1] for x in samples[other]],
            strata_b=[x[1] for x in samples[best]],
        )
        if diff is None or diff[1] <= 0.0:
            tied = True
    return best, not tied and len(samples) > 1


def claims_faster(j: Judgement[int]) -> bool:
    return any(s.status == "out" for s in j.standings)


def pct(x: float) -> str:
    return f"{100 * x:5.1f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--jitter", type=float, default=0.05)
    parser.add_argument(
        "--block-jitter",
        type=float,
        default=0.0,
        help="CV of a factor shared by one visit of a budget in a round (default 0)",
    )
    parser.add_argument("--margin", type=float, default=0.02)
    parser.add_argument("--confidence", type=float, default=RaceRule().confidence)
    parser.add_argument("--min-n", type=int, default=RaceRule().min_n)
    parser.add_argument(
        "--max-rounds",
        type=int,
        default=AUTO_ROUNDS,
        help="the race's request budget, in exhaustive rounds (default: the plugin's auto)",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    costs = prompt_costs(BUDGETS)
    prompts = tuple(dict.fromkeys(p for p, _ in costs))
    world = World(costs, prompts, args.jitter, args.block_jitter)
    cap = args.max_rounds * len(BUDGETS) * len(prompts)  # auto_requests() at the default
    rule = RaceRule(args.margin, args.min_n, args.confidence, max_requests=cap)
    truth = right_answer(world, BUDGETS, args.margin)
    print(
        f"{args.runs} runs, budgets {','.join(map(str, BUDGETS))}, {len(prompts)} prompts, "
        f"jitter CV {args.jitter:.0%}, block jitter CV {args.block_jitter:.0%}, "
        f"margin {args.margin:.0%}, confidence {args.confidence:.0%}"
        f" over all looks, min n {args.min_n}, request budget {cap}"
    )
    print(
        "truth (noiseless median decode tok/s): "
        + ", ".join(f"{b}: {world.truth(b):,.0f}" for b in BUDGETS)
        + f" -> right answer {truth}"
    )
    arms = {b: b for b in BUDGETS}
    same = right = undecided = ex_right = ex_undecided = old_right = 0
    old_claims = short_right = short_undecided = 0
    shares: list[float] = []
    used: list[int] = []
    ex_used: list[int] = []
    for run in range(args.runs):
        race = run_race(world, arms, rule, run)
        j = race.judgement()
        n_max = max(s.n for s in j.standings)
        ex = judge(sweep(world, arms, n_max // len(prompts), run), rule)
        same += j.recommended == ex.recommended
        right += j.recommended == truth
        undecided += not j.decided
        ex_right += ex.recommended == truth
        ex_undecided += not ex.decided
        shares.append(race.requests / (n_max * len(BUDGETS)))
        used.append(race.requests)
        ex_used.append(n_max * len(BUDGETS))
        best, claim = old_rule(sweep(world, arms, 3, run), run)
        short = judge(sweep(world, arms, 3, run), rule)
        short_right += short.recommended == truth
        short_undecided += not short.decided
        old_right += best == truth
        old_claims += claim
    equal = {0: 64, 1: 64}
    race_false = ex_false = old_false = 0
    for run in range(args.runs):
        race = run_race(world, equal, rule, 10_000 + run)
        race_false += claims_faster(race.judgement())
        ex_false += claims_faster(judge(sweep(world, equal, 3, 10_000 + run), rule))
        old_false += old_rule(sweep(world, equal, 3, 10_000 + run), run)[1]
    near_old = near_race = near_small = 0
    for run in range(args.runs):
        world_near = World(world.costs, world.prompts, world.jitter, world.block, {1: 1.01})
        race = run_race(world_near, equal, rule, 20_000 + run)
        j = race.judgement()
        near_race += claims_faster(j)
        near_small += j.recommended == 0
        near_old += old_rule(sweep(world_near, equal, 3, 20_000 + run), run)[1]
    r = args.runs
    print(
        f"adaptive: same as exhaustive at the same n {pct(same / r)}; right {pct(right / r)}; "
        f"undecided {pct(undecided / r)}"
    )
    half = sum(x <= 0.5 for x in shares) / r
    print(
        f"          requests: median {statistics.median(used):.0f}, max {max(used)}; share of "
        f"the exhaustive sweep's at the same n: {pct(sum(used) / sum(ex_used))} in all, "
        f"median {pct(statistics.median(shares))}, at most half in {pct(half)} of runs"
    )
    print(
        f"          exhaustive at that n by the same rule: right {pct(ex_right / r)}, "
        f"undecided {pct(ex_undecided / r)}"
    )
    print(
        f"          exhaustive at 3 prompts x 3 rounds by the same rule: right "
        f"{pct(short_right / r)}, undecided {pct(short_undecided / r)}"
    )
    print(
        f"          false faster (two equal arms): race {pct(race_false / r)}, "
        f"exhaustive 3x3 by the same rule {pct(ex_false / r)}"
    )
    print(
        f"old rule at 3 prompts x 3 rounds ({3 * len(prompts) * len(BUDGETS)} requests): "
        f'right {pct(old_right / r)}, "significantly faster" claimed {pct(old_claims / r)}, '
        f"false faster (two equal arms) {pct(old_false / r)}"
    )
    print(
        f"one arm truly 1% faster (inside the margin): race calls it faster "
        f"{pct(near_race / r)}, recommends the smaller as fast {pct(near_small / r)}; "
        f'old rule "significantly faster" {pct(near_old / r)}'
    )
    block_table(args.runs, rule)
    print(f"({time.perf_counter() - started:.1f} s)")


def equal_arms_out(shape: str, block: float, within: float, seed: int, rule: RaceRule) -> bool:
    """Two equal arms raced under shared block noise (lognormal SDs of the logs): is one
    called "out"? The shapes are the three drivers' ways of feeding a race."""
    rng = random.Random(f"blocks:{shape}:{seed}")
    prompts, per_lap = ("a", "b", "c", "d", "e", "f"), 3  # benchmark: tests of 3 rounds
    if shape == "sweep":
        prompts, per_lap = ("a", "b", "c"), 3
    elif shape == "load":
        per_lap = 4  # a run at C=4, each prompt twice in a row
    cap = {"benchmark": None, "sweep": 30 * 2 * 3, "load": 2 * 32}[shape]
    # every shape races the decode rate (higher is better), the load race as the others
    rule = RaceRule(rule.equivalence, rule.min_n, rule.confidence, max_requests=cap)
    race: Race[int] = Race([16, 64], rule, per_lap=per_lap)
    sent = dict.fromkeys((16, 64), 0)
    rnd = 0
    while keys := race.next_lap():
        for key in keys:
            shared = rng.gauss(0, block)  # the block's own conditions
            for i in range(per_lap):
                if shape == "benchmark":
                    p = prompts[rnd % len(prompts)]  # one test: one prompt, rounds back to back
                elif shape == "sweep":
                    p = prompts[i]  # a visit: every prompt once
                else:
                    p = f"p{((sent[key] + i) // 2) % 3}"
                race.add(key, 1000 * math.exp(shared + rng.gauss(0, within)), p)
            sent[key] += per_lap
        rnd += 1
        if shape == "benchmark" and rnd >= len(prompts):
            break  # the benchmark tests are spent: one pass over the prompts
    return claims_faster(race.finish())


def block_table(runs: int, rule: RaceRule) -> None:
    """The false "out" rate of two equal arms under shared block noise, per shape."""
    print('two equal arms, shared block noise: one called "out" in')
    cases = [
        ("benchmark", 0.03, 0.01),
        ("benchmark", 0.05, 0.01),
        ("load", 0.03, 0.01),
        ("load", 0.05, 0.02),
        ("sweep", 0.03, 0.01),
        ("sweep", 0.0, 0.05),
    ]
    for shape, block, within in cases:
        out = sum(equal_arms_out(shape, block, within, s, rule) for s in range(runs))
        print(
            f"          {shape:9} block SD {block:.0%}, request SD {within:.0%}: {pct(out / runs)}"
        )


if __name__ == "__main__":
    main()
