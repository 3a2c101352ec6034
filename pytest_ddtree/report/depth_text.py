"""Whether deeper trees are still accepted, in words: the line under the sweep's table and
on the depth chart, from the budgets' depth profiles (``measure/sweep/depth.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_ddtree.measure.sweep.depth import MIN_ROUNDS, PLATEAU, STILL_ACCEPTED, DepthProfile

__all__ = ["deeper_line"]


def deeper_line(profiles: Sequence[tuple[int | None, DepthProfile]]) -> str | None:
    """One line answering "is the largest budget too low?" from the profiles of every
    budget (``(budget, profile)``, any order); None without any profile.

    With two budgets or more, the answer is whether the mean accepted length still
    grew from the next smaller budget to the largest (by ``PLATEAU`` or more): if
    it did, deeper trees are still accepted and a larger budget may help. With one
    budget, the deepest level reached by enough rounds (``MIN_ROUNDS``) is judged:
    when at least half of the rounds that got to the level before it were accepted
    there too, acceptance has not fallen off. The depth figures are shown either way.
    """
    known = sorted(((b, p) for b, p in profiles if b is not None), key=lambda bp: bp[0])
    if not known:
        return None
    budget, top = known[-1]
    head = f"acceptance by depth at the largest budget, tree_budget={budget}:"
    judged = _judged(top)
    where = "too few rounds to judge any depth" if judged is None else judged[1]
    if len(known) > 1:
        b0, p0 = known[-2]
        m0, m1 = p0.mean_accepted_length, top.mean_accepted_length
        if m0 is not None and m1 is not None and m0 > 0:
            grew = f"accept len pooled by depth {m0:.2f} at {b0}, {m1:.2f} at {budget}"
            if m1 / m0 - 1.0 < PLATEAU:
                return (
                    f"{head} deeper trees add nothing ({grew}; {where}): a budget above "
                    f"{budget} is unlikely to help"
                )
            return (
                f"{head} deeper trees are still accepted ({grew}; {where}): a budget above "
                f"{budget} may help; sweep larger budgets"
            )
    if judged is None:
        return (
            f"{head} only {top.decode_rounds} rounds, too few to judge any depth "
            f"(a depth is judged on at least {MIN_ROUNDS} rounds): run more requests"
        )
    rate, where = judged
    if rate < STILL_ACCEPTED:
        return (
            f"{head} acceptance falls off ({where}): deeper trees are rarely accepted, so a "
            f"budget above {budget} is unlikely to help"
        )
    return (
        f"{head} deeper trees are still accepted ({where}): a budget above {budget} may "
        "help; sweep larger budgets"
    )


def _judged(profile: DepthProfile) -> tuple[float, str] | None:
    """The conditional acceptance at the deepest depth reached by ``MIN_ROUNDS`` rounds,
    and a phrase saying so; None when no depth has that many."""
    deepest = profile.deepest()
    reach = profile.reaching
    judged = [d for d in range(1, deepest + 1) if reach[d - 1] >= MIN_ROUNDS]
    if not judged:
        return None
    depth = judged[-1]
    rate = profile.conditional[depth - 1]
    where = (
        f"{rate:.0%} of the {reach[depth - 1]:,} rounds accepted to depth {depth - 1} were "
        f"accepted at depth {depth}, "
    )
    if depth == deepest:
        where += f"none deeper than {deepest}"
    else:
        where += f"{reach[deepest]:,} as deep as {deepest}"
    return rate, where
