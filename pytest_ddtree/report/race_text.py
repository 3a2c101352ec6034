"""Why an arm stands where it does in a race, in words: the one place that words a ``Why``.

The race (``measure/sweep/race.py``) keeps each standing's and each exit's reason as data
(``Why``: its kind and figures, the interval among them). The adaptive
sweep's log, the skip reason of a benchmark test whose budget left, the load race's account
and ``sweep.json``'s ``reason`` keys are worded here, naming the leader as each place needs.
"""

from __future__ import annotations

from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.core.wording import percent, signed_percent
from pytest_ddtree.measure.sweep.benchrace import Refusal
from pytest_ddtree.measure.sweep.race import Why

__all__ = ["reason", "refusal_text", "slowdown_text"]


def slowdown_text(d: tuple[float, float, float]) -> str:
    """``+5.6% [+2.1%, +9.0%]``: a slowdown's estimate and interval."""
    return f"{signed_percent(d[0])} [{signed_percent(d[1])}, {signed_percent(d[2])}]"


def reason(why: Why | None, leader: str = "the leader") -> str:
    """``why`` in words (empty for none); ``leader`` names the arm it was judged against."""
    if why is None:
        return ""
    kind = why.kind
    codes = f" ({', '.join(why.codes)})" if why.codes else ""
    if kind == "said":
        return why.text
    if kind == "few values":
        return f"n={why.n} below the minimum"
    if kind == "few per prompt":
        return "too few values a prompt"
    if kind == "few rounds":
        return "too few rounds"
    if kind == "invalid":
        at = f" at {why.text}" if why.text else ""
        return f"{why.count} invalid request(s){at}{codes}"
    if kind == "client limits":
        return (
            f"{why.count} request(s) hit the client's own limits{codes}: not comparable, "
            "no verdict on the server"
        )
    if kind == "not lossless":
        return f"not lossless at temperature 0 ({why.text})"
    slowdown = why.slowdown
    if slowdown is None:  # an interval's kind always has its interval
        return kind
    margin = percent(why.margin)
    conf = f"{100 * why.confidence:.4g}%"  # a later look's confidence: 98.33%
    where = f"{slowdown_text(slowdown)} ({conf}, n={why.n} vs {why.lead_n})"
    if kind == "out":
        return f"slower than {leader} by {where}, more than the {margin} margin"
    if kind == "out narrow":
        return f"slower than {leader} by {where}, an interval narrower than the {margin} margin"
    if kind == "as fast":
        return f"within the {margin} margin of {leader}: {where}"
    return f"{where} crosses the margin"


def refusal_text(r: Refusal, budget: int | None) -> str:
    """Why the benchmark test of ``budget`` is skipped (its ``-rs`` reason)."""
    if r.kind == "decided":
        return (
            f"race decided after {r.requests} requests: "
            f"tree_budget={budget_label(r.recommended)} recommended"
        )
    if r.kind == "spent":
        return (
            f"race undecided: the request budget ({r.max_requests}) is spent "
            f"after {r.requests} requests"
        )
    if r.kind == "undecided":
        return f"race undecided after {r.requests} requests"
    if r.kind == "not raced" or r.exit is None:
        return "not in the race"
    gone = r.exit
    leader = "the leader" if gone.leader is None else f"tree_budget={budget_label(gone.leader)}"
    return (
        f"tree_budget={budget_label(budget)} left the race after {gone.after_requests} "
        f"requests: {reason(gone.why, leader)}"
    )
