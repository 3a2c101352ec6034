"""Compare two ``sweep.json`` files budget by budget, with significance.

Usage::

    python -m pytest_ddtree.report.compare BASELINE.json CANDIDATE.json [--threshold 10%]
                                    [--metric decode|ttft] [--seed N]

For each budget present in both files (at each temperature: a budget at
temperature 0.7 is never compared with one at 0) the medians of the chosen metric are
compared with a seeded bootstrap of the relative change on the raw
per-request samples stored in the files (resampled within each prompt when
every prompt has at least two samples). A budget *regresses* when the change
is significant at ``CONFIDENCE`` (the interval excludes zero) and worse than the
threshold, or when the candidate has invalid requests where the baseline had
none. Exit status: 0 no regression, 1 at least one regression, 2 bad input.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pytest_ddtree.core.budget import budget_order
from pytest_ddtree.core.wording import signed_percent
from pytest_ddtree.measure.sweep import (
    RunMetadata,
    Sample,
    SweepRun,
    SweepSummary,
    bootstrap_median_difference,
    budget_label,
)
from pytest_ddtree.measure.sweep.bootstrap import ci_name, confidence_text
from pytest_ddtree.measure.sweep.temperature import summarize_temperatures
from pytest_ddtree.report.jsonfile import read_sweep_json

Metric = Literal["decode", "ttft"]

_METRIC_TITLE = {"decode": "decode tok/s", "ttft": "TTFT ms"}


def _values(samples: Sequence[Sample], metric: Metric) -> tuple[list[float], list[str]]:
    """The metric of every valid sample that has it, and each one's prompt; the drift check's
    blocks are left out, as from the sweep's own statistics."""
    values: list[float] = []
    prompts: list[str] = []
    for s in samples:
        raw = s.decode_tokens_per_second if metric == "decode" else s.ttft
        if s.valid and raw is not None and s.drift_mark is None:
            values.append(raw if metric == "decode" else raw * 1000.0)
            prompts.append(s.prompt_id)
    return values, prompts


@dataclass(frozen=True)
class BudgetComparison:
    """One budget's comparison.

    ``change`` is the relative change of the median (candidate over baseline,
    minus one) and ``ci`` its bootstrap interval (at ``CONFIDENCE``); both None when either
    side has too few valid samples. ``outcome`` is one of ``regression``,
    ``worse (within threshold)``, ``better``, ``no significant change``,
    ``now invalid``, ``insufficient data``, ``only in baseline``,
    ``only in candidate``. ``regression``, ``now invalid`` and ``only in
    baseline`` (the candidate did not measure that budget) fail the comparison.
    """

    tree_budget: int | None
    baseline_median: float | None
    candidate_median: float | None
    baseline_n: int
    candidate_n: int
    baseline_invalid: int
    candidate_invalid: int
    change: float | None
    ci: tuple[float, float] | None
    outcome: str
    #: the sampling temperature both sides were measured at
    temperature: float = 0.0

    @property
    def regression(self) -> bool:
        """True when this budget fails the comparison."""
        # a budget the candidate did not measure cannot be shown not to have regressed
        return self.outcome in ("regression", "now invalid", "only in baseline")


@dataclass(frozen=True)
class Comparison:
    """The whole comparison of two sweeps."""

    metric: Metric
    threshold: float
    rows: tuple[BudgetComparison, ...]
    baseline_recommendation: int | None
    candidate_recommendation: int | None
    setup_differences: tuple[str, ...]
    #: above temperature 0: (temperature, baseline's, candidate's recommendation) for each
    recommendations: tuple[tuple[float, int | None, int | None], ...] = ()

    @property
    def regressions(self) -> list[BudgetComparison]:
        """The budgets that regressed."""
        return [r for r in self.rows if r.regression]

    def lines(
        self, baseline_name: str = "baseline", candidate_name: str = "candidate"
    ) -> list[str]:
        """Console output: a header, the table, and the conclusion."""
        title = _METRIC_TITLE[self.metric]
        out = [
            f"Comparing {baseline_name} (baseline) with {candidate_name} (candidate): "
            f"median {title}, {confidence_text()} bootstrap CI of the relative change, "
            f"threshold {self.threshold:.1%}"
        ]
        out.extend(f"warning: setups differ: {d}" for d in self.setup_differences)
        header = ("tree_budget", "baseline", "candidate", "change", ci_name(), "outcome")
        rows: list[tuple[str, ...]] = [header]
        hot = any(r.temperature for r in self.rows)
        for r in self.rows:
            rows.append(
                (
                    budget_label(r.tree_budget) + (f" T={r.temperature:g}" if hot else ""),
                    _med(r.baseline_median, r.baseline_n, r.baseline_invalid),
                    _med(r.candidate_median, r.candidate_n, r.candidate_invalid),
                    "-" if r.change is None else signed_percent(r.change),
                    "-"
                    if r.ci is None
                    else f"[{signed_percent(r.ci[0])}, {signed_percent(r.ci[1])}]",
                    r.outcome.upper() if r.regression else r.outcome,
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for n, row in enumerate(rows):
            cells = [
                c.ljust(w) if i in (0, 5) else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ]
            out.append("  ".join(cells).rstrip())
            if n == 0:
                out.append("  ".join("-" * w for w in widths))
        if not self.recommendations:
            out.append(
                "recommended tree_budget: "
                f"{_rec(self.baseline_recommendation)} -> {_rec(self.candidate_recommendation)}"
            )
        for t, rec_a, rec_b in self.recommendations:
            out.append(
                f"recommended tree_budget at temperature {t:g}: {_rec(rec_a)} -> {_rec(rec_b)}"
            )
        bad = self.regressions
        if bad:
            names = ", ".join(
                budget_label(r.tree_budget) + (f" (temperature {r.temperature:g})" if hot else "")
                for r in bad
            )
            out.append(f"FAIL: {len(bad)} budget(s) regressed: tree_budget={names}")
        else:
            out.append("OK: no significant regression beyond the threshold")
        return out


def _med(median: float | None, n: int, invalid: int) -> str:
    text = "-" if median is None else f"{median:,.1f}" if median < 100 else f"{median:,.0f}"
    text += f" (n={n})"
    if invalid:
        text += f" {invalid} invalid"
    return text


def _rec(b: int | None) -> str:
    return "none" if b is None else budget_label(b)


def _comparable(key: str, value: Any) -> Any:
    # the embedded server listens on a new port every run: that is not a different setup
    if key == "endpoint" and str(value).startswith("embedded reference server"):
        return "embedded reference server"
    return value


def _setup_differences(a: SweepRun, b: SweepRun) -> list[str]:
    diffs = []
    for key in RunMetadata.SETUP_FIELDS:
        va, vb = getattr(a.metadata, key), getattr(b.metadata, key)
        if va is not None and vb is not None and _comparable(key, va) != _comparable(key, vb):
            diffs.append(f"{key}: {va!r} vs {vb!r}")
    for name, run in (("baseline", a), ("candidate", b)):
        if run.metadata.interrupted:
            diffs.append(f"the {name} run was interrupted: its sweep is partial")
    if any(s.concurrent for s in a.samples) != any(s.concurrent for s in b.samples):
        diffs.append("one sweep ran concurrently (pytest-xdist), the other serially")
    return diffs


def compare_runs(
    baseline: SweepRun,
    candidate: SweepRun,
    *,
    threshold: float = 0.10,
    metric: Metric = "decode",
    seed: int = 0,
) -> Comparison:
    """Compare two sweeps budget by budget (see the module docstring for outcomes)."""
    if not threshold >= 0:
        raise ValueError(f"threshold must be >= 0, got {threshold!r}")
    if metric not in _METRIC_TITLE:
        raise ValueError(f"metric must be 'decode' or 'ttft', got {metric!r}")
    # Higher decode throughput is better; higher TTFT is worse.
    sign = 1.0 if metric == "decode" else -1.0
    groups_a: dict[tuple[float, int | None], list[Sample]] = {}
    groups_b: dict[tuple[float, int | None], list[Sample]] = {}
    for s in baseline.samples:
        groups_a.setdefault((s.temperature, s.tree_budget), []).append(s)
    for s in candidate.samples:
        groups_b.setdefault((s.temperature, s.tree_budget), []).append(s)
    keys = sorted(set(groups_a) | set(groups_b), key=lambda k: (k[0], budget_order(k[1])))
    rows: list[BudgetComparison] = []
    for temperature, budget in keys:
        sa = groups_a.get((temperature, budget), [])
        sb = groups_b.get((temperature, budget), [])
        (va, pa), (vb, pb) = _values(sa, metric), _values(sb, metric)
        ma = _median(va)
        mb = _median(vb)
        bad_a = sum(not s.valid for s in sa)
        bad_b = sum(not s.valid for s in sb)
        change: float | None = None
        ci: tuple[float, float] | None = None
        if not sa:
            outcome = "only in candidate"
        elif not sb:
            outcome = "only in baseline"
        elif bad_b and not bad_a:
            outcome = "now invalid"
        else:
            diff = bootstrap_median_difference(
                va,
                vb,
                seed=seed,
                relative=True,
                salt=f"compare-{budget}" if not temperature else f"compare-{budget}-{temperature}",
                strata_a=pa,
                strata_b=pb,
            )
            if diff is None:
                outcome = "insufficient data"
            else:
                change, lo, hi = diff
                ci = (lo, hi)
                significant = lo > 0.0 or hi < 0.0
                worse = sign * change < 0.0
                if not significant:
                    outcome = "no significant change"
                elif worse and abs(change) > threshold:
                    outcome = "regression"
                elif worse:
                    outcome = "worse (within threshold)"
                else:
                    outcome = "better"
        rows.append(
            BudgetComparison(
                budget, ma, mb, len(va), len(vb), bad_a, bad_b, change, ci, outcome, temperature
            )
        )
    recs_a = _summaries(baseline, seed)
    recs_b = _summaries(candidate, seed)
    recs = tuple(
        (
            t,
            recs_a[t].recommendation.tree_budget if t in recs_a else None,
            recs_b[t].recommendation.tree_budget if t in recs_b else None,
        )
        for t in sorted(set(recs_a) | set(recs_b))
    )
    first = recs[0] if recs else (0.0, None, None)
    return Comparison(
        metric,
        threshold,
        tuple(rows),
        first[1],
        first[2],
        tuple(_setup_differences(baseline, candidate)),
        () if all(t == 0 for t, _, _ in recs) else recs,
    )


def _summaries(run: SweepRun, seed: int) -> dict[float, SweepSummary]:
    """The run's summary at each temperature, with the sweep's own verdict on a server that
    ignores the budget (no budget recommended, as the run itself said)."""
    from pytest_ddtree.measure.sweep.ignored import budget_ignored, ignoring_budget
    from pytest_ddtree.measure.sweep.temperature import by_temperature

    summaries = summarize_temperatures(run.samples, seed=seed)
    for t, group in by_temperature(run.samples).items():
        if t in summaries and budget_ignored(group, ()):
            summaries[t] = ignoring_budget(summaries[t])
    return summaries


def _median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    xs = sorted(values)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2.0


def parse_threshold(text: str) -> float:
    """``"10%"``, ``"10"`` or ``"2.5%"`` -> a fraction (0.10, 0.10, 0.025)."""
    raw = text.strip().removesuffix("%").strip()
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"--threshold: expected a percentage like 10%, got {text!r}") from None
    if not 0.0 <= value < 1000.0:
        raise ValueError(f"--threshold: must be between 0% and 1000%, got {text!r}")
    return value / 100.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=(
            "ddtree-compare"
            if os.path.basename(sys.argv[0]) == "ddtree-compare"
            else "python -m pytest_ddtree.report.compare"
        ),
        description="Compare two pytest-ddtree sweep.json files budget by budget.",
    )
    p.add_argument("baseline", help="sweep.json of the reference run (e.g. from main)")
    p.add_argument("candidate", help="sweep.json of the run to check")
    p.add_argument(
        "--threshold",
        default="10%",
        help="fail on a significant change worse than this (default: 10%%)",
    )
    p.add_argument(
        "--metric",
        choices=("decode", "ttft"),
        default="decode",
        help="decode tokens/s (higher is better) or TTFT (lower is better); default decode",
    )
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        threshold = parse_threshold(args.threshold)
        baseline = read_sweep_json(args.baseline)
        candidate = read_sweep_json(args.candidate)
        result = compare_runs(
            baseline, candidate, threshold=threshold, metric=args.metric, seed=args.seed
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in result.lines(args.baseline, args.candidate):
        print(line)
    return 1 if result.regressions else 0


if __name__ == "__main__":
    raise SystemExit(main())
