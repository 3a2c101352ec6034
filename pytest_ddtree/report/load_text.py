"""The load test's decisions in words: each load point's line, the schedule, and how the
load's answer joins the serial sweep's. The terminal and the HTML report say the same
lines, built here from each point's ``Decision`` (``measure.load.recommend.Choice``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_ddtree.core.settings import Timeout, budget_label
from pytest_ddtree.core.wording import percent
from pytest_ddtree.measure.arm import ArmStats
from pytest_ddtree.measure.load.race import PointRace, Unraced
from pytest_ddtree.measure.load.recommend import Choice, NoneWhy, Schedule
from pytest_ddtree.measure.load.runner import CLIENT_TIMEOUT, NOT_SENT
from pytest_ddtree.measure.load.tester import CLIENT_LIMIT_CODES, LoadFailure
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep.decision import Decision
from pytest_ddtree.report import race_text
from pytest_ddtree.report.client_text import client_reason
from pytest_ddtree.report.columns import LOAD_COLUMNS, LOAD_LEGEND, load_rows, text_table
from pytest_ddtree.report.decision_text import standing_text

__all__ = [
    "UNRELIABLE",
    "failure_text",
    "load_answer",
    "load_lines",
    "none_text",
    "point_detail",
    "point_line",
    "race_line",
    "race_lines",
    "schedule_how",
    "schedule_text",
    "unraced_text",
]

#: what a point measured while the client was saturated adds to its line
UNRELIABLE = " (UNRELIABLE: client saturated or stalled)"


def _rule(d: Decision[int | None]) -> str:
    return f"{percent(d.margin)} margin, min n {d.min_n}, {percent(d.confidence)} confidence"


def _tpot(c: Choice) -> str:
    if c.tpot_ms is None:
        return f"no TPOT, n={c.n}"
    ci = f" [{c.ci_ms[0]:.2f}, {c.ci_ms[1]:.2f}]" if c.ci_ms else ""
    return f"TPOT p50 {c.tpot_ms:.2f} ms{ci} n={c.n}"


def _others(c: Choice) -> str:
    """``; as fast: 128 (...); slower: 32 (...)``: the other budgets of a point run in full."""
    d = c.decision
    groups: dict[str, list[str]] = {"as fast": [], "in contention": [], "slower": []}
    for s in c.standings:
        if s.key in d.arms:
            continue
        if s.key == d.leader:
            groups["as fast"].append(f"{budget_label(s.key)} (leads, n={s.n})")
        elif s.status in ("as fast", "in contention"):
            groups[s.status].append(f"{budget_label(s.key)} ({standing_text(s)})")
        elif s.status == "out":
            groups["slower"].append(f"{budget_label(s.key)} ({standing_text(s)})")
    return "".join(f"; {k}: {', '.join(v)}" for k, v in groups.items() if v)


def point_line(c: Choice) -> str:
    """One load point's answer in one line."""
    d = c.decision
    at = f"best at {c.point.label}"
    warn = UNRELIABLE if c.unreliable else ""
    if c.race is not None:
        return _raced_line(c) + warn
    if not d.has_leader:
        return f"{at}: none ({none_text(c.why_none)})"
    rule = f"({_rule(d)})"
    if d.status == "recommended":
        alone = not d.as_fast and not d.slower
        if alone:
            return f"{at}: {c.label} ({_tpot(c)}); the only valid budget{warn}"
        return f"{at}: {c.label} ({_tpot(c)}){_others(c)} {rule}{warn}"
    lead = budget_label(d.leader)
    if d.status == "tied":
        return (
            f"{at}: either {c.label} (they cannot be told apart within the "
            f"{percent(d.margin)} margin; every other valid budget is slower; {lead} led "
            f"with {_tpot(c)}){_others(c)} {rule}{warn}"
        )
    few = min(s.n for s in c.standings if s.key in d.arms) < d.min_n
    why = f"too few requests for a claim: n < {d.min_n}" if few else "a tie at this noise"
    return f"{at}: undecided ({why}); {lead} leads with {_tpot(c)}{_others(c)} {rule}{warn}"


def race_line(race: PointRace) -> str:
    """A point's race in one line: decided after how many requests, or undecided and why
    (``sweep.json``'s ``verdict`` of the race)."""
    spent = f"{race.requests} of {race.max_requests} requests"
    if race.discarded:
        spent += (
            f" ({race.discarded} run(s) not raced: the client was saturated or stalled, "
            "no verdict on a budget)"
        )
    if race.decided:
        return f"race decided after {spent}"
    still = ", ".join(budget_label(b) for b in race.contending) or "none"
    if race.outcome == "interrupted":
        return f"race interrupted after {spent}: undecided (in contention: {still})"
    if race.leader is None:
        return f"race undecided after {spent}: no budget had every request valid"
    return (
        f"race undecided after {spent}: the point's request budget is spent with "
        f"{still} in contention (no winner forced)"
    )


def race_lines(race: PointRace) -> list[str]:
    """Per budget of a point's race: who left when and why, who was as fast, who led."""
    out = []
    gone = {x.tree_budget: x for x in race.left}
    for budget, n, status, why in race.standing:
        label = budget_label(budget)
        if budget in gone:
            x = gone[budget]
            out.append(
                f"{label} {x.status} after {x.after_requests} requests (n={x.n}): "
                f"{race_text.reason(x.why)}"
            )
        elif status == "leader":
            out.append(f"{label} leader (n={n})")
        else:
            words = race_text.reason(why)
            out.append(f"{label} {status} (n={n})" + (f": {words}" if words else ""))
    return out


def _raced_line(c: Choice) -> str:
    """A raced point: the race's pick (or undecided), and the race in one line."""
    race, d = c.race, c.decision
    assert race is not None
    if not d.names_one:
        return f"best at {c.point.label}: undecided; {race_line(race)}"
    why = (
        "the leader"
        if d.chosen == d.leader
        else f"the smallest within {percent(d.margin)} of the leader {budget_label(d.leader)}"
    )
    return f"best at {c.point.label}: {c.label} ({_tpot(c)}; {why}); {race_line(race)}"


def point_detail(c: Choice) -> list[str]:
    """Under a raced point's line: who left the race when and why, who was as fast."""
    return race_lines(c.race) if c.race is not None else []


def load_lines(stats: Sequence[ArmStats], schedule: Schedule) -> list[str]:
    """The load table, then each point's answer, the schedule and what racing saved."""
    lines = [*text_table(LOAD_COLUMNS, load_rows(stats)), f"({LOAD_LEGEND})"]
    for c in schedule.choices:
        lines.append(point_line(c))
        lines.extend(f"  race at {c.point.label}: {x}" for x in point_detail(c))
    lines.append(f"schedule: {schedule_text(schedule)} ({schedule_how(schedule)})")
    races = [c.race for c in schedule.choices if c.race is not None]
    if races:
        spent, full = sum(r.requests for r in races), sum(r.max_requests for r in races)
        lines.append(
            f"raced points: {spent} requests of the {full} sent in full "
            f"({1 - spent / full:.0%} saved); margin {percent(races[0].equivalence)}, "
            f"minimum n {races[0].min_n}"
        )
    return lines


def load_answer(nodeid: str, schedule: Schedule, sweep: Decision[int | None] | None) -> str:
    """One sentence joining a load test's schedule to the serial sweep's decision.

    Both are the one rule's; a point agrees with the sweep when they name the same budget, or
    one names a set the other's budget is in. Where they differ, their data differ: the load
    test's own requests, and above C=1 requests that share the server.
    """
    picks = [c for c in schedule.choices if c.label is not None]
    text = schedule_text(schedule)
    if not picks:
        return f"under load ({nodeid}): {text}"
    shaky = (
        " Its points marked UNRELIABLE had a saturated or stalled client: run it again on a "
        "quieter client before acting on them."
        if any(c.unreliable for c in picks)
        else ""
    )
    said = _sweep_label(sweep)
    if sweep is None or said is None:
        return f"under load ({nodeid}): {text} (by the same rule at each load point).{shaky}"
    apart = [c for c in picks if not _agree(c.decision, sweep)]
    if not apart:
        if {c.label for c in picks} == {said}:
            return (
                f"under load ({nodeid}): tree_budget={said} at every load point too ({text})."
                f"{shaky}"
            )
        if sweep.status == "tied":
            return (
                f"under load ({nodeid}): {text}, one of the sweep's tree_budget={said} at every "
                f"load point.{shaky}"
            )
        return (
            f"under load ({nodeid}): {text}; each point's answer holds the sweep's "
            f"tree_budget={said}.{shaky}"
        )
    differ = apart[0]
    where = (
        "where requests share the server"
        if (differ.point.concurrency or 0) > 1 or differ.point.mode == "rate"
        else "on the load test's own requests"
    )
    return (
        f"under load ({nodeid}): {text}. The same rule answers {said} on the sweep's requests, "
        f"sent one at a time, and {differ.label} at {differ.point.label}, {where}: the data "
        f"differ, so for that load the load test's answer is the one.{shaky}"
    )


def _named(d: Decision[int | None]) -> set[int | None]:
    """The budgets a decision names as its answer: one, or a tied set."""
    if d.flags.budget_ignored:
        return set()
    return {d.chosen} if d.names_one else set(d.arms) if d.status == "tied" else set()


def _agree(a: Decision[int | None], b: Decision[int | None]) -> bool:
    """Two answers agree when one's budget is the other's, or is in the other's tied set."""
    x, y = _named(a), _named(b)
    return bool(x and y) and (x <= y or y <= x)


def _sweep_label(d: Decision[int | None] | None) -> str | None:
    """The sweep's answer as the schedule names it (None: it names none)."""
    if d is None or d.flags.budget_ignored:
        return None
    if d.names_one:
        return budget_label(d.chosen)
    if d.status == "tied":
        return " or ".join(budget_label(b) for b in d.arms)
    return None


def _client_limit_message(samples: Sequence[Sample], total: int, t: Timeout | None) -> str:
    """The client's own limits, said as such: no verdict on the server's outputs."""
    timed_out = [s for s in samples if CLIENT_TIMEOUT in s.codes]
    unsent = [s for s in samples if NOT_SENT in s.codes]
    limits = f" (connect={t.connect:g},read={t.read:g},total={t.total:g})" if t else ""
    lines = []
    if timed_out:
        where = ", ".join(dict.fromkeys(_where(s) for s in timed_out))
        lines.append(
            f"{len(timed_out)} of {total} requests under load got no complete answer within "
            f"the client's time limits{limits}, at {where}: the client's limit, no verdict on "
            "the outputs. If the server is only slow at this load (its queue), raise "
            "--ddtree-timeout or lower the concurrency (--ddtree-load-concurrency)"
        )
    if unsent:
        where = ", ".join(dict.fromkeys(_where(s) for s in unsent))
        lines.append(
            f"{len(unsent)} request(s) not sent or stopped mid-answer, at {where}: the stall "
            "guard stopped the point after the endpoint stalled, or sent answers past the "
            "byte cap, twice in a row"
        )
    first = (timed_out or unsent)[0].evidence
    return "\n".join(lines) + (f"\nfirst:\n{first}" if first else "")


def _where(sample: Sample) -> str:
    return f"{sample.load_point.label} tree_budget={sample.tree_budget}"


def _ms(p: Any, attr: str) -> str:
    return "-" if p is None else f"{getattr(p, attr) * 1000:.1f}"


def failure_text(failure: LoadFailure) -> str:
    """Why a load run fails (invalid requests first, then SLO misses), in words.

    Requests that got no answer within the client's time limits, or that the stall
    guard kept from being sent (``samples`` says which), are reported as that, apart
    from the requests whose outputs broke invariants.
    """
    stats, samples = failure.stats, failure.samples
    total = sum(s.requests for s in stats)
    limited = failure.limited
    broken = [s for s in samples if set(s.codes) - CLIENT_LIMIT_CODES]
    bad = failure.broken
    parts = []
    if bad:
        codes: dict[str, int] = {}
        evidence = ""
        where = []
        for s in stats:
            for code, k in s.codes.items():
                if code not in CLIENT_LIMIT_CODES or not samples:
                    codes[code] = codes.get(code, 0) + k
            if s.invalid:
                where.append(f"{s.point.label} tree_budget={s.tree_budget}: {s.invalid}")
        evidence = (
            broken[0].evidence
            if broken
            else next((s.first_evidence for s in stats if s.invalid), "")
        )
        listed = ", ".join(f"{c} x{k}" for c, k in sorted(codes.items(), key=lambda i: -i[1]))
        parts.append(
            f"{bad} of {total} requests under load broke output-quality invariants ({listed}); "
            f"not counted in the latencies; at {'; '.join(where)}\nfirst evidence:\n{evidence}"
        )
    if limited:
        parts.append(_client_limit_message(limited, total, failure.timeout))
    if parts:
        return "\n".join(parts)
    misses, withheld, held = [], [], set()
    for s in stats:
        if s.slo_met is False:
            line = (
                f"{s.point.label} tree_budget={s.tree_budget}: goodput {s.goodput_share:.1%} "
                f"< {s.slo.goodput:.0%} required by {s.slo}"  # type: ignore[union-attr]
                f" (TTFT p99 {_ms(s.ttft, 'p99')} ms, TPOT p99 {_ms(s.tpot, 'p99')} ms, "
                f"e2e p99 {_ms(s.e2e, 'p99')} ms)"
            )
            if s.unreliable:
                assert s.client is not None
                held.add(s.client.state())
                withheld.append(
                    f"{line}; client {s.client.state().lower()}: {client_reason(s.client)}"
                )
            else:
                misses.append(line)
    if misses:
        return f"SLO missed at {len(misses)} load point(s):\n" + "\n".join(misses)
    if withheld:
        # a saturated client queues its own work (less load per process helps); a stalled one
        # was not run by a busy machine (more processes would make that worse)
        ways = []
        if "SATURATED" in held:
            ways.append("lower the concurrency or spread the load over processes with -n")
        if "STALLED" in held:
            ways.append("run on a quieter machine")
        return (
            "SLO verdict withheld: the client was saturated or stalled, so its own delay is in "
            f"the latencies ({'; '.join(ways)}):\n" + "\n".join(withheld)
        )
    return ""


def schedule_how(schedule: Schedule) -> str:
    """How the choice varies with load, in words: ``changes with load``, ``same at every
    load point``, or how many points the race left undecided."""
    undecided = sum(1 for c in schedule.choices if c.undecided and not c.chosen)
    points = sum(1 for c in schedule.choices if c.chosen or c.undecided)
    if points == 0:
        return "no point has a valid budget"
    if schedule.changes_with_load:
        what = "changes with load"
    elif undecided == points:
        return "undecided at every load point"
    else:
        what = "same at every decided load point" if undecided else "same at every load point"
    return f"{what}; undecided at {undecided} of {points}" if undecided else what


def schedule_text(schedule: Schedule) -> str:
    """``C<=4: 128, C<=16: 64, C>16: 16`` (``rate<=2/s: ...`` for rates); one per mode."""
    parts: list[str] = []
    for mode in ("concurrency", "rate"):
        picks = [c for c in schedule.choices if c.point.mode == mode and (c.chosen or c.undecided)]
        if not picks:
            continue
        name, unit = ("C", "") if mode == "concurrency" else ("rate", "/s")
        groups: list[tuple[float, str | None]] = []  # (highest value, budget label)
        for c in picks:
            label = c.label or "undecided"
            if groups and groups[-1][1] == label:
                groups[-1] = (c.point.value, label)
            else:
                groups.append((c.point.value, label))
        if len(groups) == 1:
            parts.append(f"all {name}: {groups[0][1]}")
            continue
        for i, (top, budget) in enumerate(groups):
            if i < len(groups) - 1:
                parts.append(f"{name}<={top:g}{unit}: {budget}")
            else:
                parts.append(f"{name}>{groups[i - 1][0]:g}{unit}: {budget}")
    return ", ".join(parts) if parts else "no valid budget"


def none_text(why: NoneWhy | None) -> str:
    """Why no budget is best at a point, by what the budgets lacked."""
    if why is None or why.kind == "no valid":
        return "no budget had every request valid"
    text = (
        "no token counts: the server sent no usage and no token counter counted the answers"
        if why.kind == "no counts"
        else "no TPOT: no valid answer had a token after its first event"
    )
    if why.invalid:
        text += f"; the other {why.invalid} budget(s) had invalid requests"
    return text


def unraced_text(note: Unraced) -> str:
    """Why an adaptive sweep ran a load test's points in full (empty when it raced)."""
    if note == "split":
        return (
            "adaptive sweep: load points run in full under xdist --dist each "
            "(each worker sees only its share, so the workers cannot race together)"
        )
    if note == "one budget":
        return "adaptive sweep: one budget, nothing to race: its points run in full"
    return ""
