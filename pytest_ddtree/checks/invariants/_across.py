"""Checks across several completions: determinism and an ignored budget."""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_ddtree.checks.comparable import is_whole
from pytest_ddtree.checks.invariants._context import excerpt, flat
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.wire.completion import Completion


def _first_difference(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _describe(c: Completion) -> str:
    try:
        return c.request.describe()
    except Exception:  # a malformed request still gets a report
        return repr(c.request)


def check_determinism(first: Completion, second: Completion) -> list[Violation]:
    """nondeterministic: the same request twice must give the same output.

    Only meaningful at temperature 0 (or with a fixed ``seed``) between answers
    that arrived whole (``comparable.why_not_whole``): otherwise, or when either
    request failed or was cut short, nothing is reported. Content, reasoning and
    finish reason are compared; the evidence shows the first differing
    character of each run.
    """
    for c in (first, second):
        if not is_whole(c):
            return []
        temp = c.request.temperature
        seeded = isinstance(c.request.body, dict) and c.request.body.get("seed") is not None
        if not (temp == 0 or seeded):
            return []
    found: list[Violation] = []
    for field in ("text", "reasoning_text"):
        a = getattr(first, field)
        b = getattr(second, field)
        a = a if isinstance(a, str) else ""
        b = b if isinstance(b, str) else ""
        if a == b:
            continue
        at = _first_difference(a, b)
        what = "content" if field == "text" else "reasoning"
        found.append(
            Violation(
                code="nondeterministic",
                message=(
                    f"the same request gave different {what} (first difference at character {at})"
                ),
                evidence={
                    "first_run": excerpt(a, at, min(len(a), at + 1)),
                    "second_run": excerpt(b, at, min(len(b), at + 1)),
                    "lengths": f"{len(a)} vs {len(b)} characters",
                },
                request=_describe(first),
            )
        )
    if not found:
        found.extend(_tool_call_difference(first, second))
    if not found and first.finish_reason != second.finish_reason:
        found.append(
            Violation(
                code="nondeterministic",
                message=(
                    f"the same request finished with {first.finish_reason!r}, "
                    f"then {second.finish_reason!r}"
                ),
                evidence={"text": flat(first.text[-60:]) if isinstance(first.text, str) else ""},
                request=_describe(first),
            )
        )
    return found


def _call_key(call: object) -> tuple[object, object]:
    """A tool call as compared across requests: its name and its arguments as JSON (as
    text when they do not parse); the id is the server's per-request handle, never the same."""
    args = getattr(call, "arguments", None)
    value: object = args
    if isinstance(args, str):
        try:
            value = json.dumps(json.loads(args), sort_keys=True)
        except (ValueError, RecursionError):
            value = args
    return getattr(call, "name", None), value


def _tool_call_difference(first: Completion, second: Completion) -> list[Violation]:
    a = [_call_key(c) for c in getattr(first, "tool_calls", ()) or ()]
    b = [_call_key(c) for c in getattr(second, "tool_calls", ()) or ()]
    if a == b:
        return []
    at = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    return [
        Violation(
            code="nondeterministic",
            message=(
                f"the same request gave different tool calls (first difference at tool call {at})"
            ),
            evidence={
                "first_run": flat(repr(a[at : at + 1]))[:200],
                "second_run": flat(repr(b[at : at + 1]))[:200],
                "calls": f"{len(a)} vs {len(b)}",
            },
            request=_describe(first),
        )
    ]


@dataclass(frozen=True)
class BudgetSample:
    """One request of a budget sweep, as seen by the budget-ignored check."""

    tree_budget: int
    decode_tokens_per_second: float | None
    mean_acceptance_length: float | None
    prompt_id: str | None = None
    echoed_tree_budget: int | None = None

    @classmethod
    def from_completion(cls, completion: Completion) -> BudgetSample | None:
        """The sample of a completed request with a budget, else None."""
        budget = completion.request.tree_budget
        if budget is None or not completion.ok:
            return None
        stats = completion.stats
        return cls(
            tree_budget=budget,
            decode_tokens_per_second=completion.decode_tokens_per_second,
            mean_acceptance_length=None if stats is None else stats.mean_acceptance_length,
            prompt_id=completion.request.prompt_id,
            echoed_tree_budget=None if stats is None else stats.tree_budget,
        )


BUDGET_IGNORED_ALPHA = 0.05
"""A metric counts as changing with the budget when the permutation p-value is
below this; the budget is reported ignored when no metric does."""

BUDGET_IGNORED_MIN_EFFECT = 0.05
"""...and when the per-budget medians also spread by at least this fraction of a
prompt's median: timing noise alone can reach significance one time in twenty,
a budget that does anything moves acceptance or throughput by far more."""

BUDGET_IGNORED_PERMUTATIONS = 2000
"""Permutations per metric (seeded, so the check is deterministic)."""

BUDGET_IGNORED_MIN_RATIO = 4
"""The sweep must span at least this factor (largest / smallest budget)."""


def _usable(x: float | None) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def _spread(values_by_budget: dict[int, list[float]]) -> float:
    medians = [statistics.median(v) for v in values_by_budget.values() if v]
    return max(medians) - min(medians)


def _permutation_p(
    rows: list[tuple[str, int, float]], rng: random.Random, permutations: int, alpha: float
) -> tuple[float, float]:
    """p-value and observed statistic of a stratified permutation test.

    Statistic: the range of per-budget medians of the metric normalised by each
    prompt's own median (so a slow prompt does not look like a slow budget).
    Null: budgets are exchangeable within each prompt, i.e. the budget does
    nothing. Labels are shuffled within prompts. Stops early once the p-value
    can no longer fall below ``alpha`` (the answer is then "not significant").
    """
    by_prompt: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for prompt, budget, value in rows:
        by_prompt[prompt].append((budget, value))
    normed: list[tuple[str, int, float]] = []
    for prompt, items in by_prompt.items():
        centre = statistics.median(v for _b, v in items)
        scale = abs(centre) if centre else 1.0
        normed.extend((prompt, b, v / scale) for b, v in items)

    def statistic(labels: list[int]) -> float:
        groups: dict[int, list[float]] = defaultdict(list)
        for (_p, _b, v), b in zip(normed, labels, strict=True):
            groups[b].append(v)
        return _spread(groups)

    observed_labels = [b for _p, b, _v in normed]
    observed = statistic(observed_labels)
    strata: dict[str, list[int]] = defaultdict(list)
    for i, (p, _b, _v) in enumerate(normed):
        strata[p].append(i)
    hits = 0
    labels = list(observed_labels)
    for _ in range(permutations):
        for idx in strata.values():
            pool = [observed_labels[i] for i in idx]
            rng.shuffle(pool)
            for i, b in zip(idx, pool, strict=True):
                labels[i] = b
        if statistic(labels) >= observed - 1e-12:
            hits += 1
            if hits + 1 >= alpha * (permutations + 1):
                return 1.0, observed
    return (hits + 1) / (permutations + 1), observed


def check_budget_ignored(samples: Sequence[BudgetSample]) -> list[Violation]:
    """budget-ignored: across a sweep whose server never echoes a budget, no
    metric distinguishes the budgets.

    For each metric (decode tokens/s, mean acceptance length) a stratified
    permutation test (see ``_permutation_p``) asks whether the budget changes
    it (significant at ``BUDGET_IGNORED_ALPHA`` with a spread of at least
    ``BUDGET_IGNORED_MIN_EFFECT``). When the server reports acceptance length,
    it decides alone: a honoured budget changes how many tokens a round
    accepts, while timings also move with load and drift. Without acceptance
    figures the timings decide. Nothing is reported when any sample echoes a
    budget (budget-mismatch covers that), when fewer than three budgets or two
    samples per budget at the extremes are available, or when the sweep spans
    less than ``BUDGET_IGNORED_MIN_RATIO``: too little data to tell.
    A real tree budget moves acceptance length by far more than the
    permutation noise over 16..1024, so a healthy sweep is not flagged.
    """
    usable = [s for s in samples if isinstance(s, BudgetSample) and isinstance(s.tree_budget, int)]
    if not usable or any(s.echoed_tree_budget is not None for s in usable):
        return []
    budgets = sorted({s.tree_budget for s in usable})
    if len(budgets) < 3 or budgets[0] <= 0 or budgets[-1] < BUDGET_IGNORED_MIN_RATIO * budgets[0]:
        return []
    counts = {b: sum(1 for s in usable if s.tree_budget == b) for b in budgets}
    if counts[budgets[0]] < 2 or counts[budgets[-1]] < 2:
        return []
    rng = random.Random(20240601)
    results: dict[str, tuple[float, float]] = {}
    metrics = (
        ("decode_tokens_per_second", "decode tokens/s"),
        ("mean_acceptance_length", "mean acceptance length"),
    )
    for attr, label in metrics:
        rows = [
            (s.prompt_id or "", s.tree_budget, float(getattr(s, attr)))
            for s in usable
            if _usable(getattr(s, attr))
        ]
        if len({b for _p, b, _v in rows}) < 3:
            continue
        results[label] = _permutation_p(
            rows, rng, BUDGET_IGNORED_PERMUTATIONS, BUDGET_IGNORED_ALPHA
        )
    if not results:
        return []
    # Acceptance length is what a tree budget changes directly; timings move for
    # many reasons (load, drift, the client), so when acceptance is reported it
    # decides alone, and timings decide only for servers that report none.
    deciding = (
        {"mean acceptance length": results["mean acceptance length"]}
        if "mean acceptance length" in results
        else results
    )
    if any(
        p < BUDGET_IGNORED_ALPHA and stat >= BUDGET_IGNORED_MIN_EFFECT
        for p, stat in deciding.values()
    ):
        return []
    evidence: dict[str, object] = {
        "budgets": budgets,
        "samples": len(usable),
    }
    for label, (p, stat) in results.items():
        shown = f">= {BUDGET_IGNORED_ALPHA}" if p >= 1.0 else f"= {p:.3f}"
        evidence[label] = f"p {shown}, spread of per-budget medians {stat:.1%}"
    return [
        Violation(
            code="budget-ignored",
            message=(
                f"no echoed budget, and {' and '.join(deciding)} "
                f"{'does' if len(deciding) == 1 else 'do'} not change across budgets "
                f"{budgets[0]}..{budgets[-1]} (permutation p >= {BUDGET_IGNORED_ALPHA})"
            ),
            evidence=evidence,
            request=f"sweep of {len(usable)} requests over budgets {budgets}",
        )
    ]
