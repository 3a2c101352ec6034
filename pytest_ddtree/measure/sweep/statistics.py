"""Sweep statistics: medians, seeded bootstrap intervals, per-budget figures, the recommendation.

Only the standard library: medians and interquartile ranges, and seeded
percentile-bootstrap confidence intervals (:mod:`~pytest_ddtree.measure.sweep.bootstrap`),
so the same samples and seed always give the same report; the drift check lives in
:mod:`~pytest_ddtree.measure.sweep.drift`. Both are importable from here too. The
recommendation follows the racing rule (:mod:`~pytest_ddtree.measure.sweep.race`) on
measured decode throughput, for an exhaustive sweep as for an adaptive one; acceptance
*rate* is never used because it falls arithmetically as the budget grows, whatever the
server does.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.core.budget import budget_order
from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.core.wording import percent
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
from pytest_ddtree.measure.sweep.bootstrap import ci_name
from pytest_ddtree.measure.sweep.bootstrap import (
    quantile as quantile,
)
from pytest_ddtree.measure.sweep.depth import DepthProfile, depth_profile
from pytest_ddtree.measure.sweep.drift import (
    DriftCheck,
    drift_message,
    without_repeats,
)
from pytest_ddtree.measure.sweep.drift import (
    check_drift as check_drift,
)
from pytest_ddtree.measure.sweep.race import (
    DEFAULT_EQUIVALENCE,
    Judgement,
    RaceRecord,
    RaceRule,
    Standing,
    exhaustive_record,
    judge,
    signed_percent,
)
from pytest_ddtree.measure.tally import SpecTally, TalliedSpeculation

#: A budget's place under the rule: what the verdict column says of it (and its colour).
Place = Literal[
    "best",
    "smallest as fast",
    "leads, undecided",
    "leads within the margin",
    "as fast",
    "slower",
    "in contention",
    "excluded",
    "invalid",
    "no timings",
    "not raced",
    "budget ignored",
]
#: how each place is written in the verdict column ("invalid" names its codes)
PLACE_TEXT: Mapping[Place, str] = {
    "best": "best",
    "smallest as fast": "best (smallest as fast)",
    "leads, undecided": "leads, undecided",
    "leads within the margin": "leads within the margin",
    "as fast": "as fast",
    "slower": "slower",
    "in contention": "in contention",
    "excluded": "excluded",
    "invalid": "INVALID",
    "no timings": "no timings",
    "not raced": "not raced",
    "budget ignored": "budget ignored",
}


@dataclass(frozen=True)
class BudgetStats(TalliedSpeculation):
    """The statistics of one budget over every sample of a sweep.

    Timing and acceptance statistics use valid samples only: an invalid
    response measured nothing worth reporting. ``acceptance_ci`` is a
    bootstrap interval of the mean acceptance length. ``codes`` counts the
    violation codes of the invalid samples. ``place`` (and ``left_after``, ``drifting``)
    is filled by :func:`summarize` once every budget is known; :attr:`verdict` words it.
    """

    tree_budget: int | None
    total: int
    valid: int
    codes: Mapping[str, int]
    decode: tuple[float, ...]
    decode_prompts: tuple[str, ...]
    decode_median: float | None
    decode_q1: float | None
    decode_q3: float | None
    decode_ci: tuple[float, float] | None
    ttft_p50: float | None
    ttft_p90: float | None
    ttft_ci: tuple[float, float] | None
    mean_acceptance_length: float | None
    acceptance_ci: tuple[float, float] | None
    mean_decode_rounds: float | None
    server_client_ratio: float | None
    echoed_mismatch: int
    concurrent: bool
    #: the budget's place under the rule (None until :func:`summarize` judged every budget)
    place: Place | None = None
    #: the round after which a raced budget left as slower (None: it did not leave)
    left_after: int | None = None
    #: the server changed while this budget was measured again (the drift check)
    drifting: bool = False
    # accepted / drafted tokens: shown only where the length is unknown (llama.cpp)
    mean_acceptance_rate: float | None = None
    #: the speculation figures, counted as the load counts them
    spec: SpecTally = field(default_factory=SpecTally)
    # acceptance by depth, pooled over the valid requests (None: no server histogram)
    depth: DepthProfile | None = None

    @property
    def all_valid(self) -> bool:
        """True when every request at this budget passed the invariants."""
        return self.total > 0 and self.valid == self.total

    @property
    def verdict(self) -> str:
        """The verdict cell: the budget's place in words, then what qualifies it."""
        if self.place is None:
            return ""
        if self.place == "invalid":
            return f"INVALID ({', '.join(sorted(self.codes)) or 'invalid'})"
        text = PLACE_TEXT[self.place]
        if self.place == "budget ignored":
            return text
        if self.place == "slower" and self.left_after is not None:
            text += f", left after round {self.left_after}"
        if self.echoed_mismatch and self.all_valid:
            text += " (echoed budget differs)"
        return text + (" (DRIFTING)" if self.drifting else "")

    @property
    def decode_iqr(self) -> float | None:
        """Interquartile range of decode tokens/s."""
        if self.decode_q1 is None or self.decode_q3 is None:
            return None
        return self.decode_q3 - self.decode_q1

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form for ``sweep.json``."""
        return {
            "tree_budget": self.tree_budget,
            "total": self.total,
            "valid": self.valid,
            "codes": dict(self.codes),
            "decode_tokens_per_second": {
                "median": self.decode_median,
                "q1": self.decode_q1,
                "q3": self.decode_q3,
                "ci95": None if self.decode_ci is None else list(self.decode_ci),
                "n": len(self.decode),
            },
            "ttft": {
                "p50": self.ttft_p50,
                "p90": self.ttft_p90,
                "ci95": None if self.ttft_ci is None else list(self.ttft_ci),
            },
            "mean_acceptance_length": self.mean_acceptance_length,
            "acceptance_ci95": None if self.acceptance_ci is None else list(self.acceptance_ci),
            "mean_decode_rounds": self.mean_decode_rounds,
            "server_client_ratio": self.server_client_ratio,
            "echoed_mismatch": self.echoed_mismatch,
            "concurrent": self.concurrent,
            "verdict": self.verdict,
            "mean_acceptance_rate": self.mean_acceptance_rate,
            **self.spec_json(),
            "acceptance_by_depth": None if self.depth is None else self.depth.to_json(),
        }


def _mean(values: Iterable[float | int | None]) -> float | None:
    xs = [float(v) for v in values if v is not None]
    return statistics.fmean(xs) if xs else None


def budget_stats(
    tree_budget: int | None, samples: Sequence[Sample], *, seed: int = 0
) -> BudgetStats:
    """Statistics of the samples of one budget (callers group by budget)."""
    valid = [s for s in samples if s.valid]
    timed = [s for s in valid if s.decode_tokens_per_second is not None]
    decode = tuple(
        s.decode_tokens_per_second for s in timed if s.decode_tokens_per_second is not None
    )
    decode_prompts = tuple(s.prompt_id for s in timed)
    ttft_samples = [s for s in valid if s.ttft is not None]
    ttfts = [s.ttft for s in ttft_samples if s.ttft is not None]
    ratios = [r for r in (s.server_client_ratio for s in valid) if r is not None]
    accept = [s.mean_acceptance_length for s in valid if s.mean_acceptance_length is not None]
    codes: Counter[str] = Counter()
    for s in samples:
        codes.update(s.codes)
    return BudgetStats(
        tree_budget=tree_budget,
        total=len(samples),
        valid=len(valid),
        codes=dict(codes),
        decode=decode,
        decode_prompts=decode_prompts,
        decode_median=statistics.median(decode) if decode else None,
        decode_q1=quantile(decode, 0.25) if decode else None,
        decode_q3=quantile(decode, 0.75) if decode else None,
        decode_ci=bootstrap_median_ci(decode, seed=seed, salt=tree_budget, strata=decode_prompts),
        ttft_p50=quantile(ttfts, 0.5) if ttfts else None,
        ttft_p90=quantile(ttfts, 0.9) if ttfts else None,
        ttft_ci=bootstrap_median_ci(
            ttfts,
            seed=seed,
            salt=f"ttft{tree_budget}",
            strata=[s.prompt_id for s in ttft_samples],
        ),
        mean_acceptance_length=_mean(accept),
        acceptance_ci=bootstrap_ci(accept, statistics.fmean, seed=seed, salt=f"acc{tree_budget}"),
        mean_decode_rounds=_mean(s.decode_rounds for s in valid),
        server_client_ratio=statistics.median(ratios) if ratios else None,
        echoed_mismatch=sum(
            1
            for s in samples
            if s.echoed_tree_budget is not None
            and s.tree_budget is not None
            and s.echoed_tree_budget != s.tree_budget
        ),
        concurrent=any(s.concurrent for s in samples),
        mean_acceptance_rate=_mean(s.acceptance_rate for s in valid),
        spec=SpecTally.of(samples),
        depth=depth_profile(valid),
    )


#: What a sweep whose server ignores the tree budget answers.
BUDGET_IGNORED_TEXT = (
    "No budget is recommended: the server does not use the tree budget it is sent "
    "([budget-ignored], the failure of ddtree::sweep), so the sweep timed one configuration "
    "under several labels; whichever looked fastest, its lead is noise."
)


@dataclass(frozen=True)
class Recommendation:
    """Which budget to deploy, and how sure the sweep is about it.

    The rule is the race's (:mod:`~pytest_ddtree.measure.sweep.race`), for an exhaustive
    sweep as for an adaptive one: among the valid budgets as fast as the leader
    within the margin, the smallest (``tree_budget``, with its median decode
    throughput, its interval and its ``n``). ``tied`` lists the other budgets
    as fast as it (decided) or still in contention with the leader
    (undecided); ``excluded`` the budgets with an invalid request. When the
    sweep is undecided, ``tree_budget`` is None (no forced winner) and
    ``leader`` says which budget leads.
    """

    tree_budget: int | None
    decode_median: float | None
    decode_ci: tuple[float, float] | None
    tied: tuple[int | None, ...]
    excluded: tuple[int | None, ...]
    #: the rule's answer in words (:attr:`message` adds what qualifies it)
    finding: str
    #: the run was interrupted: its answer covers what ran
    partial: bool = False
    #: the first drift check that found the server changed during the sweep (see
    #: :mod:`~pytest_ddtree.measure.sweep.drift`); None: no drift
    drift: DriftCheck | None = None
    #: the rule reached a verdict (False: more requests were needed, or none was valid)
    decided: bool = True
    #: the budget with the best measured figure (recommended or not)
    leader: int | None = None
    #: the recommended budget's timed requests
    n: int | None = None
    #: the practical margin of the rule
    equivalence: float = DEFAULT_EQUIVALENCE
    #: an undecided sweep that still knows the answer: the budgets that cannot be told
    #: apart (the leader first), every other valid budget being clearly slower; deploy
    #: either one (empty when the sweep knows less, or decided)
    either: tuple[int | None, ...] = ()
    #: the server does not use the tree budget (``budget-ignored``): no budget is recommended,
    #: whatever the table measured
    budget_ignored: bool = False
    #: budgets found invalid after their race, which did not see it: its verdict is set
    #: aside and every sample judged by the exhaustive rule
    set_aside_for: tuple[int | None, ...] = ()
    #: the races whose samples were pooled at this temperature (0 or 1: none pooled)
    pooled_races: int = 0
    #: why nothing was timed (None: something was)
    nothing_timed: str | None = None

    @property
    def drifting(self) -> bool:
        """The server changed during the sweep."""
        return self.drift is not None

    @property
    def message(self) -> str:
        """The recommendation in words: the rule's finding and what qualifies it."""
        if self.nothing_timed is not None:
            text = f"No recommendation: nothing was timed ({self.nothing_timed})."
        elif self.budget_ignored:
            text = BUDGET_IGNORED_TEXT
            text += " The server also drifted during the sweep." if self.drifting else ""
        else:
            text = self.finding
            if self.set_aside_for:
                text += (
                    " The race's own verdict is set aside: it did not see the invalid "
                    f"responses at tree_budget={_names(self.set_aside_for)}; every sample is "
                    "judged by the exhaustive rule."
                )
            text += drift_message(() if self.drift is None else (self.drift,))
            if self.pooled_races > 1:
                text += (
                    f" {self.pooled_races} races ran at this temperature; their samples "
                    "together are judged by the exhaustive rule (each race judged its own "
                    "test's samples alone)."
                )
        return f"Partial run (interrupted): {text}" if self.partial else text

    @property
    def decisive(self) -> bool:
        """True when the rule decided on a budget (the server's own one included), the run
        is complete and did not drift."""
        return (
            self.decode_median is not None
            and self.decided
            and not self.partial
            and not self.drifting
        )


jsonmodel.register(
    Recommendation,
    decode_ci=jsonmodel.override(rename="decode_ci95"),
    # written only when the sweep names a set (older readers never see the key otherwise)
    either=jsonmodel.override(omit_if_default=True),
    budget_ignored=jsonmodel.override(omit_if_default=True),
    finding=jsonmodel.override(omit=True),
    drift=jsonmodel.override(omit=True),
    set_aside_for=jsonmodel.override(omit=True),
    pooled_races=jsonmodel.override(omit=True),
    nothing_timed=jsonmodel.override(omit=True),
    derived={
        "decisive": lambda r: r.decisive,
        "drifting": lambda r: r.drifting,
        "message": lambda r: r.message,
    },
    read=False,  # recomputed from the samples when a file is read
    order=(
        *("tree_budget", "decode_median", "decode_ci95", "n", "leader", "decided"),
        *("equivalence", "tied", "either", "excluded", "decisive", "partial", "drifting"),
        "budget_ignored",
        "message",
    ),
)


def rank(stats: Sequence[BudgetStats]) -> list[BudgetStats]:
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


def _fmt_rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def judge_stats(
    stats: Sequence[BudgetStats], rule: RaceRule | None = None
) -> RaceRecord[int | None]:
    """The race's verdict on an exhaustive sweep: every valid timed budget, every sample."""
    samples = {
        st.tree_budget: list(zip(st.decode, st.decode_prompts, strict=True))
        for st in stats
        if st.all_valid and st.decode
    }
    excluded = {st.tree_budget: "invalid responses" for st in stats if not st.all_valid}
    return exhaustive_record(judge(samples, rule, excluded=excluded))


def _pct(x: float) -> str:
    return signed_percent(x)


def standing_text(s: Standing[int | None]) -> str:
    """``+7.1% [+4.0%, +9.9%] n=9``: a budget's slowdown against the leader, with its n."""
    if s.slowdown is None:
        return f"n={s.n}"
    est, lo, hi = s.slowdown
    return f"{_pct(est)} [{_pct(lo)}, {_pct(hi)}] n={s.n}"


def _names(keys: Iterable[int | None]) -> str:
    return ", ".join(budget_label(b) for b in sorted(keys, key=budget_order))


def recommend(
    stats: Sequence[BudgetStats],
    *,
    seed: int = 0,
    rule: RaceRule | None = None,
    race: RaceRecord[int | None] | None = None,
) -> Recommendation:
    """The recommendation by the race's rule (``race``: an adaptive sweep's own record).

    A budget with any invalid request is never recommended. Among the budgets as
    fast as the leader within the margin, the smallest is recommended; below the
    rule's minimum n, or while a budget's interval still crosses the margin, the
    sweep is undecided and says so, with n, instead of naming a winner.
    """
    del seed  # the rule's interval is deterministic
    by_budget = {st.tree_budget: st for st in stats}
    if race is not None and any(s.n and s.key not in by_budget for s in race.judgement.standings):
        # a raced budget's samples were dropped (e.g. its test failed after its timing):
        # the kept samples are judged alone, by the same rule
        rule, race = rule or race.judgement.rule, None
    record = race or judge_stats(stats, rule)
    j = record.judgement
    m = j.rule.equivalence
    excluded = tuple(s.tree_budget for s in stats if s.total > 0 and not s.all_valid)
    tail = f" Excluded for invalid responses: {_names(excluded)}." if excluded else ""
    if not any(s.status == "leader" for s in j.standings):
        why = "no budget produced valid timed requests"
        if excluded:
            why += f" (invalid requests at {_names(excluded)})"
        return Recommendation(
            None,
            None,
            None,
            (),
            excluded,
            f"No recommendation: {why}.",
            decided=False,
            equivalence=m,
        )
    if not j.decided:
        return _undecided(record, by_budget, excluded, tail)
    best = by_budget[j.recommended]
    n = len(best.decode)
    ci = best.decode_ci
    ci_text = "" if ci is None else f", {ci_name()} [{_fmt_rate(ci[0])}, {_fmt_rate(ci[1])}]"
    message = (
        f"Recommended tree_budget={budget_label(best.tree_budget)}: median decode "
        f"{_fmt_rate(best.decode_median)} tok/s{ci_text} (n={n})"
    )
    if best.mean_acceptance_length is not None:
        message += f", mean acceptance length {best.mean_acceptance_length:.2f}"
    message += "."
    others = [s for s in j.standings if s.key != j.recommended and s.status != "excluded"]
    same = [s for s in others if s.status in ("leader", "as fast")]
    if same:
        names = ", ".join(
            f"tree_budget={budget_label(s.key)} ({'leads' if s.status == 'leader' else 'as fast'}"
            f"{'' if s.slowdown is None else ': ' + standing_text(s)})"
            for s in same
        )
        message += (
            f" Equivalent within {percent(m)}: {names}; the smallest is recommended, as a "
            "bigger tree costs more verification under load."
        )
    if any(s.status == "out" for s in others):
        message += f" Every other valid budget is slower by more than the {percent(m)} margin."
    elif not others:
        message += " It is the only budget with valid timings."
    message += f" ({_rule_text(record, alone=n if not others else None)}.){tail}"
    return Recommendation(
        best.tree_budget,
        best.decode_median,
        best.decode_ci,
        tuple(s.key for s in same),
        excluded,
        message,
        leader=j.leader,
        n=n,
        equivalence=m,
    )


def _rule_text(record: RaceRecord[int | None], alone: int | None = None) -> str:
    """The mode that ran and its rule; ``alone``: the n of a budget that had no other to be
    compared with, which the rule's margin and minimum n (a comparison's) do not judge."""
    r = record.judgement.rule
    what = f"{percent(r.equivalence)} margin, min n {r.min_n}, {percent(r.confidence)} confidence"
    if record.mode == "adaptive":
        budget = "" if r.max_requests is None else f" of {r.max_requests}"
        mode = f"adaptive sweep, {record.requests}{budget} requests"
    elif len(record.judgement.standings) < 2:
        mode = "one budget"
    else:
        mode = "exhaustive sweep"
    if alone is not None:
        return (
            f"{mode}, n={alone}: nothing to compare it with, so no margin or minimum n "
            f"applies; a comparison needs n >= {r.min_n} a budget"
        )
    return f"{mode}, {what}"


def _undecided(
    record: RaceRecord[int | None],
    by_budget: Mapping[int | None, BudgetStats],
    excluded: tuple[int | None, ...],
    tail: str,
) -> Recommendation:
    j = record.judgement
    lead = by_budget[j.leader]
    n = len(lead.decode)
    open_ = [s for s in j.standings if s.status == "in contention"]
    parts = ", ".join(f"tree_budget={budget_label(s.key)} ({standing_text(s)})" for s in open_)
    if record.spent:
        why = f"the request budget ({record.max_requests}) was spent first"
    elif record.mode == "adaptive":
        why = (
            "the benchmark tests ran out first: more passes over the sweep prompts "
            "(--ddtree-sweep-passes) would decide"
        )
    else:
        why = "more rounds (--ddtree-rounds) or --ddtree-sweep adaptive would decide"
    either = _either(j, open_)
    if either:
        names = " or ".join(budget_label(b) for b in sorted(either, key=budget_order))
        message = (
            f"Either tree_budget={names}: {parts} cannot be told apart from the leader "
            f"within the {percent(j.rule.equivalence)} margin; every other valid budget is slower "
            f"by more than the margin; tree_budget={budget_label(j.leader)} led with median "
            f"decode {_fmt_rate(lead.decode_median)} tok/s (n={n}). Deploy either one (the "
            f"smaller verifies less under load); to name one: {why} ({_rule_text(record)}).{tail}"
        )
    else:
        message = (
            f"Undecided: tree_budget={budget_label(j.leader)} leads with median decode "
            f"{_fmt_rate(lead.decode_median)} tok/s (n={n}), but {parts or 'no budget'} "
            f"cannot yet be told within the {percent(j.rule.equivalence)} margin or clearly "
            f"slower; {why}. No budget is recommended ({_rule_text(record)}).{tail}"
        )
    return Recommendation(
        None,
        lead.decode_median,
        lead.decode_ci,
        tuple(s.key for s in open_),
        excluded,
        message,
        decided=False,
        leader=j.leader,
        n=n,
        equivalence=j.rule.equivalence,
        either=either,
    )


def _either(
    j: Judgement[int | None], open_: Sequence[Standing[int | None]]
) -> tuple[int | None, ...]:
    """The budgets an undecided sweep can still name together: the leader and those in
    contention with it, when each had the rule's minimum n and every other valid budget
    left as clearly slower (so the set excludes something); else ()."""
    rest = [s for s in j.standings if s.key != j.leader and s not in open_]
    # every other valid budget left as slower: one as fast but not in the set means the set
    # is not the answer (and nothing shown slower means nothing is known)
    if not open_ or not rest or any(s.status not in ("out", "excluded") for s in rest):
        return ()
    if not any(s.status == "out" for s in rest):
        return ()
    lead = next(s for s in j.standings if s.key == j.leader)
    if any(s.n < j.rule.min_n for s in (lead, *open_)):
        return ()
    return (j.leader, *sorted((s.key for s in open_), key=budget_order))


#: the warning's opening, on every engine and in every table's legend
NO_SPEC_STATS = "no speculative statistics came back: is speculation on?"


def no_spec_stats_line(where: str, asked: int) -> str:
    """The warning for answers that were asked for speculative statistics and sent none
    (a server without speculation, or one that does not report it), at ``where``."""
    return (
        f"{NO_SPEC_STATS} {asked} answer(s) at {where} were read for speculative statistics "
        "and none carried drafts, acceptance or rounds; these timings may be the target "
        "model's alone"
    )


def acceptance_text(
    length: float | None, rate: float | None, never_drafted: bool, no_stats: bool = False
) -> str:
    """The acceptance cell of the sweep and load tables: the mean acceptance length, else
    the acceptance rate (``rate 0.85``), ``no drafts``, ``no stats`` (no speculative
    statistics came back), or ``-``.

    A server that reports drafted and accepted tokens but not its rounds
    (llama.cpp) has no honest length; its rate is shown, marked as such.
    """
    if length is not None:
        return f"{length:.2f}"
    if rate is not None:
        return f"rate {rate:.2f}"
    if no_stats:
        return "no stats"
    return "no drafts" if never_drafted else "-"


def speculation_warnings(stats: Sequence[BudgetStats]) -> list[str]:
    """The warnings for budgets whose answers sent no speculative statistics at all, and
    for those whose requests drafted no token at all, with the counts."""
    lines: list[str] = []
    quiet = [s for s in stats if s.no_spec_stats]
    if quiet:
        which = "every budget" if len(quiet) == len(stats) else "budget"
        names = ", ".join(budget_label(s.tree_budget) for s in quiet)
        lines.append(no_spec_stats_line(f"{which} {names}", sum(s.stats_asked for s in quiet)))
    idle = [s for s in stats if s.never_drafted]
    if idle:
        which = "every budget" if len(idle) == len(stats) else "budget"
        names = ", ".join(budget_label(s.tree_budget) for s in idle)
        n = sum(s.draft_reports for s in idle)
        lines.append(
            f"speculation never drafted at {which} {names}: 0 draft tokens in {n} request(s) "
            "that reported their drafts; these timings are the target model's alone, not "
            "speculative decoding"
        )
    return lines


@dataclass(frozen=True)
class SweepSummary:
    """Per-budget statistics (budget order ascending), the recommendation and the race."""

    budgets: tuple[BudgetStats, ...]
    recommendation: Recommendation
    #: the drift checks of the sweep (empty when no budget was measured again)
    drift: tuple[DriftCheck, ...] = ()
    #: the rule's verdict on each budget and, for an adaptive sweep, who left when and why
    race: RaceRecord[int | None] | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form for ``sweep.json``."""
        out = {
            "budgets": [b.to_json() for b in self.budgets],
            "recommendation": jsonmodel.to_json(self.recommendation),
        }
        if self.race is not None:
            out["race"] = self.race.to_json()
        if self.drift:
            out["drift"] = [c.to_json() for c in self.drift]
        return out


def _place(
    st: BudgetStats, record: RaceRecord[int | None] | None, rec: Recommendation
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
    stats: Sequence[BudgetStats], race: RaceRecord[int | None] | None
) -> list[int | None]:
    """Budgets with invalid samples that ``race`` did not exclude (none without a race)."""
    if race is None:
        return []
    excluded = {s.key for s in race.judgement.standings if s.status == "excluded"}
    return [
        st.tree_budget
        for st in stats
        if st.total > 0 and not st.all_valid and st.tree_budget not in excluded
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
    groups: dict[int | None, list[Sample]] = {}
    for s in without_repeats(samples):
        if s.valid or s.against_budget:
            groups.setdefault(s.tree_budget, []).append(s)
    raw = [budget_stats(b, groups[b], seed=seed) for b in sorted(groups, key=budget_order)]
    unseen = _unseen_invalid(raw, race)
    if race is not None and unseen:
        # found invalid after the race (a temperature-0 divergence marks its budget's
        # samples): the race's verdict may name it, so every sample is judged afresh
        rule, race = race.judgement.rule, None
    record = race or judge_stats(raw, rule)
    rec = recommend(raw, seed=seed, race=record)
    drift = check_drift(samples, seed=seed)
    drifted = [c for c in drift if c.drifting]
    rec = replace(rec, set_aside_for=tuple(unseen), drift=drifted[0] if drifted else None)
    placed: list[BudgetStats] = []
    for st in raw:
        place, left_after = _place(st, record, rec)
        drifting = any(c.tree_budget == st.tree_budget for c in drifted)
        placed.append(replace(st, place=place, left_after=left_after, drifting=drifting))
    return SweepSummary(tuple(placed), rec, drift, record)
