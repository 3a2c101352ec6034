"""What the arms' own figures say in words: the warnings for arms without speculation.

``measure`` finds them (:func:`pytest_ddtree.measure.arm.speculation_gaps`, typed); the
terminal's tables, the HTML notices and the run's caveats all word them here, the caveats by
each note's head alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.core.wording import Note
from pytest_ddtree.measure.arm import ArmStats, Place, SpeculationGap, speculation_gaps

__all__ = [
    "NO_SPEC_STATS",
    "PLACE_TEXT",
    "acceptance_cell",
    "gap_note",
    "speculation_notes",
    "speculation_warnings",
    "verdict_text",
]

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


def verdict_text(st: ArmStats) -> str:
    """The verdict cell: the budget's place in words, then what qualifies it."""
    if st.place is None:
        return ""
    if st.place == "invalid":
        return f"INVALID ({', '.join(sorted(st.codes)) or 'invalid'})"
    text = PLACE_TEXT[st.place]
    if st.place == "budget ignored":
        return text
    if st.place == "slower" and st.left_after is not None:
        text += f", left after round {st.left_after}"
    if st.echoed_mismatch and st.all_valid:
        text += " (echoed budget differs)"
    return text + (" (DRIFTING)" if st.drifting else "")


def acceptance_cell(st: ArmStats) -> str:
    """An arm's acceptance cell, in the sweep and load tables alike: the mean acceptance
    length, else the acceptance rate (``rate 0.85``), ``no drafts``, ``no stats`` (no
    speculative statistics came back), or ``-``.

    A server that reports drafted and accepted tokens but not its rounds
    (llama.cpp) has no honest length; its rate is shown, marked as such.
    """
    if st.mean_acceptance_length is not None:
        return f"{st.mean_acceptance_length:.2f}"
    if st.mean_acceptance_rate is not None:
        return f"rate {st.mean_acceptance_rate:.2f}"
    if st.no_spec_stats:
        return "no stats"
    return "no drafts" if st.never_drafted else "-"
