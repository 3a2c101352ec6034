"""Checks on the content itself: leaks, degenerate and non-printable text."""

from __future__ import annotations

import re
import unicodedata
import zlib
from collections import Counter
from collections.abc import Iterator
from functools import lru_cache

from pytest_ddtree.invariants._context import Context, clip, excerpt
from pytest_ddtree.invariants._expectation import DEFAULT_SPECIAL_TOKENS
from pytest_ddtree.violation import Violation

_ROLE_WORD = re.compile(r"^[A-Za-z]+:$")
# Tags a tokenizer may list as special that are also everyday HTML/Markdown.
_HTML_LIKE = re.compile(r"^</?[A-Za-z]{1,2}>$")
_THINK_TAGS = frozenset({"<think>", "</think>"})
_FENCE = re.compile(r"^[ \t]*(```|~~~)", re.MULTILINE)


class _RolePatterns:
    """Compiled patterns for one set of role markers."""

    def __init__(self, markers: tuple[str, ...]) -> None:
        words = sorted({m[:-1].lower() for m in markers if _ROLE_WORD.match(m)})
        literals = sorted({m for m in markers if not _ROLE_WORD.match(m)}, key=len, reverse=True)
        self.words = frozenset(words)
        self.literal: re.Pattern[str] | None = (
            re.compile("|".join(re.escape(m) for m in literals)) if literals else None
        )
        if words:
            alt = "|".join(re.escape(w) for w in words)
            # A role word not glued to a preceding letter ("superuser:" is not a
            # role), then a colon; digits may precede it, as in "1user:".
            self.candidate: re.Pattern[str] | None = re.compile(
                rf"(?<![A-Za-z])({alt})[ \t]*:", re.IGNORECASE
            )
            self.repeat: re.Pattern[str] | None = re.compile(rf"\s*(?:{alt})[ \t]*:", re.IGNORECASE)
            # What a ChatML turn leaves behind when its special tokens are
            # stripped: the role word alone on a line, lower case.
            self.residue: re.Pattern[str] | None = re.compile(rf"^({alt})[ \t]*$", re.MULTILINE)
        else:
            self.candidate = self.repeat = self.residue = None


@lru_cache(maxsize=64)
def _role_patterns(markers: tuple[str, ...]) -> _RolePatterns:
    return _RolePatterns(markers)


@lru_cache(maxsize=64)
def _literal_pattern(tokens: tuple[str, ...]) -> re.Pattern[str] | None:
    ordered = sorted({t for t in tokens if t}, key=len, reverse=True)
    if not ordered:
        return None
    return re.compile("|".join(re.escape(t) for t in ordered))


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


def _find_role_leak(text: str, pats: _RolePatterns) -> tuple[int, int, str] | None:
    """First leaked role marker as (start, end, why), or None.

    A role word followed by a colon counts only where a chat turn would begin:
    at the start of the content, repeated ("user:user:"), lower case at the
    start of a line, or capitalised at the start of a line when another role
    starts a later line (a dialogue). Mid-sentence uses ("each user: a person
    who...") and anything inside fenced code never count.
    """
    if pats.candidate is None or pats.repeat is None or pats.residue is None:
        return None
    fences: list[tuple[int, int]] | None = None
    capitalised: list[tuple[int, int, str]] = []
    for m in pats.candidate.finditer(text):
        if fences is None:
            fences = _fenced_spans(text)
        start, end = m.start(), m.end()
        if _inside(start, fences):
            continue
        word = m.group(1)
        head = text[:start]
        if len(head) <= 8 and not any(c.isalpha() for c in head):
            return start, end, "at the start of the content"
        if pats.repeat.match(text, end):
            rep = pats.repeat.match(text, end)
            assert rep is not None
            return start, rep.end(), "repeated role marker"
        line_start = text.rfind("\n", 0, start) + 1
        if not _turn_prefix(text[line_start:start]):
            continue
        if word.islower():
            return start, end, "lower-case role at the start of a line"
        for s, e, other in capitalised:
            if other.lower() != word.lower():
                return s, e, f"dialogue turns '{other}:' and '{word}:' at line starts"
        capitalised.append((start, end, word))
    for m in pats.residue.finditer(text):
        if fences is None:
            fences = _fenced_spans(text)
        if not _inside(m.start(), fences):
            return m.start(), m.end(), "role word alone on a line (stripped chat template)"
    return None


def check_role_leak(ctx: Context) -> Iterator[Violation]:
    """role-leak: template role markers or role turns in content."""
    text = ctx.text
    if not text:
        return
    pats = _role_patterns(ctx.expect.role_markers)
    if pats.literal is not None:
        m = pats.literal.search(text)
        if m is not None:
            n = len(pats.literal.findall(text))
            yield ctx.violation(
                "role-leak",
                f"chat-template marker {m.group(0)!r} in content ({n} occurrence(s))",
                excerpt=excerpt(text, m.start(), m.end()),
                marker=m.group(0),
                occurrences=n,
            )
            return
    found = _find_role_leak(text, pats)
    if found is not None:
        start, end, why = found
        yield ctx.violation(
            "role-leak",
            f"role marker {text[start:end].strip()!r} in content: {why}",
            excerpt=excerpt(text, start, end),
            marker=text[start:end],
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
    pat = _literal_pattern(tokens)
    if pat is None:
        return
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
    pat = _literal_pattern(ctx.expect.reasoning_markers)
    m = pat.search(text) if pat is not None and "<" in text else None
    if m is not None:
        yield ctx.violation(
            "reasoning-leak",
            f"reasoning marker {m.group(0)!r} in content while thinking is off",
            excerpt=excerpt(text, m.start(), m.end()),
        )
        return
    m = _PREAMBLE.search(text[:4000])
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


_WORDS = re.compile(r"\S+")


def check_degenerate(ctx: Context) -> Iterator[Violation]:
    """degenerate: a long output dominated by repetition.

    Two independent measures, either one suffices: the share of word 4-grams
    that repeat an earlier one (catches a phrase loop) and the zlib compression
    ratio (catches loops without spaces, such as one token over and over).
    Healthy prose sits near 0-10 % repeated 4-grams and 0.35-0.5 compression.
    """
    text = ctx.text
    e = ctx.expect
    if len(text) < e.degenerate_min_chars:
        return
    raw = text.encode("utf-8", "surrogatepass")
    ratio = len(zlib.compress(raw, 1)) / len(raw)
    words = text.split()
    share = 0.0
    grams: list[tuple[str, ...]] = []
    if len(words) >= 40:
        grams = list(zip(words, words[1:], words[2:], words[3:], strict=False))
        share = 1.0 - len(set(grams)) / len(grams)
    if share < e.degenerate_ngram_share and ratio >= e.degenerate_compression:
        return
    evidence: dict[str, object] = {
        "repeated_4gram_share": round(share, 3),
        "compression_ratio": round(ratio, 3),
        "characters": len(text),
    }
    if grams:
        gram, n = Counter(grams).most_common(1)[0]
        phrase = " ".join(gram)
        at = text.find(gram[0])
        evidence["most_repeated"] = f"»{clip(phrase, 60)}« x{n}"
        if at >= 0:
            evidence["excerpt"] = excerpt(text, at, at + len(phrase))
    else:
        evidence["excerpt"] = clip(text[-120:])
    yield ctx.violation(
        "degenerate",
        f"output is repetitive: {share:.0%} of word 4-grams repeat, "
        f"compresses to {ratio:.0%} of its size",
        **evidence,
    )


def _visible(text: str) -> str:
    """``text`` with characters that would not print shown as escapes."""
    return "".join(
        ch if ch.isprintable() and ch != "\ufffd" else f"\\u{ord(ch):04x}" for ch in text
    )


_SAFE_WS = str.maketrans("", "", "\n\r\t")
_BAD_CATEGORIES = frozenset({"Cc", "Cs", "Co", "Cn"})


def check_non_printable(ctx: Context) -> Iterator[Violation]:
    """non-printable: mostly control, unassigned, surrogate or replacement characters."""
    text = ctx.text
    if not text:
        return
    stripped = text.translate(_SAFE_WS)
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
