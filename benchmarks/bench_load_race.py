"""The raced load grid against the exhaustive one: requests spent and the choice per point.

    python benchmarks/bench_load_race.py [--seeds 0,1,2] [--jitter 0.05] [--json out.json]

One embedded reference server (simulated accelerator on, seeded ``--jitter`` on each
request's costs) in a subprocess; for each seed the same ``LoadTester`` call runs the
budget x concurrency grid twice, exhaustive and adaptive (``--ddtree-sweep adaptive``),
in alternating order so slow drift of the shared machine favours neither. Printed side
by side per seed and load point:

- ``full``: the exhaustive grid's choice (the best median TPOT, as today);
- ``full/rule``: the same exhaustive samples judged by the race's rule (the smallest
  budget within the margin of the leader; ``?32/64`` undecided between those), which
  is what the race should reproduce;
- ``raced``: the adaptive grid's choice, and the requests each spent at the point;
- ``optimum``: the cost model's computed best budget at that concurrency.

Every request of both grids is validated; an invalid request is printed and its budget
is left out at that point, as in a test (which would fail).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

from pytest_ddtree.checks.invariants import check
from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.measure.load import LoadError, LoadResult, LoadTester
from pytest_ddtree.measure.sweep.race import RaceRule, judge
from pytest_ddtree.reference import MODEL_ID, spawn_reference_server, tokenizer_path
from pytest_ddtree.reference.cost import DEFAULT_PROMPTS, optimal_schedule
from pytest_ddtree.report.load_text import failure_text
from pytest_ddtree.wire.protocol import EndpointConfig
from pytest_ddtree.wire.tokens import load_counter

PROMPTS = list(DEFAULT_PROMPTS)
BUDGETS = [16, 32, 64, 128, 256, 512, 1024]


def by_rule(result: LoadResult, equivalence: float) -> dict[int, str]:
    """Per concurrency, the race rule's verdict on an exhaustive grid's samples."""
    out: dict[int, str] = {}
    for point in sorted({s.point for s in result.samples}):
        here = [s for s in result.samples if s.point == point]
        samples: dict[int | None, list[tuple[float, str]]] = {}
        excluded: dict[int | None, str] = {}
        for s in here:
            if not s.valid:
                excluded[s.tree_budget] = "invalid"
            elif s.tpot is not None:
                samples.setdefault(s.tree_budget, []).append((s.tpot, s.prompt_id or ""))
        rule = RaceRule(equivalence=equivalence, higher_is_better=False)
        j = judge(samples, rule, excluded=excluded)
        out[point.concurrency or 0] = pick(j.recommended, j.decided, j.leader, j.contending)
    return out


def pick(recommended: Any, decided: bool, leader: Any, contending: Sequence[Any]) -> str:
    """``64``, or ``?64/128``: undecided between the leader and the budgets in contention."""
    if decided:
        return budget_label(recommended)
    if leader is None:
        return "none"
    return "?" + "/".join(budget_label(b) for b in sorted({leader, *contending}))


def run(tester: LoadTester, mode: str, seed: int, cs: Sequence[int], requests: int | None) -> Any:
    """One grid; an invalid request (a failed test) is reported and its budget left out."""
    kept: list[LoadResult] = []
    tester.sweep, tester.seed, tester.sink = mode, seed, kept.append
    t0 = time.perf_counter()
    try:
        tester(PROMPTS, concurrencies=list(cs), requests=requests)
    except LoadError as exc:
        print(f"     seed {seed}, {mode}: {str(exc).splitlines()[0]}")
    return kept[0], time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--jitter", type=float, default=0.05)
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    parser.add_argument("--concurrency", default="1,4,8")
    parser.add_argument("--requests", type=int, default=None, help="per budget; default auto")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--margin", type=float, default=0.02)
    parser.add_argument("--json")
    args = parser.parse_args()
    seeds = [int(x) for x in args.seeds.split(",")]
    budgets = [int(x) for x in args.budgets.split(",")]
    cs = [int(x) for x in args.concurrency.split(",")]
    optimum = optimal_schedule(budgets, cs, prompts=PROMPTS)
    counter = load_counter(str(tokenizer_path()))
    rows: list[dict[str, Any]] = []
    totals = {"exhaustive": 0, "adaptive": 0, "same": 0, "points": 0, "undecided": 0}
    with spawn_reference_server(jitter=args.jitter) as srv:
        tester = LoadTester(
            EndpointConfig(srv.base_url, model=MODEL_ID),
            judge=lambda x: check(x, counter=counter),
            describe=failure_text,
            tree_budgets=budgets,
            concurrencies=cs,
            max_tokens=args.max_tokens,
            counter=counter,
            equivalence=args.margin,
        )
        print(f"budgets {budgets}, C {cs}, jitter {args.jitter}, margin {args.margin:.0%}")
        head = f"{'seed':>4} {'point':>5} {'full':>6} {'full/rule':>10} {'raced':>10}"
        print(head + f" {'optimum':>8} {'req full':>9} {'req raced':>10}")
        for seed in seeds:
            order = ["exhaustive", "adaptive"][:: 1 if seed % 2 == 0 else -1]
            got = {mode: run(tester, mode, seed, cs, args.requests) for mode in order}
            (full, t_full), (raced, t_raced) = got["exhaustive"], got["adaptive"]
            rule = by_rule(full, args.margin)
            for choice in raced.schedule.choices:
                c = choice.point.concurrency or 0
                race = choice.race
                assert race is not None
                n_full = sum(1 for s in full.samples if s.point == choice.point)
                row = {
                    "seed": seed,
                    "concurrency": c,
                    "full": full.schedule.choice(choice.point).label,
                    "full_by_rule": rule[c],
                    "raced": pick(race.recommended, race.decided, race.leader, race.contending),
                    "optimum": budget_label(optimum[c]),
                    "requests_full": n_full,
                    "requests_raced": race.requests,
                }
                rows.append(row)
                totals["exhaustive"] += n_full
                totals["adaptive"] += race.requests
                totals["points"] += 1
                totals["same"] += row["raced"] == row["full_by_rule"]
                totals["undecided"] += not race.decided
                print(
                    f"{seed:>4} {'C=' + str(c):>5} {row['full']:>6} {row['full_by_rule']:>10} "
                    f"{row['raced']:>10} {row['optimum']:>8} {n_full:>9} {race.requests:>10}"
                )
            print(f"     seed {seed}: wall {t_full:.0f} s in full, {t_raced:.0f} s raced")
    share = totals["adaptive"] / totals["exhaustive"]
    print(
        f"requests: {totals['adaptive']} raced against {totals['exhaustive']} in full "
        f"({share:.0%}); the race's choice equals the rule's verdict on the full grid at "
        f"{totals['same']} of {totals['points']} points; raced undecided at "
        f"{totals['undecided']}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "totals": totals, "args": vars(args)}, f, indent=2)


if __name__ == "__main__":
    main()
