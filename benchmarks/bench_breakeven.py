"""How often the break-even map names the right crossover, and how often a cell names a
false winner, against a simulated server whose speculation stops paying past a depth.

The server: the target alone decodes at 500 tok/s at every depth; the best budget's speedup
falls with the prompt (1.6x at 512 tokens, 1.25x at 1024, 1.05x at 2048, 0.95x at 4096,
0.7x at 8192: 5% either side of break-even around the crossover), a smaller budget trails
it by 8%. Every request's rate carries ``--noise`` lognormal noise (3% by default) and a
per-prompt offset. Each trial races every cell
(``measure.breakeven.race_cell``, the rule's default 2% margin and 95% confidence) and checks:

- the crossover is 4096 and the cells say off at 4096 and 8192, a budget below;
- no cell names a false winner: an arm truly slower than the best arm (speculation off
  included) by more than the margin.

Run: ``python benchmarks/bench_breakeven.py [--trials 200] [--noise 0.03]``.
"""

from __future__ import annotations

import argparse
import math
import random

from pytest_ddtree.measure.breakeven import OFF, Send, cell_of, crossover, race_cell
from pytest_ddtree.measure.sample import SERIAL, Sample
from pytest_ddtree.measure.sweep.race import RaceRule

DEPTHS = {512: 1.6, 1024: 1.25, 2048: 1.05, 4096: 0.95, 8192: 0.7}
PROMPTS = [f"p{i}" for i in range(5)]
TARGET = 500.0
MARGIN = 0.02


def rates(depth: int) -> dict[int | None, float]:
    best = TARGET * DEPTHS[depth]
    return {OFF: TARGET, 16: best * 0.92, 64: best}


def server(
    true: dict[int | None, float],
    depth: int,
    offsets: dict[str, float],
    rng: random.Random,
    noise: float,
) -> Send:
    """One depth of the simulated server: each arm's rate, the prompt's offset, noise."""

    def send(arm: int | None, pid: str, lap: int) -> Sample:
        value = true[arm] * offsets[pid] * math.exp(rng.gauss(0, noise))
        return Sample(arm, pid, lap, True, decode_tokens_per_second=value, context_depth=depth)

    return send


def trial(seed: int, noise: float) -> tuple[bool, int, int]:
    rng = random.Random(seed)
    offsets = {p: rng.uniform(0.8, 1.2) for p in PROMPTS}
    cells = []
    false_winners = 0
    for depth in DEPTHS:
        true = rates(depth)
        send = server(true, depth, offsets, rng, noise)

        rule = RaceRule(equivalence=MARGIN, max_requests=len(true) * len(PROMPTS) * 16)
        samples, record = race_cell(list(true), PROMPTS, send, rule, seed=seed)
        cell = cell_of(depth, SERIAL, samples, record, baseline=True)
        cells.append(cell)
        if cell.answered and true[cell.answer] < max(true.values()) * (1 - MARGIN):
            false_winners += 1
    right = crossover(cells) == 4096 and all(c.off == (c.depth >= 4096) for c in cells)
    return right, false_winners, len(cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--noise", type=float, default=0.03)
    args = ap.parse_args()
    right = wrong_cells = cells = 0
    for seed in range(args.trials):
        ok, bad, n = trial(seed, args.noise)
        right += ok
        wrong_cells += bad
        cells += n
    print(
        f"noise {args.noise:.0%}, {args.trials} trials: crossover and off named right in "
        f"{right}/{args.trials} ({right / args.trials:.1%}); false winners in "
        f"{wrong_cells}/{cells} cells ({wrong_cells / cells:.1%})"
    )


if __name__ == "__main__":
    main()
