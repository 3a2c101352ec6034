"""How a number that a constant defines is written in a sentence, so the text follows it.

A confidence, a margin or a threshold appears in many sentences; each renders it from its
constant with :func:`percent`, never by writing the number again.
"""

from __future__ import annotations


def percent(fraction: float) -> str:
    """``0.95`` as ``95%``, ``0.975`` as ``97.5%``, ``0.025`` as ``2.5%``."""
    return f"{round(fraction * 100, 6):g}%"
