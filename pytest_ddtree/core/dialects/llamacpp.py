"""``llamacpp``: llama.cpp's per-response ``timings``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_ddtree.core.dialects.base import Dialect, MetricNames, TokenizeShape, integer, num
from pytest_ddtree.core.dialects.stats import SpecStats

# llama.cpp's per-response ``timings`` fields: every one a number >= 0 when present
TIMING_FIELDS = (
    "cache_n",
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
    "draft_n",
    "draft_n_accepted",
)


def bad_fields(raw: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The ``timings`` fields present with a value that is not a finite number >= 0."""
    bad: list[tuple[str, Any]] = []
    for name in TIMING_FIELDS:
        if name in raw:
            value = num(raw[name])
            if value is None or value < 0:
                bad.append((name, raw[name]))
    return bad


class LlamaCpp(Dialect):
    name = "llamacpp"
    summary = "the per-response `timings` object (llama.cpp)"
    where = "timings"
    # builds that read a per-request draft length
    budget_field = "/speculative.n_max"
    # a server could add timings beside its own statistics block: asked last
    detect_last = True
    unstated = (
        "mean acceptance length and decode rounds are not checked: llama.cpp reports drafted "
        "and accepted tokens, not its verification rounds"
    )
    # the timings always come; the draft counts only when it drafted
    drafted_key = "draft_n"
    # content -> tokens (no count); add_special=false leaves BOS out
    tokenize = TokenizeShape("llamacpp", "/tokenize", "content", (("add_special", False),))
    metrics = MetricNames(
        prefix="llamacpp",
        drafts="llamacpp:spec_decode_num_drafts",
        draft_tokens="llamacpp:spec_decode_num_draft_tokens",
        accepted_tokens="llamacpp:spec_decode_num_accepted_tokens",
        accepted_per_pos="llamacpp:spec_decode_num_accepted_tokens_per_pos",
        finished=None,
        running="llamacpp:requests_processing",
        waiting="llamacpp:requests_deferred",
    )

    def carrier(self, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        # a top-level ``timings`` object in the response, or in the final (usage) chunk of
        # a stream; ``predicted_n`` is always in it
        timings = obj.get("timings")
        if isinstance(timings, Mapping) and "predicted_n" in timings:
            return timings
        return None

    def normalise(self, raw: Mapping[str, Any]) -> SpecStats:
        """llama.cpp's ``timings``: drafted and accepted tokens and the decode rate.

        The server adds ``draft_n`` and ``draft_n_accepted`` only when a draft was
        made, so their absence means no draft token (0 of 0, rate unknown). The
        number of verification rounds is not reported per response, so the mean
        acceptance length is unknown (never derived from a guess); the acceptance
        *rate* is ``accepted / drafted``. A field of the wrong type is left out here
        and reported by the stats check, naming it.
        """
        predicted = integer(raw.get("predicted_n"))
        if "draft_n" in raw:
            drafted = integer(raw.get("draft_n"))
            accepted = integer(raw.get("draft_n_accepted"))
        else:
            drafted, accepted = (0, 0) if predicted is not None else (None, None)
        rate = num(raw.get("predicted_per_second"))
        return SpecStats(
            dialect=self.name,
            num_draft_tokens=drafted,
            num_accepted_draft_tokens=accepted,
            server_tokens_per_second=rate if rate is not None and rate >= 0 else None,
            raw=dict(raw),
        )

    def malformed(self, raw: Mapping[str, Any]) -> list[tuple[str, Any]]:
        return [(f"{self.where}.{name}", value) for name, value in bad_fields(raw)]
