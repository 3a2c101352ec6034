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
        pieces = model.pieces
        self._quotes = [i for i, p in enumerate(pieces) if p == b'"']
        self._closers = [i for i, p in enumerate(pieces) if p in (b"}", b"]")]

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

    def _allowed(self) -> list[int]:
        mask = self.matcher.compute_bitmask()
        out: list[int] = []
        for byte_at, byte in enumerate(mask):
            if byte:
                base = byte_at * 8
                out.extend(base + k for k in range(8) if byte >> k & 1)
        return out

    # ------------------------------------------------------------ the target's choice

    def choose(self, tok: int, ranked: Callable[[], list[int]]) -> int:
        """The target's constrained token: ``tok`` (its own choice) when the grammar allows it
        and no closing rule applies, else the rule's token, its best allowed candidate in
        ``ranked()``, the grammar's forced token, a quote opening a string, or the longest
        allowed token."""
        if self.broken:
            return tok
        if self.complete():
            return self.model.eos
        closing = self._closing()
        if closing is None and tok != self.model.eos and self.allows(tok):
            return tok
        allowed = self._allowed()
        allowed_set = set(allowed)
        for t in closing or ():
            if t in allowed_set:
                return t
        if closing is not None and tok != self.model.eos and tok in allowed_set:
            return tok
        for t in ranked():
            if t in allowed_set and t != self.model.eos:
                return t
        forced = self.matcher.compute_ff_tokens()
        if forced:  # the grammar fixes the next bytes: their tokens, as the tokenizer cuts them
            return int(forced[0])
        if not self.in_string:  # open a string (the target writes words in it)
            for t in self._quotes:
                if t in allowed_set:
                    return t
        pieces = self.model.pieces
        plain = [t for t in allowed if not pieces[t].startswith((b"-", b" "))] or allowed
        return max(plain, key=lambda t: (len(pieces[t]), -t))

    def _closing(self) -> list[int] | None:
        """The tokens a closing rule prefers now (None: no rule applies)."""
        if self.in_string:
            return self._quotes if self.string_run >= STRING_TOKENS else None
        return self._closers if self.tokens >= SOFT_LIMIT else None
