"""What the arms' own figures say in words: the warnings for arms without speculation.

``measure`` finds them (:func:`pytest_ddtree.measure.arm.speculation_gaps`, typed); the
terminal's tables, the HTML notices and the run's caveats all word them here, the caveats by
each note's head alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.core.wording import Note
from pytest_ddtree.measure.arm import ArmStats, SpeculationGap, speculation_gaps

__all__ = ["NO_SPEC_STATS", "gap_note", "speculation_notes", "speculation_warnings"]

#: the warning's opening, on every engine and in every table's legend
NO_SPEC_STATS = "no speculative statistics came back: is speculation on?"


def gap_note(gap: SpeculationGap) -> Note:
    """One gap as a note: what happened, then the counts."""
    names = ", ".join(budget_label(b) for b in gap.budgets)
    which = f"{'every budget' if gap.every else 'budget'} {names}"
    points = ", ".join(gap.points)
    if gap.kind == "no statistics":
        where = f"{which} ({points})" if points else which
        return Note(
            NO_SPEC_STATS,
            f"{gap.requests} answer(s) at {where} were read for speculative statistics and "
            "none carried drafts, acceptance or rounds; these timings may be the target "
            "model's alone",
            " ",
        )
    return Note(
        f"speculation never drafted at {which}",
        f"0 draft tokens in {gap.requests} request(s) that reported their drafts"
        f"{f', at {points}' if points else ''}; these timings are the target model's alone, "
        "not speculative decoding",
    )


def speculation_notes(stats: Sequence[ArmStats], *, by_budget: bool = False) -> list[Note]:
    """The notes for the arms of ``stats`` without speculation (``by_budget``: a load
    test's arms, one note per budget)."""
    return [gap_note(g) for g in speculation_gaps(stats, by_budget=by_budget)]


def speculation_warnings(stats: Sequence[ArmStats], *, by_budget: bool = False) -> list[str]:
    """:func:`speculation_notes` as whole lines."""
    return [str(n) for n in speculation_notes(stats, by_budget=by_budget)]
