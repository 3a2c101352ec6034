"""Constrained decoding for the reference server: a JSON grammar over the model's own tokens.

A request that asks for ``response_format`` (``json_object`` or ``json_schema``) or whose
answer is a tool call is decoded under a grammar compiled by llguidance from the JSON schema
(``json_object``: any JSON object). The grammar filters the target's choice at every step:

- the target's own token stands when the grammar allows it;
- otherwise the target takes its most likely candidate the grammar allows, and failing that
  the allowed token with the lowest id (a structural token: a quote, a brace, a digit);
- a string that has run for ``STRING_TOKENS`` tokens closes at the first allowed quote, and
  past ``SOFT_LIMIT`` tokens the answer closes its objects and arrays as soon as the grammar
  allows, so a small schema ends within a few dozen tokens;
- once the grammar accepts (the JSON is complete) the target ends its turn.

Drafted tokens are verified against that constrained choice, so a drafted token the grammar
forbids is never accepted and speculative output equals target-only output.

llguidance is imported here only, and this module only when a request asks for a format or
offers tools, so a plain request (and the plugin's import) never loads it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import llguidance
    from llguidance._lib import JsonCompileOptions

    from .model import ReferenceModel

__all__ = ["Constraint", "GrammarSpec", "compile_schema"]

#: tokens a free string may run before the target closes it at the first allowed quote
STRING_TOKENS = 8
#: tokens after which the target closes objects and arrays as soon as the grammar allows
SOFT_LIMIT = 40
#: compact JSON with one space after ':' and ',' (no free whitespace the model could loop on)
_JSON_OPTIONS: JsonCompileOptions = {
    "whitespace_flexible": False,
    "item_separator": ", ",
    "key_separator": ": ",
}
#: the schema of ``{"type": "json_object"}``: any JSON object
OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True)
class GrammarSpec:
    """A compiled grammar (llguidance's serialised form) and the schema it came from."""

    schema: dict[str, Any]
    grammar: str


@cache
def _tokenizer() -> llguidance.LLTokenizer:
    import llguidance

    from .model import get_model, tokenizer_path

    return llguidance.LLTokenizer(tokenizer_path().read_text(), eos_token=get_model().eos)


@cache
def _compile(schema_json: str) -> GrammarSpec:
    import llguidance

    schema = json.loads(schema_json)
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=_JSON_OPTIONS)
    except ValueError as e:
        raise ValueError(str(e)) from None
    error = llguidance.LLMatcher.validate_grammar(grammar, _tokenizer())
    if error:
        raise ValueError(error.splitlines()[0] if error.strip() else "invalid schema")
    return GrammarSpec(schema, grammar)


def compile_schema(schema: dict[str, Any]) -> GrammarSpec:
    """The grammar of a JSON schema; ValueError (with llguidance's reason) when it has none."""
    return _compile(json.dumps(schema, sort_keys=True))


class Constraint:
    """One request's grammar state: the llguidance matcher over the committed tokens, and
    the target's constrained choice (``choose``)."""

    def __init__(self, spec: GrammarSpec, model: ReferenceModel) -> None:
        import llguidance

        self.model = model
        self.matcher = llguidance.LLMatcher(_tokenizer(), spec.grammar, log_level=0)
        self.broken = False  # a token the grammar forbids was committed (grammar-skip fault)
        self.tokens = 0
        self.in_string = False
        self._escape = False
        self.string_run = 0

    # ------------------------------------------------------------ the grammar

    def allows(self, tok: int) -> bool:
        """True when the grammar allows ``tok`` next (the end-of-turn token: when complete)."""
        if self.broken:
            return True
        if tok == self.model.eos:
            return bool(self.matcher.is_accepting())
        return bool(self.matcher.validate_tokens([tok]) == 1)

    def complete(self) -> bool:
        """True when the JSON is complete: the target ends its turn."""
        return not self.broken and bool(self.matcher.is_accepting())

    def consume(self, tok: int) -> None:
        """Commit ``tok``; a token the grammar forbids breaks the constraint for good."""
        if tok == self.model.eos:
            return
        self.tokens += 1
        if not self.broken and not self.matcher.consume_token(tok):
            self.broken = True
        for b in self.model.pieces[tok]:
            if self.in_string:
                if self._escape:
                    self._escape = False
                elif b == 0x5C:  # backslash
                    self._escape = True
                elif b == 0x22:  # quote
                    self.in_string = False
            elif b == 0x22:
                self.in_string = True
                self.string_run = -1
        if self.in_string:
            self.string_run += 1

    # ------------------------------------------------------------ the target's choice

    def choose(self, tok: int, ranked: Callable[[], list[int]]) -> int:
        """The target's constrained token: ``tok`` (its own choice) when the grammar allows it
        and no closing rule applies, else the rule's token, its best allowed candidate in
        ``ranked()``, the grammar's forced token, a quote opening a string, or the longest
        allowed token."""
        if self.broken:
            return tok
        eos = self.model.eos
        if self.complete():
            return eos
        closing = self._closing()
        if closing is None and tok != eos and self.allows(tok):
            return tok
        bits = int.from_bytes(self.matcher.compute_bitmask(), "little") & ~(1 << eos)
        allowed: list[int] = []  # the allowed tokens, lowest id first
        while bits:
            low = bits & -bits
            allowed.append(low.bit_length() - 1)
            bits ^= low
        ok = set(allowed).__contains__
        for t in closing or ():
            if ok(t):
                return t
        if closing is not None and ok(tok):
            return tok
        for t in ranked():
            if ok(t):
                return t
        forced = self.matcher.compute_ff_tokens()
        if forced:  # the grammar fixes the next bytes: their tokens, as the tokenizer cuts them
            return int(forced[0])
        quotes, _closers = _markers(self.model)
        if not self.in_string:  # open a string (the target writes words in it)
            for t in quotes:
                if ok(t):
                    return t
        pieces = self.model.pieces
        plain = [t for t in allowed if not pieces[t].startswith((b"-", b" "))] or allowed
        return max(plain, key=lambda t: (len(pieces[t]), -t))

    def _closing(self) -> list[int] | None:
        """The tokens a closing rule prefers now (None: no rule applies)."""
        quotes, closers = _markers(self.model)
        if self.in_string:
            return quotes if self.string_run >= STRING_TOKENS else None
        return closers if self.tokens >= SOFT_LIMIT else None


@cache
def _markers(model: ReferenceModel) -> tuple[list[int], list[int]]:
    """The model's quote tokens and its closing-bracket tokens."""
    quotes = [i for i, p in enumerate(model.pieces) if p == b'"']
    closers = [i for i, p in enumerate(model.pieces) if p in (b"}", b"]")]
    return quotes, closers
