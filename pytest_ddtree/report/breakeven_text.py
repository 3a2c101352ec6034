"""The break-even map in words: the compact map, its crossover and slope, and one sentence
naming each depth and its choice. The terminal, ``sweep.json``'s text and the HTML take
them from here."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_ddtree.core.wording import percent
from pytest_ddtree.measure.breakeven import OFF, BreakEvenMap, Cell, Ratio, arm_label
from pytest_ddtree.measure.load.arrivals import LoadPoint

__all__ = ["NOT_MEASURED", "breakeven_answer", "cell_text", "map_lines", "ratio_text"]

#: what a map without a target-only twin says of the speedup
NOT_MEASURED = "speedup not measured: give --ddtree-baseline-endpoint (a target-only twin)"


def ratio_text(r: Ratio) -> str:
    """``1.90x [1.80, 2.00]``."""
    return f"{r.estimate:.2f}x [{r.low:.2f}, {r.high:.2f}]"


def cell_text(c: Cell) -> str:
    """A map cell: ``64 1.90x [1.80, 2.00]``, ``off (best 64 0.84x [...])``, ``undecided``."""
    best = "" if c.speedup is None else f"best {arm_label(c.best)} {ratio_text(c.speedup)}"
    if not c.decision.has_leader:
        return "no valid answer"
    if not c.answered:
        lead = arm_label(c.decision.leader)
        return f"undecided ({lead} leads{'; ' + best if best else ''})"
    if c.off:
        return f"off ({best or _excluded(c) or 'no budget timed'})"
    ratio = c.speedups.get(c.answer)
    return arm_label(c.answer) + ("" if ratio is None else f" {ratio_text(ratio)}")


def _choice(c: Cell, baseline: bool) -> str:
    """A depth's choice in the sentence."""
    if not c.decision.has_leader:
        return "no valid answer"
    if not c.answered:
        among = ", ".join(arm_label(a) for a in c.decision.arms)
        lead = arm_label(c.decision.leader)
        if c.speedup is not None and c.speedup.faster and OFF not in c.decision.arms:
            return (
                f"speculation on, the budget undecided among {among} ({lead} leads, "
                f"{ratio_text(c.speedup)} over the target alone)"
            )
        return f"undecided among {among} ({lead} leads)"
    if c.off:
        if c.speedup is not None:
            return f"speculation off (best budget {ratio_text(c.speedup)})"
        why = _excluded(c)
        return f"speculation off ({why})" if why else "speculation off"
    ratio = c.speedups.get(c.answer)
    over = f", {ratio_text(ratio)} over the target alone" if ratio is not None else ""
    return f"tree_budget={arm_label(c.answer)}{over if baseline else ''}"


def _excluded(c: Cell) -> str:
    """``64 excluded: an invalid answer``, for a cell whose budgets all left for one."""
    gone = [arm_label(a) for a in c.decision.excluded if a != OFF]
    return f"{', '.join(gone)} excluded: an invalid answer not the target alone's" if gone else ""


def _key(c: Cell) -> str:
    """What groups neighbouring depths in the sentence: the same answer (an undecided one
    with the same leader and contenders)."""
    if not c.answered:
        return f"undecided {arm_label(c.decision.leader)} {c.decision.arms}"
    return arm_label(c.answer)


def _point_sentence(cells: Sequence[Cell], baseline: bool) -> str:
    """``up to 2048 prompt tokens: ...; at 8192: ...`` for one load point's cells."""
    cells = sorted(cells, key=lambda c: c.depth)
    groups: list[list[Cell]] = []
    for c in cells:
        if groups and _key(groups[-1][-1]) == _key(c):
            groups[-1].append(c)
        else:
            groups.append([c])
    parts = []
    for i, g in enumerate(groups):
        lo, hi = g[0].depth, g[-1].depth
        if len(g) == 1:
            where = f"at {lo}" if i else f"at {lo} prompt tokens"
        elif i == 0:
            where = f"up to {hi} prompt tokens"
        else:
            where = f"from {lo} to {hi}"
        parts.append(f"{where}: {_choice(g[-1], baseline)}")
    return "; ".join(parts)


def breakeven_answer(m: BreakEvenMap) -> str:
    """The map's answer in one sentence per load point (see the module docstring)."""
    out = []
    for p in m.points:
        at = "" if len(m.points) == 1 else f"at {p.label}, "
        out.append(at + _point_sentence([c for c in m.cells if c.point == p], m.baseline))
    text = "Break-even: " + " / ".join(out) + "."
    if not m.baseline:
        text += f" ({NOT_MEASURED}.)"
    return text


def _crossover_text(m: BreakEvenMap, p: LoadPoint) -> str:
    if not m.baseline:
        return f"crossover at {p.label}: not measured (no target-only twin)"
    found = m.crossovers.get(p.label)
    if found is None:
        return f"crossover at {p.label}: none up to {max(m.depths)} prompt tokens"
    return (
        f"crossover at {p.label}: from {found} prompt tokens the best budget is slower than "
        "the target alone (its speedup's interval lies below 1)"
    )


def _two_intervals(m: BreakEvenMap) -> list[str]:
    """Why a cell can be undecided while its speedup's interval excludes 1 (said only where
    one is)."""
    odd = [
        c
        for c in m.cells
        if not c.answered
        and c.decision.has_leader
        and OFF in c.decision.arms
        and c.speedup is not None
        and (c.speedup.faster or c.speedup.slower)
    ]
    if not odd:
        return []
    where = ", ".join(f"{c.depth} at {c.point.label}" for c in odd)
    margin = percent(odd[0].decision.margin)
    return [
        f"undecided though the speedup's interval excludes 1 ({where}): a cell is decided by "
        f"its race, on an interval of its own (the requests blocked by lap, at each look's "
        f"confidence) against the {margin} margin, wider than the paired speedup's; more "
        "requests (--ddtree-sweep-requests) narrow it"
    ]


def map_lines(m: BreakEvenMap) -> list[str]:
    """The compact map (depth by load point), the crossover, the acceptance slope and the
    answer."""
    head = ["depth", *(p.label for p in m.points)]
    rows = [head]
    for d in m.depths:
        rows.append([str(d), *(cell_text(m.cell(d, p)) for p in m.points)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    conf = next((c.decision.confidence for c in m.cells), 0.95)
    lines.append(
        f"(cells: the answer and its speedup over the target alone, decode rate, "
        f"{percent(conf)} interval; off = speculation off)"
    )
    lines.extend(_crossover_text(m, p) for p in m.points)
    lines.extend(_two_intervals(m))
    e2e = [
        f"{c.depth} at {c.point.label} {ratio_text(c.e2e)}" for c in m.cells if c.e2e is not None
    ]
    if e2e:
        lines.append(f"end to end, the best budget over the target alone: {'; '.join(e2e)}")
    s = m.slope
    if s is not None:
        lines.append(
            f"acceptance per doubling of the prompt: {s.per_doubling:+.3f} "
            f"[{s.low:+.3f}, {s.high:+.3f}] ({s.figure}, n={s.n})"
        )
    skipped = sum(c.not_compared for c in m.cells)
    if skipped:
        lines.append(
            f"{skipped} answer(s) not compared: each broke an invariant its diagnosis could pin "
            "on no layer (undetermined; the diagnoses say why)"
        )
    spent = sum(c.requests for c in m.cells)
    lines.append(f"requests: {spent} (each cell raced; a decided cell stops spending)")
    lines.extend(reuse_lines(m))
    lines.append(breakeven_answer(m))
    return lines


#: a second turn held this much less of its prompt in the cache with speculation than without
REUSE_GAP = 0.10


def reuse_lines(m: BreakEvenMap) -> list[str]:
    """Each depth's second turns: how much of the conversation the prefix cache held, with
    speculation off and at the best budget, and a warning where speculation held less."""
    if not m.reuse:
        return []
    if all(r.reported == 0 for r in m.reuse):
        n = sum(r.turns for r in m.reuse)
        return [
            f"second turns: {n} sent, none reported its cached prompt tokens "
            "(usage.prompt_tokens_details.cached_tokens: vLLM --enable-prompt-tokens-details, "
            "SGLang --enable-cache-report)"
        ]
    out = []
    for depth in sorted({r.depth for r in m.reuse}):
        arms = [r for r in m.reuse if r.depth == depth]
        parts = []
        for r in arms:
            held = "not reported" if r.cached is None else f"{r.cached:.0%} cached"
            ttft = "" if r.ttft is None else f", TTFT p50 {r.ttft * 1000:,.0f} ms"
            parts.append(f"{arm_label(r.arm)} {held}{ttft} (n={r.reported}/{r.turns})")
        out.append(f"second turn at {depth}: {'; '.join(parts)}")
        off = next((r.cached for r in arms if r.arm == OFF), None)
        out.extend(
            f"WARNING: at {depth} prompt tokens speculation ({arm_label(r.arm)}) held "
            f"{r.cached:.0%} of a second turn in the prefix cache, the target alone {off:.0%}: "
            "speculation costs this deployment its prefix reuse"
            for r in arms
            if off is not None
            and r.arm != OFF
            and r.cached is not None
            and r.cached < off - REUSE_GAP
        )
    return out
