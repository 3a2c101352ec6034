"""Loops at the end of an answer: a unit the tail repeats verbatim up to the cut.

A model that loops until ``max_tokens`` ends in the same unit said again and
again: a phrase, a table row, a code line, one digit or one character of any
script. The unit is found as a period of the answer's tail, on the model's own
token ids when an exact tokenizer gave them, else on characters; numbered list
items are compared with their ordinal masked, since "13. Grey", "14. Grey" is
the same item said again.

The search is suffix-based: the last few elements (the key) are looked up
backwards with ``rfind`` (C speed); each earlier occurrence at distance ``q`` is
a candidate period, and the run of the tail that has period ``q`` is measured by
comparing slices (galloping, then bisecting). Healthy text offers a handful of
candidates, a loop a few dozen, and multiples of a period already measured are
skipped, so the cost stays in microseconds.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass

TOKEN_TAIL = 768
"""The longest run measured, in tokens (about 3,000 characters of English)."""
TOKEN_MAX_PERIOD = 256
"""The longest unit looked for, in tokens (a paragraph)."""
CHAR_TAIL = 2400
"""Characters of the tail searched without token ids (about 600 tokens)."""
CHAR_MAX_PERIOD = 800
LINE_MAX_PERIOD = 8
"""The longest unit of a numbered list looked for, in lines (an item and its blank lines)."""
_TOKEN_KEY = 4
_CHAR_KEY = 4


@dataclass(frozen=True)
class TailLoop:
    """A unit repeated verbatim at the end of a sequence, up to the cut.

    ``period`` and ``span`` are counted in ``kind`` (tokens, characters or the
    lines of a numbered list); ``repeats`` is how many whole units the span holds
    (a cut last unit is not counted); ``start`` is the index of the span's first
    element and ``total`` the number of elements in the answer. ``unit`` is one
    unit as text, as the loop first wrote it, and ``char_start`` the character
    where it starts (-1 when the text of a token loop could not be placed).
    """

    kind: str
    period: int
    span: int
    start: int
    total: int
    unit: str
    char_start: int
    slack: int = 0

    @property
    def repeats(self) -> int:
        """Whole units in the span (``slack`` elements short of a whole unit count)."""
        return (self.span + self.slack) // self.period


def _has_period(s: str | list[int], n: int, q: int, length: int) -> bool:
    """Whether the last ``length`` of the first ``n`` elements of ``s`` have period ``q``."""
    return s[n - length + q : n] == s[n - length : n - q]


def _periodic_span(s: str | list[int], n: int, q: int, known: int, cap: int = 0) -> int:
    """The longest suffix of the first ``n`` elements with period ``q``, at most
    ``cap`` long (0: all ``n``), given that the last ``known`` of them have it."""
    top = min(n, cap) if cap else n
    lo, step = known, q
    while lo < top:
        hi = min(top, lo + step)
        if not _has_period(s, n, q, hi):
            break
        lo, step = hi, step * 2
    else:
        return top
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _has_period(s, n, q, mid):
            lo = mid
        else:
            hi = mid
    return lo


def tail_periods(s: str, max_period: int, key: int, need: int = 2) -> list[tuple[int, int]]:
    """``(period, span)`` of every run the end of ``s`` repeats at least twice.

    The last ``key`` characters are looked up backwards (``rfind``); each earlier
    occurrence within ``max_period`` is a candidate period. A period that is a
    multiple of one already measured and no longer than its span is skipped: its
    span would be the same, its unit longer. With ``need`` of 3 or more, a
    candidate whose key is not found ``2 * q`` back too is dropped before it is
    measured (healthy prose repeats its short keys at random distances): every run
    of at least ``2 * q + key`` is kept.
    """
    n = len(s)
    k = min(key, n - 1)
    if k < 1:
        return []
    needle = s[n - k :]
    floor = max(0, n - k - max_period)
    end = n - 1
    found: list[tuple[int, int]] = []
    while True:
        pos = s.rfind(needle, floor, end)
        if pos < 0:
            break
        end = pos + k - 1
        q = n - k - pos
        if need > 2 and (pos < q or not s.startswith(needle, pos - q)):
            continue
        if any(q % q0 == 0 and q <= span0 for q0, span0 in found):
            continue
        span = _periodic_span(s, n, q, q + k)
        if span >= 2 * q:
            found.append((q, span))
    return found


def pick(found: list[tuple[int, int]], repeats: int, min_span: int) -> tuple[int, int] | None:
    """The run covering most of the tail among those with ``repeats`` whole units
    over at least ``min_span`` elements (the shorter period on a tie), else None."""
    fit = [(q, span) for q, span in found if span // q >= repeats and span >= min_span]
    return max(fit, key=lambda t: (t[1], -t[0])) if fit else None


def _id_periods(ids: list[int], n: int, key: int) -> list[tuple[int, int]]:
    """``tail_periods`` for the first ``n`` of ``ids``: the ids a period can reach
    back to are packed as 32-bit integers for ``rfind`` (C speed; a match that
    straddles two ids is skipped), and runs are measured on the list itself, over
    ``TOKEN_TAIL`` ids at most. Raises ``OverflowError`` or ``TypeError`` on what
    is not token ids."""
    k = min(key, n - 1)
    if k < 1:
        return []
    lo = max(0, n - k - TOKEN_MAX_PERIOD)
    window = array("I", ids[lo:n]).tobytes()
    m = n - lo
    needle = window[(m - k) * 4 :]
    end = (m - 1) * 4
    found: list[tuple[int, int]] = []
    while True:
        pos = window.rfind(needle, 0, end)
        if pos < 0:
            break
        end = pos + k * 4 - 1
        if pos % 4:
            continue
        q = m - k - pos // 4
        if any(q % q0 == 0 and q <= span0 for q0, span0 in found):
            continue
        span = _periodic_span(ids, n, q, q + k, TOKEN_TAIL)
        if span >= 2 * q:
            found.append((q, span))
    return found


def token_periods(ids: list[int]) -> list[tuple[int, int, int]]:
    """``(period, span, slack)`` of the runs the end of ``ids`` repeats, in tokens.

    The last id is searched apart: re-tokenising a cut answer may split its last
    token differently, so it joins a run only when it continues it. When it does
    not, a unit up to ``slack`` tokens short of whole still counts as whole
    (``TOKEN_SLACK``, less than the period). Runs are measured over the last
    ``TOKEN_TAIL`` ids at most.
    """
    n = len(ids) - 1
    try:
        runs = _id_periods(ids, n, _TOKEN_KEY)
    except (OverflowError, TypeError):
        return []  # not token ids
    out = []
    for q, span in runs:
        if ids[n] == ids[n - q]:
            out.append((q, span + 1, 0))
        else:
            out.append((q, span, min(TOKEN_SLACK, q - 1)))
    return out


TOKEN_SLACK = 2
"""A token unit up to two tokens short of whole counts as whole when the answer's last
id breaks the loop: that id is left out of the search, and re-tokenising the cut answer
may merge the model's last tokens. SmolLM2 wrote ".", "\\n", "\\n" inside its loop,
and ``/tokenize`` of the cut answer ends in ".", "\\n\\n": without the slack the loop's
third unit, complete in the text, counts as two."""


def token_loop(ids: list[int], text: str, repeats: int = 2, min_span: int = 0) -> TailLoop | None:
    """The loop at the end of ``ids``, the token ids of ``text``: ``repeats`` whole
    units over at least ``min_span`` tokens (``token_periods``), the one covering
    most of the tail (the shorter period on a tie)."""
    fit = [
        run
        for run in token_periods(ids)
        if (run[1] + run[2]) // run[0] >= repeats and run[1] >= min_span
    ]
    if not fit:
        return None
    q, span, slack = max(fit, key=lambda t: (t[1], -t[0]))
    start = len(ids) - span - (ids[-1] != ids[-1 - q])  # the last id, outside the run
    unit, at = _unit_text(text, (span + slack) / q)
    return TailLoop("tokens", q, span, start, len(ids), unit, at, slack)


def _unit_text(text: str, token_repeats: float) -> tuple[str, int]:
    """One token unit as text, and where the loop starts in ``text``.

    Token ids do not say which characters they cover, so the unit is read off the
    characters: the tail's longest character loop, whose unit repeats about as
    often as the token unit (``m`` character units per token unit when the
    characters repeat more often, as "ab" in a loop of the tokens "aba", "bab").
    """
    tail = text[-CHAR_TAIL:]
    found = tail_periods(tail, CHAR_MAX_PERIOD, _CHAR_KEY)
    if not found:
        return "", -1
    q, span = max(found, key=lambda t: (t[1], -t[0]))
    m = max(1, round(span / q / token_repeats))
    return readable_unit(text, len(text) - span, m * q)


def readable_unit(text: str, at: int, size: int) -> tuple[str, int]:
    """The unit of ``size`` characters of a loop starting at ``at``, turned to
    start where a reader would: at a line that is not blank when the unit holds a
    line break, else at a word when the loop does not already start at one.
    Returns the unit and the character where its first whole copy starts."""
    unit = text[at : at + size]
    cut = 0
    if at > 0 and text[at - 1] != "\n":
        cut = unit.find("\n") + 1
        if not cut and not (text[at - 1].isspace() or unit[:1].isspace()):
            cut = unit.find(" ") + 1
    cut += len(unit[cut:]) - len(unit[cut:].lstrip("\n"))  # a blank line ends the unit
    if 0 < cut < size and at + cut + size <= len(text):
        at += cut
        unit = text[at : at + size]
    return unit, at


def char_periods(text: str, need: int = 2) -> list[tuple[int, int, int]]:
    """``(period, span, bytes)`` of the runs the end of ``text`` repeats, in
    characters, leaving out units of ASCII punctuation and spaces alone: a rule
    of dashes or dots is what healthy tables and code draw, and a tokenizer
    folds it into a few tokens. ``bytes`` is the run's UTF-8 size, which weighs
    a character of any script about as a tokenizer does."""
    tail = text[-CHAR_TAIL:]
    return [
        (q, span, len(tail[-span:].encode("utf-8", "surrogatepass")))
        for q, span in tail_periods(tail, CHAR_MAX_PERIOD, _CHAR_KEY, need)
        if not _drawing(tail[-q:])
    ]


def char_loop(text: str, repeats: int = 2, min_bytes: int = 0) -> TailLoop | None:
    """The loop at the end of ``text``: ``repeats`` whole units over at least
    ``min_bytes`` UTF-8 bytes (``char_periods``)."""
    fit = [(q, span) for q, span, size in char_periods(text, repeats) if size >= min_bytes]
    best = pick(fit, repeats, 0)
    if best is None:
        return None
    q, span = best
    unit, at = readable_unit(text, len(text) - span, q)
    return TailLoop("characters", q, span, len(text) - span, len(text), unit, at)


_DRAWING = frozenset(" \t\n\r!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def _drawing(unit: str) -> bool:
    return all(c in _DRAWING for c in unit)


_ORDINAL = re.compile(r"^([ \t]*)\d{1,4}([.)])", re.MULTILINE)
_HAS_ORDINAL = re.compile(r"\n[ \t]*\d{1,4}[.)]")
_MASKED = re.compile(r"[ \t]*#[.)]")


def list_loop(text: str, repeats: int = 2, min_bytes: int = 0) -> TailLoop | None:
    """A numbered list whose items repeat with only the ordinal counting up.

    Lines of the tail are compared with a leading ordinal masked (``13. Grey``
    reads ``#. Grey``); only units holding a numbered line count, since verbatim
    lines are the token or character loop's business.
    """
    tail = text[-CHAR_TAIL:]
    if not _HAS_ORDINAL.search(tail):
        return None
    lines = tail.split("\n")
    lines.pop()  # the cut line, or the empty string after a final newline
    if len(lines) < 2:
        return None
    masked = [_ORDINAL.sub(r"\1#\2", line) for line in lines]
    codes: dict[str, int] = {}
    seq = "".join(chr(codes.setdefault(m, len(codes))) for m in masked)
    fit = [
        (q, span)
        for q, span in tail_periods(seq, LINE_MAX_PERIOD, 1)
        if span // q >= repeats
        and any(_MASKED.match(m) for m in masked[len(masked) - q :])
        and sum(len(line.encode("utf-8", "surrogatepass")) + 1 for line in lines[-span:])
        >= min_bytes
    ]
    if not fit:
        return None
    q, span = max(fit, key=lambda t: (t[1], -t[0]))
    first = len(lines) - span
    # start the unit at its numbered line, as the list reads ("8. Tip", then a blank)
    first += next(i for i in range(q) if _MASKED.match(masked[first + i]))
    cut = len(text) - len(tail)
    at = cut + sum(len(line) + 1 for line in lines[:first])
    unit = "\n".join(lines[first : first + q]) + "\n"
    before = text.count("\n", 0, cut)  # lines before the tail
    return TailLoop("lines", q, span, before + first, before + len(lines), unit, at)
