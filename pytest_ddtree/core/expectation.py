"""What a test expects of a completion: thresholds and switches for every check."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_ddtree.core.codes import CODES

DEFAULT_MIN_TOKENS = 8
"""Early-stop threshold when a test states none.

The failure this guards against ends after 4-6 tokens ("Unit 1.", "1user:user:"),
while a prompt that wants a real answer gets at least a sentence. A test whose
honest answer is shorter ("What is 2+2?") states ``min_tokens=1`` (or 0 to turn
the check off) in its marker or prompt expectation.
"""

DEFAULT_ROLE_MARKERS: tuple[str, ...] = (
    # bare role words: only flagged at turn positions (see ``_text``)
    "user:",
    "assistant:",
    "system:",
    "human:",
    # template markers: flagged anywhere in content
    "<|im_start|>",
    "<start_of_turn>",
    "[INST]",
    "[/INST]",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|user|>",
    "<|assistant|>",
    "<|system|>",
    "<|begin_of_text|>",
)
"""Role markers checked by default. Entries that are a single word followed by a
colon are role words, matched only where a turn would begin; all other entries
are literal markers matched anywhere."""

DEFAULT_SPECIAL_TOKENS: tuple[str, ...] = (
    "<|im_end|>",
    "<|endoftext|>",
    "<end_of_turn>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|end|>",
    "<|eom_id|>",
    "<|return|>",
)
"""Special tokens checked by default, merged with the tokenizer's own special
tokens when a tokenizer is available (think tags excepted: they belong to the
reasoning checks; one- or two-letter HTML-like tags such as ``</s>`` excepted:
they occur in healthy HTML and Markdown)."""

DEFAULT_REASONING_MARKERS: tuple[str, ...] = (
    "<think>",
    "</think>",
    "<thinking>",
    "</thinking>",
    "<|channel|>analysis",
)
"""Literal reasoning markers: a leak anywhere in content when thinking is off."""


def _frozen(value: Any, name: str) -> frozenset[str]:
    if isinstance(value, str):
        return frozenset({value})
    if isinstance(value, Iterable):
        return frozenset(str(v) for v in value)
    raise TypeError(f"expectation {name}={value!r}: expected a set of strings")


def _tupled(value: Any, name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Iterable):
        return tuple(str(v) for v in value)
    raise TypeError(f"expectation {name}={value!r}: expected a sequence of strings")


@dataclass(frozen=True)
class Expectation:
    """Everything a check may need to know beyond the completion itself.

    Every field is optional; the defaults below are what a test gets when it
    states nothing. Values are validated on construction: a bad value raises
    ``ValueError``/``TypeError`` naming the field and the value.
    """

    min_tokens: int | None = None
    """Early-stop threshold in content tokens (reasoning excluded); ``None`` means
    ``DEFAULT_MIN_TOKENS`` (capped at ``max_tokens``); 0 disables the check."""

    thinking: bool = False
    """Whether ``enable_thinking`` was on: then reasoning text is expected and
    think tags in content are not a leak."""

    allowed_finish_reasons: frozenset[str] = frozenset({"stop", "length"})
    """Finish reasons a benchmark accepts (``tool_calls`` etc. are legal but unexpected)."""

    max_tokens: int | None = None
    """Defaults to ``completion.request.max_tokens``."""

    usage_tolerance: float = 0.02
    """Relative tolerance between ``usage.completion_tokens`` and the local count
    with an exact tokenizer, for re-tokenisation drift that grows with length
    (none was measured on SmolLM2 via llama.cpp or on the reference tokenizer:
    ``benchmarks/calibrate_real_text.py``)."""

    usage_tolerance_abs: int = 2
    """Absolute tolerance (tokens) added to the relative one, and the slack of a
    local count against ``max_tokens``: covers the end-of-turn token a server
    counts but does not return (measured: exactly 1 on llama.cpp when the answer
    stops, 0 when it runs to max_tokens)."""

    approx_usage_ratio: float = 3.0
    """Without an exact tokenizer the local count is an approximation: usage is
    flagged only when it differs from it by more than this factor either way."""

    stats_tolerance: float = 0.10
    """Relative tolerance for ``mean_acceptance_length * decode_rounds`` against
    ``completion_tokens`` (servers differ on counting the prefill token and EOS)."""

    stats_tolerance_abs: float = 2.0
    """Absolute tolerance (tokens) added to the relative one."""

    tps_tolerance: float = 2.0
    """Largest accepted ratio of the server's tokens/s to the client's decode
    rate. Network and streaming overhead make the client slower than the
    server's own decode clock, but a 3x gap is a lie (or counts something else)."""

    tps_min_chunks: int = 8
    """Content events needed before the client's decode rate is trusted."""

    tps_min_seconds: float = 0.05
    """Decode span (first to last content event) needed before the rate is trusted."""

    tps_min_gap: float = 0.001
    """Median gap between content events needed before the rate is trusted. When
    events arrive faster than this, HTTP and SSE overhead dominate what the client
    can see, and a server's own compute-only rate cannot be verified (a lying
    server whose real events are slow is still judged)."""

    role_markers: tuple[str, ...] = DEFAULT_ROLE_MARKERS
    """Role markers to look for; narrow or extend with ``DEFAULT_ROLE_MARKERS + (...)``."""

    special_tokens: tuple[str, ...] | None = None
    """Special tokens to look for; ``None`` means ``DEFAULT_SPECIAL_TOKENS`` plus
    the tokenizer's special tokens."""

    reasoning_markers: tuple[str, ...] = DEFAULT_REASONING_MARKERS
    """Literal reasoning markers (see ``DEFAULT_REASONING_MARKERS``)."""

    eos_token: str | None = "<|im_end|>"
    """End-of-sequence token text; text after it in content is an overrun."""

    skip: frozenset[str] = frozenset()
    """Codes that are not checked (``--ddtree-skip-check``)."""

    expected_tree_budget: int | None = None
    """Budget the server should echo; defaults to ``completion.request.tree_budget``."""

    block_size: int | None = None
    """Drafter block size; defaults to the one the server reports in its stats."""

    degenerate_min_chars: int = 160
    """Shorter outputs are never judged degenerate (too little text to tell).
    A real loop at max_tokens=64 was 182 characters long."""

    degenerate_min_words: int = 30
    """Fewer words than this in the tail are never judged by the 4-gram share."""

    degenerate_ngram_share: float = 0.8
    """Flag when this share of word 4-grams are repeats of earlier ones.
    Healthy SmolLM2 answers reach 0.57 (a sentence said three times, a templated list)."""

    degenerate_loop_share: float = 0.5
    """Flag when the tail ends in one run of words (up to 40) repeated at least three times
    over and that run covers this share of the tail's words. SmolLM2's loops at 64-128
    tokens: 0.84-0.90; its healthy answers and the reference server's: 0."""

    degenerate_compression: float = 0.12
    """Flag when zlib compresses the text below this fraction of its size."""

    degenerate_loop_repeats: int = 3
    """An answer cut by ``max_tokens`` (finish reason ``length``) whose end repeats one
    unit verbatim this many whole times is degenerate, at any length. Healthy SmolLM2
    answers end in at most two (a sentence said again, two list items alternating)."""

    degenerate_loop_min_tokens: int = 16
    """With an exact tokenizer, the repeated run must also span this many tokens: a long
    number or a rule of dashes at the cut repeats a token or two a few times."""

    degenerate_loop_min_bytes: int = 20
    """Without token ids (no exact tokenizer), the run of repeated characters, or of
    repeated numbered list items, must span this many UTF-8 bytes."""

    non_printable_share: float = 0.2
    """Flag when this share of characters is control, unassigned or U+FFFD."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(
            self,
            "allowed_finish_reasons",
            _frozen(self.allowed_finish_reasons, "allowed_finish_reasons"),
        )
        set_(self, "skip", _frozen(self.skip, "skip"))
        set_(self, "role_markers", _tupled(self.role_markers, "role_markers"))
        set_(self, "reasoning_markers", _tupled(self.reasoning_markers, "reasoning_markers"))
        if self.special_tokens is not None:
            set_(self, "special_tokens", _tupled(self.special_tokens, "special_tokens"))
        unknown = sorted(self.skip - CODES.keys())
        if unknown:
            raise ValueError(
                f"unknown check code {unknown[0]!r} in skip; known codes: {', '.join(CODES)}"
            )
        for name in ("min_tokens", "max_tokens", "expected_tree_budget", "block_size"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise ValueError(f"expectation {name}={value!r}: expected an integer >= 0")
        for name in (
            "usage_tolerance",
            "usage_tolerance_abs",
            "stats_tolerance",
            "stats_tolerance_abs",
            "tps_min_seconds",
            "tps_min_chunks",
            "degenerate_min_chars",
            "degenerate_min_words",
            "degenerate_loop_min_tokens",
            "degenerate_loop_min_bytes",
        ):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (math.isfinite(value) and value >= 0)
            ):
                raise ValueError(f"expectation {name}={value!r}: expected a number >= 0")
        repeats = self.degenerate_loop_repeats
        if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 2:
            raise ValueError(
                f"expectation degenerate_loop_repeats={repeats!r}: expected an integer >= 2"
            )
        for name in ("approx_usage_ratio", "tps_tolerance"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (math.isfinite(value) and value >= 1)
            ):
                raise ValueError(f"expectation {name}={value!r}: expected a number >= 1")
        for name in (
            "degenerate_ngram_share",
            "degenerate_loop_share",
            "degenerate_compression",
            "non_printable_share",
        ):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (0 < value <= 1)
            ):
                raise ValueError(f"expectation {name}={value!r}: expected a number in (0, 1]")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "") -> Expectation:
        """An expectation from plain data (a prompt file entry, marker kwargs).

        A bad name or value raises ``ValueError`` whose one line starts with
        ``source`` (e.g. ``"prompts.json, prompt 'essay'"``).
        """
        try:
            if not isinstance(data, Mapping):
                raise TypeError(f"expected a mapping of expectations, got {type(data).__name__}")
            return DEFAULT_EXPECTATION.replace(**{str(k): v for k, v in data.items()})
        except (TypeError, ValueError) as exc:
            prefix = f"{source}: " if source else ""
            raise ValueError(f"{prefix}{exc}") from None

    def replace(self, **changes: Any) -> Expectation:
        """A copy with ``changes`` applied; an unknown name raises ``TypeError`` naming it."""
        known = {f.name for f in dataclasses.fields(self)}
        for key in changes:
            if key not in known:
                raise TypeError(f"unknown expectation {key!r}; known: {', '.join(sorted(known))}")
        return dataclasses.replace(self, **changes)


DEFAULT_EXPECTATION = Expectation()
"""The expectation of a test that states nothing."""
