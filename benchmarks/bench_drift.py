"""How often does the drift rule fire on pure noise, and how often does it catch a real change?

    python benchmarks/bench_drift.py [--trials 400] [--prompts 3]

Builds the drift blocks a ``ddtree_sweep`` measures (the first budget right
after the warm-up and again after the last round, at least 8 start/end pairs)
from synthetic decode rates: each request's rate is its prompt's speed times
lognormal noise of the given spread, and the end block is also multiplied by
the drift factor. The drift check then runs exactly as in a report. A factor
of 1.00 is no drift, so the rate printed there is the false-alarm rate.
"""

from __future__ import annotations

import argparse
import random

from pytest_ddtree.measure.sweep import Sample, SweepPlan
from pytest_ddtree.measure.sweep.statistics import check_drift

NOISE = (0.01, 0.1, 0.3)
FACTORS = (1.0, 0.9, 0.75, 0.5)


def _blocks(prompts: int, noise: float, factor: float, rng: random.Random) -> list[Sample]:
    ids = tuple(f"p{i}" for i in range(prompts))
    plan = SweepPlan((16, 64), ids, rounds=1, warmup_rounds=0, recheck=True)
    speed = {p: 100.0 * (1 + i / 5) for i, p in enumerate(ids)}
    out: list[Sample] = []
    for item in plan:
        if item.drift_mark is None:
            continue
        rate = speed[item.prompt_id] * rng.lognormvariate(0.0, noise)
        if item.drift_mark == "end":
            rate *= factor
        out.append(
            Sample(
                item.tree_budget,
                item.prompt_id,
                item.round,
                True,
                decode_tokens_per_second=rate,
                drift_mark=item.drift_mark,
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--prompts", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(0)
    print(f"share of {args.trials} sweeps flagged as drifting ({args.prompts} prompts)")
    print("end/start speed  " + "  ".join(f"noise {n:>4.0%}" for n in NOISE))
    for factor in FACTORS:
        cells = []
        for noise in NOISE:
            hits = 0
            for t in range(args.trials):
                samples = _blocks(args.prompts, noise, factor, rng)
                (check,) = check_drift(samples, seed=t)
                hits += check.drifting
            cells.append(f"{hits / args.trials:>10.1%}")
        print(f"{factor:>15.2f}  " + "  ".join(cells))


if __name__ == "__main__":
    main()
