"""How a number that a constant defines is written in a sentence, so the text follows it.

A confidence, a margin or a threshold appears in many sentences; each renders it from its
constant with :func:`percent`, never by writing the number again.

A warning that is said whole in one place and by its opening in another (the run's caveats)
is a :class:`Note`: its ``head`` and its ``detail`` are kept apart, so no code cuts a
sentence back into its parts.
"""

from __future__ import annotations

from dataclasses import dataclass


def percent(fraction: float) -> str:
    """``0.95`` as ``95%``, ``0.975`` as ``97.5%``, ``0.025`` as ``2.5%``."""
    return f"{round(fraction * 100, 6):g}%"


@dataclass(frozen=True)
class Note:
    """A warning in two parts: ``head`` (what happened, as the run's caveats say it) and
    ``detail`` (the counts and the evidence); ``str()`` is the whole line."""

    head: str
    detail: str = ""
    #: between the two parts
    sep: str = ": "

    def __str__(self) -> str:
        return f"{self.head}{self.sep}{self.detail}" if self.detail else self.head

    def labelled(self, label: str) -> Note:
        """The same note with ``label`` before its head."""
        return Note(f"{label}{self.head}", self.detail, self.sep)


def signed_percent(x: float, digits: int = 1) -> str:
    """``x`` (a fraction) as a signed percentage; a value that rounds to zero is ``+0.0%``,
    never ``-0.0%``."""
    value = round(100 * x, digits) + 0.0  # adding 0.0 turns -0.0 into 0.0
    return f"{value:+.{digits}f}%"
