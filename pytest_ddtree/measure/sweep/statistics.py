"""Sweep statistics: each budget's arm, its place under the rule, the recommendation.

Each budget is summarised as an arm at the point C=1
(:class:`~pytest_ddtree.measure.arm.ArmStats`, the load's statistics type too). Only the
standard library: medians and interquartile ranges, and seeded percentile-bootstrap
confidence intervals (:mod:`~pytest_ddtree.measure.sweep.bootstrap`), so the same samples
and seed always give the same report; the drift check lives in
:mod:`~pytest_ddtree.measure.sweep.drift`. Both are importable from here too. The
recommendation follows the racing rule (:mod:`~pytest_ddtree.measure.sweep.race`) on
measured decode throughput, for an exhaustive sweep as for an adaptive one; acceptance
*rate* is never used because it falls arithmetically as the budget grows, whatever the
server does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.core.budget import budget_order
from pytest_ddtree.measure.arm import ArmStats, Place, budget_json
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep.bootstrap import (
    BOOTSTRAP_RESAMPLES as BOOTSTRAP_RESAMPLES,
)
from pytest_ddtree.measure.sweep.bootstrap import (
    CONFIDENCE as CONFIDENCE,
)
from pytest_ddtree.measure.sweep.bootstrap import (
    bootstrap_ci as bootstrap_ci,
)
from pytest_ddtree.measure.sweep.bootstrap import (
    bootstrap_median_ci as bootstrap_median_ci,
)
from pytest_ddtree.measure.sweep.bootstrap import (
    bootstrap_median_difference as bootstrap_median_difference,
)
from pytest_ddtree.measure.sweep.bootstrap import (
    quantile as quantile,
)
from pytest_ddtree.measure.sweep.decision import Decision, Flags, decide_record, judge_samples
from pytest_ddtree.measure.sweep.drift import (
    DriftCheck,
    without_repeats,
)
from pytest_ddtree.measure.sweep.drift import (
    check_drift as check_drift,
)
from pytest_ddtree.measure.sweep.race import (
    RaceRecord,
    RaceRule,
)


@dataclass(frozen=True)
class Recommendation:
    """Which budget to deploy, and how sure the sweep is about it.

    The one rule's :class:`~pytest_ddtree.measure.sweep.decision.Decision` (the race's, for an
    exhaustive sweep as for an adaptive one), with the figures of the budget it names: its
    median decode throughput and interval (the leader's when it names none). The words are
    the report's (``report.decision_text``); the properties read the decision.
    """

    decision: Decision[int | None]
    decode_median: float | None = None
    decode_ci: tuple[float, float] | None = None
    #: the first drift check that found the server changed during the sweep (see
    #: :mod:`~pytest_ddtree.measure.sweep.drift`); None: no drift
    drift: DriftCheck | None = None
    #: budgets found invalid after their race, which did not see it: its verdict is set
    #: aside and every sample judged by the exhaustive rule
    set_aside_for: tuple[int | None, ...] = ()
    #: the races whose samples were pooled at this temperature (0 or 1: none pooled)
    pooled_races: int = 0
    #: why nothing was timed (None: something was)
    nothing_timed: str | None = None

    @property
    def tree_budget(self) -> int | None:
        """The recommended budget (None: the server's own, or none: see ``decided``)."""
        return self.decision.chosen

    @property
    def decided(self) -> bool:
        """The rule named one budget to deploy."""
        return self.decision.names_one

    @property
    def leader(self) -> int | None:
        """The budget with the best measured figure (recommended or not)."""
        return self.decision.leader

    @property
    def n(self) -> int | None:
        """The timed requests of the budget named (the leader when none is)."""
        ok = self.decision.has_leader and not self.budget_ignored
        return self.decision.n if ok else None

    @property
    def tied(self) -> tuple[int | None, ...]:
        """Decided: the other budgets as fast as the recommended one; else the budgets
        still in contention with the leader."""
        d = self.decision
        if self.budget_ignored:
            return ()
        if d.status == "recommended":
            return d.as_fast
        return tuple(a for a in d.arms if a != d.leader)

    @property
    def either(self) -> tuple[int | None, ...]:
        """An undecided sweep that still knows the answer: the set to deploy either of."""
        d = self.decision
        return d.arms if d.status == "tied" and not self.budget_ignored else ()

    @property
    def excluded(self) -> tuple[int | None, ...]:
        """Budgets with an invalid request, never recommended."""
        return self.decision.excluded

    @property
    def equivalence(self) -> float:
        """The practical margin of the rule."""
        return self.decision.margin

    @property
    def partial(self) -> bool:
        """The run was interrupted: its answer covers what ran."""
        return self.decision.flags.partial

    @property
    def drifting(self) -> bool:
        """The server changed during the sweep."""
        return self.decision.flags.drifting

    @property
    def budget_ignored(self) -> bool:
        """The server does not use the tree budget: no budget is recommended."""
        return self.decision.flags.budget_ignored

    @property
    def decisive(self) -> bool:
        """True when the rule decided on a budget (the server's own one included), the run
        is complete and did not drift."""
        return self.decode_median is not None and self.decision.decisive

    def flagged(self, **flags: bool) -> Recommendation:
        """The same recommendation with decision flags set (``partial=True``, ...)."""
        return replace(self, decision=self.decision.flagged(**flags))


jsonmodel.register(
    Recommendation,
    decision=jsonmodel.override(omit=True),
    decode_ci=jsonmodel.override(rename="decode_ci95"),
    drift=jsonmodel.override(omit=True),
    set_aside_for=jsonmodel.override(omit=True),
    pooled_races=jsonmodel.override(omit=True),
    nothing_timed=jsonmodel.override(omit=True),
    derived={
        "tree_budget": lambda r: r.tree_budget,
        "n": lambda r: r.n,
        "leader": lambda r: r.leader,
        "decided": lambda r: r.decided,
        "equivalence": lambda r: r.equivalence,
        "tied": lambda r: list(r.tied),
        "either": lambda r: list(r.either),
        "excluded": lambda r: list(r.excluded),
        "decisive": lambda r: r.decisive,
        "partial": lambda r: r.partial,
        "drifting": lambda r: r.drifting,
        "budget_ignored": lambda r: r.budget_ignored,
        "status": lambda r: r.decision.status,
        "decision": lambda r: jsonmodel.to_json(r.decision),
    },
    read=False,  # recomputed from the samples when a file is read
    order=(
        *("tree_budget", "decode_median", "decode_ci95", "n", "leader", "decided"),
        *("equivalence", "tied", "either", "excluded", "decisive", "partial", "drifting"),
        "budget_ignored",
    ),
)


def rank(stats: Sequence[ArmStats]) -> list[ArmStats]:
    """Eligible budgets (all requests valid, with timings), fastest first.

    Ordered by median decode tokens/s, then by mean acceptance length (more
    tokens per verify pass is the better tie-break on equal throughput), then
    by the smaller budget (less verify compute).
    """
    eligible = [s for s in stats if s.all_valid and s.decode_median is not None]
    return sorted(
        eligible,
        key=lambda s: (
            -(s.decode_median or 0.0),
            -(s.mean_acceptance_length or 0.0),
            budget_order(s.tree_budget),
        ),
    )


def recommend(
    stats: Sequence[ArmStats], record: RaceRecord[int | None], flags: Flags | None = None
) -> Recommendation:
    """The recommendation of ``record`` (the race's verdict on ``stats``' budgets) by the
    one rule (:func:`~pytest_ddtree.measure.sweep.decision.decide`), with the figures of the
    budget it names. A budget with any invalid request is never recommended; below the
    rule's minimum n, or while a budget's interval still crosses the margin, no budget is
    named (no forced winner)."""
    decision = decide_record(record, flags)
    by_budget = {st.tree_budget: st for st in stats}
    named = decision.arms[0] if decision.status == "recommended" else decision.leader
    best = by_budget.get(named) if decision.has_leader else None
    if best is None:
        return Recommendation(decision)
    return Recommendation(decision, best.decode_median, best.decode_ci)


@dataclass(frozen=True)
class SweepSummary:
    """Per-budget statistics (budget order ascending), the recommendation and the race."""

    budgets: tuple[ArmStats, ...]
    recommendation: Recommendation
    #: the drift checks of the sweep (empty when no budget was measured again)
    drift: tuple[DriftCheck, ...] = ()
    #: the rule's verdict on each budget and, for an adaptive sweep, who left when and why
    race: RaceRecord[int | None] | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form for ``sweep.json``."""
        rec: dict[str, Any] = jsonmodel.to_json(self.recommendation)
        for key in ("either", "budget_ignored"):  # written only when set (as older versions)
            if not rec[key]:
                del rec[key]
        out: dict[str, Any] = {
            "budgets": [budget_json(b) for b in self.budgets],
            "recommendation": rec,
        }
        if self.race is not None:
            out["race"] = self.race.to_json()
        if self.drift:
            out["drift"] = [c.to_json() for c in self.drift]
        return out


def _place(
    st: ArmStats, record: RaceRecord[int | None] | None, rec: Recommendation
) -> tuple[Place, int | None]:
    """One budget's place under the rule, and the round it left after (if it left)."""
    if not st.all_valid:
        return "invalid", None
    if st.decode_median is None or record is None:
        return "no timings", None
    try:
        s = record.judgement.standing(st.tree_budget)
    except KeyError:
        return "not raced", None
    if rec.decided and st.tree_budget == rec.tree_budget:
        return ("best" if s.status == "leader" else "smallest as fast"), None
    gone = record.exit_of(st.tree_budget)
    place: Place = {
        "leader": "leads, undecided" if not rec.decided else "leads within the margin",
        "as fast": "as fast",
        "out": "slower",
        "in contention": "in contention",
        "excluded": "excluded",
    }[s.status]
    return place, (gone.lap if place == "slower" and gone is not None else None)


def _unseen_invalid(
    stats: Sequence[ArmStats], race: RaceRecord[int | None] | None
) -> list[int | None]:
    """Budgets with invalid samples that ``race`` did not exclude (none without a race)."""
    if race is None:
        return []
    excluded = {s.key for s in race.judgement.standings if s.status == "excluded"}
    return [
        st.tree_budget
        for st in stats
        if st.requests > 0 and not st.all_valid and st.tree_budget not in excluded
    ]


def summarize(
    samples: Sequence[Sample],
    *,
    seed: int = 0,
    rule: RaceRule | None = None,
    race: RaceRecord[int | None] | None = None,
) -> SweepSummary:
    """Group ``samples`` by requested budget, compute statistics, verdicts and drift.

    ``rule`` is the race's rule for an exhaustive sweep's verdict (default margin
    2%); ``race`` an adaptive sweep's own record, whose verdict is kept as raced.
    A budget's statistics count its valid requests and the invalid ones held against it
    (``Sample.against_budget``): a failure blamed on the prompt or the serving stack,
    or an untimed smoke request's, leaves the budget its timings (the report still lists it).
    """
    kept = [s for s in without_repeats(samples) if s.valid or s.against_budget]
    groups: dict[int | None, list[Sample]] = {}
    for s in kept:
        groups.setdefault(s.tree_budget, []).append(s)
    raw = [ArmStats.of(groups[b], seed=seed) for b in sorted(groups, key=budget_order)]
    unseen = _unseen_invalid(raw, race)
    if race is not None and (
        unseen or any(s.n and s.key not in groups for s in race.judgement.standings)
    ):
        # found invalid after the race (a temperature-0 divergence marks its budget's
        # samples), or a raced budget's samples were dropped (its test failed after its
        # timing): the race's verdict may name it, so every kept sample is judged afresh
        rule, race = race.judgement.rule, None
    record = race or judge_samples(kept, rule)
    drift = check_drift(samples, seed=seed)
    drifted = [c for c in drift if c.drifting]
    flags = Flags(
        drifting=bool(drifted),
        no_speculative_statistics=bool(raw) and all(st.no_spec_stats for st in raw),
    )
    rec = recommend(raw, record, flags)
    rec = replace(rec, set_aside_for=tuple(unseen), drift=drifted[0] if drifted else None)
    placed: list[ArmStats] = []
    for st in raw:
        place, left_after = _place(st, record, rec)
        drifting = any(c.tree_budget == st.tree_budget for c in drifted)
        placed.append(replace(st, place=place, left_after=left_after, drifting=drifting))
    return SweepSummary(tuple(placed), rec, drift, record)
