"""The target's decoding state: its layout, its phases, and a free choice of the target."""

from __future__ import annotations

# state: (pos, c1, c2, c3, sentences, phase, forced, fidx, after_forced, line, buf, answer_start)
_State = tuple[int, int, int, int, int, int, tuple[int, ...], int, int, int, tuple[int, ...], int]

# phases of the target's state machine
_ANSWER, _THINK, _FORCED, _FRESH = 0, 1, 2, 3


def _free(s: _State, s2: _State, drafted: int, tok: int) -> bool:
    """True when the target sampled ``tok``, not ``drafted``, freely (no rule, stop, sentence)."""
    return tok != drafted and s[5] == s2[5] != _FORCED and s[4] == s2[4] and s2[0] == s[0] + 1


def _unit(*parts: int) -> float:
    """A number in (0, 1) hashed from ``parts`` (integers hash alike in every process)."""
    return ((hash(parts) & 0xFFFFFFFF) + 0.5) / 4294967296.0
