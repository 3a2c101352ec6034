"""Checks on the content itself: leaks, degenerate and non-printable text."""

from __future__ import annotations

import re
import unicodedata
import zlib
from collections import Counter
from collections.abc import Iterator
from functools import lru_cache

from pytest_ddtree.checks.invariants._context import Context, clip, excerpt
from pytest_ddtree.checks.invariants._loop import TailLoop, char_loop, list_loop, token_loop
from pytest_ddtree.core.expectation import DEFAULT_SPECIAL_TOKENS
from pytest_ddtree.core.violation import Violation

_ROLE_WORD = re.compile(r"^[A-Za-z]+:$")
# Tags a tokenizer may list as special that are also everyday HTML/Markdown.
_HTML_LIKE = re.compile(r"^</?[A-Za-z]{1,2}>$")
_THINK_TAGS = frozenset({"<think>", "</think>"})
_FENCE = re.compile(r"^[ \t]*(```|~~~)", re.MULTILINE)


class _Literals:
    """An alternation of literal strings, with a first-character prefilter:
    when no marker's first character occurs in the text (the common case for
    '<' and '['-led markers in prose), the regex never runs."""

    def __init__(self, tokens: tuple[str, ...]) -> None:
        ordered = sorted({t for t in tokens if t}, key=len, reverse=True)
        self.firsts = tuple(sorted({t[0] for t in ordered}))
        self.pattern = re.compile("|".join(re.escape(t) for t in ordered)) if ordered else None

    def search(self, text: str) -> re.Match[str] | None:
        if self.pattern is None or not any(c in text for c in self.firsts):
            return None
        return self.pattern.search(text)

    def findall(self, text: str) -> list[str]:
        return [] if self.pattern is None else self.pattern.findall(text)


@lru_cache(maxsize=64)
def _literals(tokens: tuple[str, ...]) -> _Literals:
    return _Literals(tokens)


class _RolePatterns:
    """Role words and a compiled pattern of literal markers, for one marker set."""

    def __init__(self, markers: tuple[str, ...]) -> None:
        self.words: tuple[str, ...] = tuple(
            sorted({m[:-1].lower() for m in markers if _ROLE_WORD.match(m)})
        )
        self.literal = _literals(tuple(m for m in markers if not _ROLE_WORD.match(m)))


@lru_cache(maxsize=64)
def _role_patterns(markers: tuple[str, ...]) -> _RolePatterns:
    return _RolePatterns(markers)


def _fenced_spans(text: str) -> list[tuple[int, int]]:
    """Spans of fenced code blocks (an unclosed fence runs to the end)."""
    if "```" not in text and "~~~" not in text:
        return []
    spans: list[tuple[int, int]] = []
    opened: int | None = None
    for m in _FENCE.finditer(text):
        if opened is None:
            opened = m.start()
        else:
            spans.append((opened, m.end()))
            opened = None
    if opened is not None:
        spans.append((opened, len(text)))
    return spans


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    return any(a <= pos < b for a, b in spans)


def _turn_prefix(prefix: str) -> bool:
    """Whether the text between line start and a role word still reads as the
    start of a turn: nothing, or up to three non-space, non-letter characters
    ("1user:", "**User:**"). Indentation or a list bullet means code or prose."""
    return len(prefix) <= 3 and not any(c.isspace() or c.isalpha() for c in prefix)


def _skip_blanks(text: str, j: int) -> int:
    n = len(text)
    while j < n and text[j] in " \t":
        j += 1
    return j


def _role_at(text: str, low: str, j: int, words: tuple[str, ...]) -> int | None:
    """End of a 'role:' marker starting at ``j`` (after whitespace), else None."""
    n = len(text)
    while j < n and text[j].isspace():
        j += 1
    for w in words:
        if low.startswith(w, j):
            k = _skip_blanks(text, j + len(w))
            if k < n and text[k] == ":":
                return k + 1
    return None


def _find_role_leak(text: str, words: tuple[str, ...]) -> tuple[int, int, str] | None:
    """First leaked role marker as (start, end, why), or None.

    A role word followed by a colon counts only where a chat turn would begin:
    at the start of the content, repeated ("user:user:"), lower case at the
    start of a line, or capitalised at the start of a line when another role
    starts a later line (a dialogue). A lower-case role word alone on a line is
    what a ChatML turn leaves when its special tokens are stripped. Mid-sentence
    uses ("each user: a person who...") and anything in fenced code never count.
    Occurrences are found with ``str.find`` on a lower-cased copy: healthy text
    rarely contains role words, so the common case costs a few scans.
    """
    if not words:
        return None
    low = text.lower()
    if len(low) != len(text):  # lower-casing changed offsets (rare scripts): ASCII only
        low = "".join(c.lower() if c.isascii() else c for c in text)
    hits: list[tuple[int, str]] = []
    for w in words:
        i = low.find(w)
        while i >= 0:
            hits.append((i, w))
            i = low.find(w, i + len(w))
    if not hits:
        return None
    hits.sort()
    fences = _fenced_spans(text)
    capitalised: list[tuple[int, int, str]] = []
    residue: tuple[int, int, str] | None = None
    n = len(text)
    for start, w in hits:
        if start > 0 and text[start - 1].isalpha():
            continue  # "superuser", "endsystem"
        after = _skip_blanks(text, start + len(w))
        if after < n and text[after] == ":":
            end = after + 1
        else:
            if (
                residue is None
                and (start == 0 or text[start - 1] == "\n")
                and (after == n or text[after] == "\n")
                and text[start : start + len(w)] == w
                and not _inside(start, fences)
            ):
                residue = (start, after, "role word alone on a line (stripped chat template)")
            continue
        if _inside(start, fences):
            continue
        word = text[start : start + len(w)]
        head = text[:start]
        if len(head) <= 8 and not any(c.isalpha() for c in head):
            return start, end, "at the start of the content"
        rep = _role_at(text, low, end, words)
        if rep is not None:
            return start, rep, "repeated role marker"
        line_start = text.rfind("\n", 0, start) + 1
        if not _turn_prefix(text[line_start:start]):
            continue
        if word.islower():
            return start, end, "lower-case role at the start of a line"
        for s, e, other in capitalised:
            if other.lower() != w:
                return s, e, f"dialogue turns '{other}:' and '{word}:' at line starts"
        capitalised.append((start, end, word))
    return residue


def check_role_leak(ctx: Context) -> Iterator[Violation]:
    """role-leak: template role markers or role turns in content."""
    text = ctx.text
    if not text:
        return
    pats = _role_patterns(ctx.expect.role_markers)
    m = pats.literal.search(text)
    if m is not None:
        n = len(pats.literal.findall(text))
        yield ctx.violation(
            "role-leak",
            f"chat-template marker {m.group(0)!r} in content ({n} occurrence(s))",
            excerpt=excerpt(text, m.start(), m.end()),
            marker=m.group(0),
            occurrences=n,
            **ctx.stop_evidence(),
        )
        return
    found = _find_role_leak(text, pats.words)
    if found is not None:
        start, end, why = found
        yield ctx.violation(
            "role-leak",
            f"role marker {text[start:end].strip()!r} in content: {why}",
            excerpt=excerpt(text, start, end),
            marker=text[start:end],
            **ctx.stop_evidence(),
        )


def special_tokens_for(ctx: Context) -> tuple[str, ...]:
    """Special tokens in force: the expectation's, else defaults plus the tokenizer's."""
    if ctx.expect.special_tokens is not None:
        return ctx.expect.special_tokens
    extra: tuple[str, ...] = ()
    if ctx.counter is not None:
        try:
            extra = tuple(ctx.counter.special_tokens)
        except Exception:  # a counter without specials is fine
            extra = ()
    return _merged_specials(extra)


@lru_cache(maxsize=16)
def _merged_specials(extra: tuple[str, ...]) -> tuple[str, ...]:
    merged = list(DEFAULT_SPECIAL_TOKENS)
    for tok in extra:
        if tok in _THINK_TAGS or _HTML_LIKE.match(tok) or tok in merged:
            continue
        merged.append(tok)
    return tuple(merged)


def check_special_tokens(ctx: Context, *, exclude_eos: bool = False) -> Iterator[Violation]:
    """special-token-leak: special tokens in content.

    Role markers are reported as role-leak, not twice; ``exclude_eos`` drops the
    end-of-sequence token when an overrun already reported it.
    """
    text = ctx.text
    if not text:
        return
    role_literals = set(ctx.expect.role_markers)
    tokens = tuple(
        t
        for t in special_tokens_for(ctx)
        if t not in role_literals and not (exclude_eos and t == ctx.expect.eos_token)
    )
    pat = _literals(tokens)
    m = pat.search(text)
    if m is None:
        return
    counts = Counter(pat.findall(text))
    yield ctx.violation(
        "special-token-leak",
        f"special token {m.group(0)!r} in content ({sum(counts.values())} occurrence(s))",
        excerpt=excerpt(text, m.start(), m.end()),
        tokens=dict(counts),
    )


_PREAMBLE = re.compile(
    r"^[*#_>\t ]{0,6}(thinking process|thought process|reasoning process|chain of thought"
    r"|internal reasoning)[*_ \t]*:",
    re.IGNORECASE | re.MULTILINE,
)


def check_reasoning(ctx: Context) -> Iterator[Violation]:
    """reasoning-leak (thinking off) and reasoning-only."""
    text, reasoning = ctx.text, ctx.reasoning
    if reasoning.strip() and not text.strip():
        yield ctx.violation(
            "reasoning-only",
            "all output is in reasoning_content; content is empty"
            + ("" if ctx.expect.thinking else " (and thinking was off)"),
            reasoning_excerpt=clip(reasoning),
            finish_reason=ctx.finish,
            hint="raise max_tokens or disable thinking"
            if ctx.finish == "length"
            else "the reasoning parser or template swallowed the answer",
        )
        return
    if ctx.expect.thinking:
        return
    m = _literals(ctx.expect.reasoning_markers).search(text)
    if m is not None:
        yield ctx.violation(
            "reasoning-leak",
            f"reasoning marker {m.group(0)!r} in content while thinking is off",
            excerpt=excerpt(text, m.start(), m.end()),
        )
        return
    head = text[:4000]
    low = head.lower()
    gate = "process" in low or "thought" in low or "reasoning" in low
    m = _PREAMBLE.search(head) if gate else None
    if m is not None:
        yield ctx.violation(
            "reasoning-leak",
            f"reasoning preamble {m.group(1)!r} in content while thinking is off",
            excerpt=excerpt(text, m.start(), m.end()),
        )
        return
    if reasoning.strip():
        yield ctx.violation(
            "reasoning-leak",
            "reasoning_content is not empty although thinking was off "
            "(the template ignores enable_thinking)",
            reasoning_excerpt=clip(reasoning),
        )


_TAIL_CHARS = 2400


def repetition(text: str, min_words: int) -> tuple[float, float, list[tuple[str, ...]]]:
    """``(repeated 4-gram share of the tail, zlib ratio, the tail's 4-grams)``.

    The share is 0 (and no 4-grams) below ``min_words`` words in the tail:
    too few to tell a loop from a short list.
    """
    raw = text.encode("utf-8", "surrogatepass")
    ratio = len(zlib.compress(raw, 1)) / len(raw) if raw else 1.0
    words = text[-_TAIL_CHARS:].split()
    share = 0.0
    grams: list[tuple[str, ...]] = []
    if len(words) >= max(min_words, 5):
        grams = list(zip(words, words[1:], words[2:], words[3:], strict=False))
        share = 1.0 - len(set(grams)) / len(grams)
    return share, ratio, grams


_LOOP_MAX_PERIOD = 40


def loop_share(text: str, max_period: int = _LOOP_MAX_PERIOD) -> tuple[float, int]:
    """``(share of the tail's words in a final loop, the loop's period in words)``.

    A loop is a run of at most ``max_period`` words that the tail ends with, repeated at
    least three times in a row, word for word. The last word is left out: ``max_tokens``
    may cut it. ``(0.0, 0)`` when the tail does not end in a loop.
    """
    words = text[-_TAIL_CHARS:].split()[:-1]
    n = len(words)
    best = (0.0, 0)
    for period in range(1, min(max_period, n // 3) + 1):
        same = 0
        while same < n - period and words[n - 1 - same] == words[n - 1 - same - period]:
            same += 1
        if same + period >= 3 * period:
            best = max(best, ((same + period) / n, period))
    return best


def final_loop(ctx: Context) -> TailLoop | None:
    """The loop an answer cut by ``max_tokens`` ends in, when it is long enough to be
    one (``degenerate_loop_*``): on the model's token ids when an exact counter gives
    them, else on characters; a numbered list repeating its item either way."""
    e = ctx.expect
    text = ctx.text
    ids = ctx.content_ids()
    loop: TailLoop | None = None
    if ids is not None:
        loop = token_loop(ids, text, e.degenerate_loop_repeats, e.degenerate_loop_min_tokens)
    else:
        loop = char_loop(text, e.degenerate_loop_repeats, e.degenerate_loop_min_bytes)
    if loop is None:
        loop = list_loop(text, e.degenerate_loop_repeats, e.degenerate_loop_min_bytes)
    return loop


def loop_evidence(loop: TailLoop, text: str) -> dict[str, object]:
    """What a person needs to see the loop: the unit as text, its period, how many
    times it repeats, and where it starts (counting from 1)."""
    one = _KIND_ONE[loop.kind]
    where = f"{one} {loop.start + 1} of {loop.total}"
    if loop.kind != "characters" and loop.char_start >= 0:
        where += f" (character {loop.char_start + 1})"
    evidence: dict[str, object] = {
        "loop_unit": f"»{clip(loop.unit, 100)}«",
        f"loop_period_{loop.kind}": loop.period,
        "loop_repeats": loop.repeats,
        "loop_starts_at": where,
    }
    if loop.char_start >= 0:
        end = loop.char_start + len(loop.unit)
        evidence["excerpt"] = excerpt(text, loop.char_start, end)
    return evidence


_KIND_ONE = {"tokens": "token", "characters": "character", "lines": "line"}


def _loop_message(loop: TailLoop) -> str:
    one = _KIND_ONE[loop.kind]
    kind = loop.kind if loop.period > 1 else one
    if loop.kind == "lines":
        kind += " of a numbered list"
    return (
        f"output loops until max_tokens: it ends in »{clip(loop.unit, 40)}« "
        f"({loop.period} {kind}) repeated {loop.repeats} times, "
        f"from {one} {loop.start + 1} of {loop.total}"
    )


def _phrase_evidence(text: str, grams: list[tuple[str, ...]]) -> dict[str, object]:
    """The tail's most repeated word 4-gram and where it first occurs."""
    if not grams:
        return {"excerpt": clip(text[-120:])}
    gram, n = Counter(grams).most_common(1)[0]
    phrase = " ".join(gram)
    at = text.find(phrase)
    out: dict[str, object] = {"most_repeated": f"»{clip(phrase, 60)}« x{n} in the tail"}
    if at >= 0:
        out["excerpt"] = excerpt(text, at, at + len(phrase))
    return out


def check_degenerate(ctx: Context) -> Iterator[Violation]:
    """degenerate: an answer that loops until ``max_tokens``, or a long output
    dominated by repetition.

    An answer cut by ``max_tokens`` that ends in one unit repeated verbatim
    ``degenerate_loop_repeats`` times (``final_loop``: on token ids, characters or
    numbered list items) is degenerate at any length: the model was looping when
    it was cut. Any answer, cut or not, of at least ``degenerate_min_chars`` is
    also judged by three measures, any one suffices. The share of the tail's words
    taken by one run of words repeated at least three times at its end
    (``loop_share``). The zlib compression ratio of the whole text catches a loop
    of any period up to zlib's 32 KiB window, with or without spaces. The share
    of word 4-grams that repeat an earlier one, over the last ``_TAIL_CHARS``
    characters, catches a phrase loop with small variations. Healthy prose sits
    near 0-15 % repeated 4-grams (templated lists up to 57 %) and 0.25-0.5
    compression; loops sit near 90 % and below 0.1.
    """
    text = ctx.text
    e = ctx.expect
    loop = final_loop(ctx) if text and ctx.finish == "length" else None
    if loop is None and len(text) < e.degenerate_min_chars:
        return
    share, ratio, grams = repetition(text, e.degenerate_min_words)
    looped, period = loop_share(text) if grams else (0.0, 0)
    if (
        loop is None
        and share < e.degenerate_ngram_share
        and looped < e.degenerate_loop_share
        and ratio >= e.degenerate_compression
    ):
        return
    measures: dict[str, object] = {
        "repeated_4gram_share": round(share, 3),
        "loop_share": round(looped, 3),
        "loop_period_words": period,
        "compression_ratio": round(ratio, 3),
        "characters": len(text),
    }
    if loop is not None:
        message = _loop_message(loop)
        evidence = {**loop_evidence(loop, text), **measures}
    else:
        message = (
            f"output is repetitive: {share:.0%} of the tail's word 4-grams repeat, "
            f"the text compresses to {ratio:.0%} of its size"
        )
        evidence = {**measures, **_phrase_evidence(text, grams)}
    yield ctx.violation("degenerate", message, **evidence)


def _visible(text: str) -> str:
    """``text`` with characters that would not print shown as escapes."""
    return "".join(
        ch if ch.isprintable() and ch != "\ufffd" else f"\\u{ord(ch):04x}" for ch in text
    )


_PRINTABLE_ASCII = bytes(range(32, 127)) + b"\n\t\r"
_BAD_CATEGORIES = frozenset({"Cc", "Cs", "Co", "Cn"})


def check_non_printable(ctx: Context) -> Iterator[Violation]:
    """non-printable: mostly control, unassigned, surrogate or replacement characters."""
    text = ctx.text
    if not text:
        return
    if text.isascii():
        # bytes.translate deletes every printable byte in one C pass
        if not text.encode("ascii").translate(None, _PRINTABLE_ASCII):
            return
    else:
        stripped = text.replace("\n", "").replace("\t", "").replace("\r", "")
        if stripped.isprintable() and "\ufffd" not in stripped:
            return
    bad = 0
    first = -1
    for i, ch in enumerate(text):
        if ch in "\n\r\t":
            continue
        if ch == "\ufffd" or unicodedata.category(ch) in _BAD_CATEGORIES:
            bad += 1
            if first < 0:
                first = i
    share = bad / len(text)
    if bad >= 4 and share >= ctx.expect.non_printable_share:
        yield ctx.violation(
            "non-printable",
            f"{bad} of {len(text)} characters ({share:.0%}) are control, unassigned or U+FFFD",
            excerpt=_visible(excerpt(text, first, first + 1)),
        )
