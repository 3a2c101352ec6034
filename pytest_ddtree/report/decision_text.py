"""The decision in words: every sentence about a budget's choice is built here.

The one rule (:mod:`pytest_ddtree.measure.sweep.decision`) returns a typed ``Decision``;
the terminal, the human text of ``sweep.json`` and the HTML report all word it through
these functions, from the decision and the arms' statistics, so they cannot disagree.
Numbers in the text (the margin, the confidence, the minimum n) come from the decision,
which carries the rule's own values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from pytest_ddtree.core.budget import budget_order
from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.core.wording import percent, signed_percent
from pytest_ddtree.measure.arm import ArmStats
from pytest_ddtree.measure.sweep import drift
from pytest_ddtree.measure.sweep.bootstrap import ci_name
from pytest_ddtree.measure.sweep.decision import Decision
from pytest_ddtree.measure.sweep.drift import DriftCheck
from pytest_ddtree.measure.sweep.race import Standing
from pytest_ddtree.measure.sweep.statistics import Recommendation, SweepSummary

__all__ = [
    "BUDGET_IGNORED_TEXT",
    "drift_line",
    "drift_rule_text",
    "drift_text",
    "names",
    "rule_text",
    "standing_text",
    "sweep_answer",
]

K = TypeVar("K")

#: What a sweep whose server ignores the tree budget answers.
BUDGET_IGNORED_TEXT = (
    "No budget is recommended: the server does not use the tree budget it is sent "
    "([budget-ignored], the failure of ddtree::sweep), so the sweep timed one configuration "
    "under several labels; whichever looked fastest, its lead is noise."
)


def names(keys: Iterable[int | None]) -> str:
    """``server-default, 16, 64``: budgets as tables name them, in budget order."""
    return ", ".join(budget_label(b) for b in sorted(keys, key=budget_order))


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def standing_text(s: Standing[K]) -> str:
    """``+7.1% [+4.0%, +9.9%] n=9``: an arm's slowdown against the leader, with its n."""
    if s.slowdown is None:
        return f"n={s.n}"
    est, lo, hi = s.slowdown
    return f"{signed_percent(est)} [{signed_percent(lo)}, {signed_percent(hi)}] n={s.n}"


def rule_text(d: Decision[K], *, arms: int, alone: int | None = None) -> str:
    """The mode that ran and its rule; ``alone``: the n of an arm that had no other to be
    compared with, which the rule's margin and minimum n (a comparison's) do not judge."""
    what = f"{percent(d.margin)} margin, min n {d.min_n}, {percent(d.confidence)} confidence"
    if d.mode == "adaptive":
        budget = "" if d.max_requests is None else f" of {d.max_requests}"
        mode = f"adaptive sweep, {d.requests}{budget} requests"
    elif arms < 2:
        mode = "one budget"
    else:
        mode = "exhaustive sweep"
    if alone is not None:
        return (
            f"{mode}, n={alone}: nothing to compare it with, so no margin or minimum n "
            f"applies; a comparison needs n >= {d.min_n} a budget"
        )
    return f"{mode}, {what}"


def drift_rule_text() -> str:
    """The drift rule in words, from its constants (read at each call): what follows "the
    sweep is drifting when"."""
    return (
        f"the {percent(drift.DRIFT_CONFIDENCE)} bootstrap interval of the median end/start "
        "ratio of decode tokens/s excludes 1 and that ratio is more than "
        f"{percent(drift.DRIFT_MARGIN)} away from 1"
    )


def drift_line(c: DriftCheck) -> str:
    """One drift check in one line (the terminal, the report, ``sweep.json``'s
    ``message``)."""
    label = budget_label(c.tree_budget)
    if c.ratio is None or c.ci is None:
        return (
            f"drift not assessed at tree_budget={label}: {min(len(c.start), len(c.end))}"
            f" valid start/end pair(s), the rule needs {drift.DRIFT_PAIRS}"
        )
    change = signed_percent(c.ratio - 1.0, 0)
    what = (
        f"tree_budget={label} measured again at the end: median decode {change} "
        f"(ratio {c.ratio:.2f}, {ci_name(drift.DRIFT_CONFIDENCE)} {c.ci[0]:.2f}-{c.ci[1]:.2f}, "
        f"{len(c.start)} pairs)"
    )
    if c.drifting:
        return (
            f"DRIFT: {what}; the server changed during the sweep (throttling, another "
            "tenant, a restart?), so the budgets measured at different times are not "
            "comparable"
        )
    return (
        f"no drift: {what}; within the rule (interval includes 1 or change <= "
        f"{percent(drift.DRIFT_MARGIN)})"
    )


def drift_text(rec: Recommendation) -> str:
    """What the answer adds when the server drifted during the sweep ("" when it did not)."""
    c = rec.drift
    if c is None or c.ratio is None:
        return ""
    return (
        f" The sweep drifted: tree_budget={budget_label(c.tree_budget)} measured again at the "
        f"end ran at {c.ratio:.2f}x its first speed, so this recommendation cannot be trusted "
        "as is; rerun on a quiet server."
    )


def _recommended(summary: SweepSummary, by_budget: Mapping[int | None, ArmStats]) -> str:
    rec, record = summary.recommendation, summary.race
    d = rec.decision
    best = by_budget[d.arms[0]]
    ci = rec.decode_ci
    ci_text = "" if ci is None else f", {ci_name()} [{_rate(ci[0])}, {_rate(ci[1])}]"
    text = (
        f"Recommended tree_budget={budget_label(best.tree_budget)}: median decode "
        f"{_rate(rec.decode_median)} tok/s{ci_text} (n={d.n})"
    )
    if best.mean_acceptance_length is not None:
        text += f", mean acceptance length {best.mean_acceptance_length:.2f}"
    text += "."
    standings = {s.key: s for s in record.judgement.standings} if record is not None else {}
    if d.as_fast:
        same = ", ".join(
            f"tree_budget={budget_label(k)} ({'leads' if k == d.leader else 'as fast'}"
            f"{_standing_suffix(standings.get(k))})"
            for k in d.as_fast
        )
        text += (
            f" Equivalent within {percent(d.margin)}: {same}; the smallest is recommended, as a "
            "bigger tree costs more verification under load."
        )
    alone = not d.as_fast and not d.slower
    if d.slower:
        text += f" Every other valid budget is slower by more than the {percent(d.margin)} margin."
    elif alone:
        text += " It is the only budget with valid timings."
    arms = len(standings)
    return text + f" ({rule_text(d, arms=arms, alone=d.n if alone else None)}.)"


def _standing_suffix(s: Standing[int | None] | None) -> str:
    return "" if s is None or s.slowdown is None else ": " + standing_text(s)


def _undecided(summary: SweepSummary, by_budget: Mapping[int | None, ArmStats]) -> str:
    rec, record = summary.recommendation, summary.race
    d = rec.decision
    lead = by_budget[d.leader]
    standings = {s.key: s for s in record.judgement.standings} if record is not None else {}
    contenders = [standings[k] for k in d.arms if k != d.leader and k in standings]
    parts = ", ".join(f"tree_budget={budget_label(s.key)} ({standing_text(s)})" for s in contenders)
    if d.spent:
        why = f"the request budget ({d.max_requests}) was spent first"
    elif d.mode == "adaptive":
        why = (
            "the benchmark tests ran out first: more passes over the sweep prompts "
            "(--ddtree-sweep-passes) would decide"
        )
    else:
        why = "more rounds (--ddtree-rounds) or --ddtree-sweep adaptive would decide"
    rule = rule_text(d, arms=len(standings))
    m = percent(d.margin)
    led = f"median decode {_rate(lead.decode_median)} tok/s (n={d.n})"
    if d.status == "tied":
        either = " or ".join(budget_label(b) for b in sorted(d.arms, key=budget_order))
        return (
            f"Either tree_budget={either}: {parts} cannot be told apart from the leader "
            f"within the {m} margin; every other valid budget is slower by more than the "
            f"margin; tree_budget={budget_label(d.leader)} led with {led}. Deploy either one "
            f"(the smaller verifies less under load); to name one: {why} ({rule})."
        )
    return (
        f"Undecided: tree_budget={budget_label(d.leader)} leads with {led}, but "
        f"{parts or 'no budget'} cannot yet be told within the {m} margin or clearly "
        f"slower; {why}. No budget is recommended ({rule})."
    )


def _finding(summary: SweepSummary) -> str:
    """The rule's answer, before what qualifies it."""
    rec = summary.recommendation
    d = rec.decision
    by_budget = {st.tree_budget: st for st in summary.budgets}
    tail = f" Excluded for invalid responses: {names(d.excluded)}." if d.excluded else ""
    if d.status == "nothing valid":
        why = "no budget produced valid timed requests"
        if d.excluded:
            why += f" (invalid requests at {names(d.excluded)})"
        return f"No recommendation: {why}."
    if d.status == "recommended":
        return _recommended(summary, by_budget) + tail
    return _undecided(summary, by_budget) + tail


def sweep_answer(summary: SweepSummary) -> str:
    """The sweep's answer in words: the rule's finding and what qualifies it."""
    rec = summary.recommendation
    if rec.nothing_timed is not None:
        text = f"No recommendation: nothing was timed ({rec.nothing_timed})."
    elif rec.budget_ignored:
        text = BUDGET_IGNORED_TEXT
        text += " The server also drifted during the sweep." if rec.drifting else ""
    else:
        text = _finding(summary)
        if rec.set_aside_for:
            text += (
                " The race's own verdict is set aside: it did not see the invalid "
                f"responses at tree_budget={names(rec.set_aside_for)}; every sample is "
                "judged by the exhaustive rule."
            )
        text += drift_text(rec)
        if rec.pooled_races > 1:
            text += (
                f" {rec.pooled_races} races ran at this temperature; their samples "
                "together are judged by the exhaustive rule (each race judged its own "
                "test's samples alone)."
            )
    return f"Partial run (interrupted): {text}" if rec.partial else text
