"""Prompts at an exact context depth, from the natural text the package ships.

``prompts_at(depth, n, count)`` writes ``n`` distinct prompts whose rendered length is exactly
``depth`` tokens by the run's tokenizer: ``count`` counts the tokens of a text (no special
tokens added), and ``overhead`` is what the server's chat template adds around the message
(``template_overhead`` reads it off one answer's ``usage.prompt_tokens``). Each prompt is

    Passage <tag>.

    <a stretch of the corpus, starting at a place of its own>

    <an instruction that asks for a summary>

where the tag is unique to the run (``salt``), the depth and the prompt, so no two requests
share a prefix past the chat template's own tokens: a prefix cache cannot carry one request's
work into another, nor one depth's into the next. The answer stops where the model stops (no
``ignore_eos``).

The corpus is Lewis Carroll's *Alice's Adventures in Wonderland* (1865; public domain, from
Project Gutenberg's eBook #11, its paragraphs re-flowed and its emphasis marks dropped), about
150 KB: some 36,000 tokens by SmolLM2's tokenizer. A passage longer than the book wraps around
to its start; ``corpus_tokens`` says how far a tokenizer's depths can go without that.

``context_limit`` reads a server's context length from its ``/models`` answer, and
``auto_depths`` doubles depths up to it (``--ddtree-context=auto``). Pure: no pytest, no I/O
beyond reading the shipped corpus.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

__all__ = [
    "AUTO_START",
    "ContextPrompt",
    "Count",
    "DepthError",
    "auto_depths",
    "context_limit",
    "corpus",
    "corpus_tokens",
    "probe_depths",
    "prompts_at",
    "template_overhead",
    "too_long",
]

#: the first depth ``auto`` tries; each next one doubles it
AUTO_START = 512
#: ``auto`` probes no deeper than this (a server that states no context length and takes
#: every prompt up to it is mapped up to it)
AUTO_CEILING = 131072
#: the words of the instruction that closes every prompt
INSTRUCTION = "Summarize the passage above in a few paragraphs."
#: separates the book's end from its start when a passage wraps around
_WRAP = "\n\n* * *\n\n"
#: ways to join the passage and the instruction, the first that reaches the depth taken
_JOINTS = ("\n\n", "\n", " ", "\n\n\n")
#: words whose count guesses a passage's length
_SAMPLE = 200
#: whole words given back, and words of what follows tried, to make up an exact count
_BACKTRACK = 8

Count = Callable[[str], int]


class DepthError(ValueError):
    """A depth no prompt can reach (below the fixed parts, or no exact fit)."""


@dataclass(frozen=True)
class ContextPrompt:
    """One prompt: its ``text`` (the user message), the ``depth`` it reaches once the chat
    template's ``overhead`` is added, and its unique ``tag``."""

    text: str
    depth: int
    tag: str


@cache
def corpus() -> str:
    """The shipped natural text (read once)."""
    return (Path(__file__).with_name("data") / "corpus.txt").read_text(encoding="utf-8")


@cache
def _words() -> tuple[str, ...]:
    """The corpus as whitespace-led pieces (``" word"``, ``"\\n\\nWord"``): joining any run
    of them gives the corpus text between two words."""
    return tuple(re.findall(r"\s*\S+", corpus()))


def corpus_tokens(count: Count) -> int:
    """The corpus's length in ``count``'s tokens."""
    return count(corpus())


def template_overhead(prompt_tokens: int, text: str, count: Count) -> int:
    """The tokens a chat template adds around a message: the server's
    ``usage.prompt_tokens`` for ``text`` sent alone, less ``text``'s own count."""
    return prompt_tokens - count(text)


def _tag(salt: str, depth: int, index: int) -> str:
    digest = hashlib.sha256(f"{salt}\0{depth}\0{index}".encode()).hexdigest()
    return digest[:12]


@cache
def _paragraphs() -> tuple[int, ...]:
    """The words that open a paragraph of the corpus."""
    return tuple(i for i, w in enumerate(_words()) if i == 0 or w.startswith("\n"))


def _start(salt: str, index: int, n: int) -> int:
    """The word prompt ``index`` of ``n`` starts at: a paragraph's first, the prompts spread
    evenly over the corpus, turned by the salt."""
    paragraphs = _paragraphs()
    turn = int(hashlib.sha256(salt.encode()).hexdigest()[:8], 16)
    return paragraphs[(turn + index * len(paragraphs) // n) % len(paragraphs)]


def _passage(start: int, k: int) -> str:
    """``k`` words of the corpus from word ``start`` (wrapping past its end), with no
    leading whitespace."""
    words = _words()
    out: list[str] = []
    i, left = start, k
    while left > 0:
        take = min(left, len(words) - i)
        out.extend(words[i : i + take])
        left -= take
        i = 0
        if left > 0:
            out.append(_WRAP)
    return "".join(out).lstrip()


def _fit(head: str, instruction: str, start: int, target: int, count: Count) -> str:
    """``head``, a passage of the corpus from word ``start``, and ``instruction``, in
    exactly ``target`` tokens; ``DepthError`` when no passage gives them.

    The passage is the longest run of whole words within the target (by bisection: every
    word adds tokens); when the next word is worth more tokens than are left, a part of what
    follows makes up the rest. A tokenizer with a small vocabulary can skip a count at every
    such cut: then the passage and the instruction are joined another way.
    """
    fixed = count(head + instruction)
    if fixed > target:
        raise DepthError(f"the tag, the instruction and the chat template alone take {fixed}")
    for joint in _JOINTS:
        found = _fit_joined(head, joint + instruction, start, target, count)
        if found is not None:
            return found
    raise DepthError(f"no passage makes exactly {target} tokens")


def _fit_joined(head: str, tail: str, start: int, target: int, count: Count) -> str | None:
    """``_fit`` with the instruction joined by ``tail``'s own leading whitespace."""

    def text(k: int) -> str:
        return head + _passage(start, k) + tail

    # bracket the passage's length around a guess from the first words' tokens per word
    guess = target * _SAMPLE // max(count(_passage(start, _SAMPLE)), 1)
    lo, hi = guess * 4 // 5, guess * 5 // 4 + 1
    if count(text(lo)) > target:
        lo = 0
    while count(text(hi)) <= target:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if count(text(mid)) <= target else (lo, mid)
    if count(text(lo)) == target:
        return text(lo)
    # a part of what follows the passage: counted alone (a word boundary splits the
    # count), then checked on the whole text
    words = _words()
    base = count(tail)
    for k in range(lo, max(lo - _BACKTRACK, -1), -1):
        body = head + _passage(start, k)
        follow = "".join(words[(start + k + j) % len(words)] for j in range(_BACKTRACK))
        follow = follow if k else follow.lstrip()
        left = target - count(body + tail)
        for cut in range(1, len(follow)):
            part = follow[:cut]
            if count(part + tail) - base == left and count(body + part + tail) == target:
                return body + part + tail
    return None


def prompts_at(
    depth: int,
    n: int,
    count: Count,
    *,
    overhead: int = 0,
    salt: str = "",
    instruction: str = INSTRUCTION,
) -> tuple[ContextPrompt, ...]:
    """``n`` distinct prompts of exactly ``depth`` tokens each once the chat template's
    ``overhead`` tokens are added (``count`` counts a text's tokens without special tokens).

    Each starts with a tag unique to (``salt``, ``depth``, prompt), then a passage of the
    corpus from a place of its own, then ``instruction``. The same arguments give the same
    prompts; give each run its own ``salt`` so no run reuses another's prefix cache.
    ``DepthError`` when ``depth`` is below what the fixed parts take.
    """
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise DepthError(f"depth {depth!r} is not an integer >= 1")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise DepthError(f"n {n!r} is not an integer >= 1")
    target = depth - overhead
    out = []
    for i in range(n):
        tag = _tag(salt, depth, i)
        head = f"Passage {tag}.\n\n"
        text = _fit(head, instruction, _start(salt, i, n), target, count)
        out.append(ContextPrompt(text, depth, tag))
    return tuple(out)


def context_limit(models: Any, model: str | None = None) -> int | None:
    """The context length a server's ``GET /models`` answer states for ``model`` (or its
    first model), or None when it states none.

    vLLM, SGLang and the reference server give ``max_model_len``; llama.cpp gives
    ``meta.n_ctx`` (the context of one slot, what a request gets) and ``meta.n_ctx_train``
    (the model's own): the smaller counts.
    """
    data = models.get("data") if isinstance(models, Mapping) else None
    if not isinstance(data, Sequence) or isinstance(data, (str, bytes)):
        return None
    entries = [e for e in data if isinstance(e, Mapping)]
    chosen = [e for e in entries if model is None or e.get("id") == model][:1]
    if not chosen:
        return None
    entry = chosen[0]
    meta = entry.get("meta")
    found = [entry.get("max_model_len")]
    if isinstance(meta, Mapping):
        found += [meta.get("n_ctx"), meta.get("n_ctx_train")]
    limits = [v for v in found if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    return min(limits) if limits else None


def auto_depths(limit: int, reserve: int, start: int = AUTO_START) -> tuple[int, ...]:
    """Depths ``start``, twice that, ... up to the largest that leaves ``reserve`` tokens
    (the answer's ``max_tokens``) within ``limit``; () when even ``start`` does not fit."""
    out: list[int] = []
    depth = start
    while depth + reserve <= limit:
        out.append(depth)
        depth *= 2
    return tuple(out)


#: the words a server refuses a prompt longer than its context with: vLLM's "maximum context
#: length is", SGLang's "longer than the model's context length", llama.cpp's "exceeds the
#: available context size", TGI's "must be <= ... tokens" (with ``max_new_tokens``)
_TOO_LONG = re.compile(
    r"context (length|size|window)|maximum context|too long|max_new_tokens|max_model_len",
    re.IGNORECASE,
)


def too_long(status: int | None, message: str) -> bool:
    """Whether an answer refuses its request as longer than the server's context: an HTTP
    400, 413 or 422 whose message says so (any other refusal is not read as a limit)."""
    return status in (400, 413, 422) and _TOO_LONG.search(message) is not None


def probe_depths(
    fits: Callable[[int], bool],
    reserve: int,
    start: int = AUTO_START,
    ceiling: int = AUTO_CEILING,
) -> tuple[int, ...]:
    """``auto``'s depths where the server states no context length, found by asking:
    ``start``, twice that, ... up to ``ceiling``, while a prompt of the depth plus ``reserve``
    tokens (the answer's ``max_tokens``) fits. ``fits(tokens)`` sends a prompt of that many
    tokens and says whether the server took it (False: refused as too long; any other
    answer is the caller's to raise)."""
    out: list[int] = []
    depth = start
    while depth <= ceiling and fits(depth + reserve):
        out.append(depth)
        depth *= 2
    return tuple(out)
