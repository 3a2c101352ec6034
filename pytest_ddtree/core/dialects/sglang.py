"""``sglang``: SGLang's ``sglext.spec_tokens_details`` (OpenAI endpoints) or ``meta_info``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

from pytest_ddtree.core.dialects.base import (
    Dialect,
    MetricNames,
    TokenizeShape,
    depth,
    integer,
    num,
)
from pytest_ddtree.core.dialects.stats import SpecStats

#: the request field that makes SGLang's OpenAI endpoints send their statistics
DETAILS_FIELD = "return_spec_tokens_details"


def found(obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], str] | None:
    """SGLang's statistics and where they were: ``sglext.spec_tokens_details`` of
    the OpenAI endpoints (an object for n=1, a list per choice for n>1: the first
    choice's, as for the text), or ``meta_info`` of the native ``/generate``."""
    ext = obj.get("sglext")
    details = ext.get("spec_tokens_details") if isinstance(ext, Mapping) else None
    if isinstance(details, list):
        # one object per choice, in choice order (SGLang's objects carry no index)
        details = details[0] if details else None
    if isinstance(details, Mapping):
        return details, "sglext.spec_tokens_details"
    meta = obj.get("meta_info")
    if isinstance(meta, Mapping) and ("spec_verify_ct" in meta or "spec_accept_length" in meta):
        return meta, "meta_info"
    return None


def _choice_has(obj: Any, key: str) -> bool:
    if not isinstance(obj, Mapping):
        return False
    choices = obj.get("choices")
    return isinstance(choices, list) and any(isinstance(c, Mapping) and key in c for c in choices)


class SGLang(Dialect):
    name = "sglang"
    summary = (
        "`sglext.spec_tokens_details` of the OpenAI endpoints, asked for with "
        f"`{DETAILS_FIELD}`, or `meta_info` of `/generate` (SGLang)"
    )
    where = "sglext.spec_tokens_details"
    request_fields: ClassVar[Mapping[str, Any]] = MappingProxyType({DETAILS_FIELD: True})
    steps_counted_whole = True
    stop_fields = ("matched_stop",)
    # every stop token is named, the end-of-sequence included
    stop_names_eos = True
    # the same request as vLLM's on /v1/tokenize (also served at /tokenize)
    tokenize = TokenizeShape(
        "sglang",
        "/v1/tokenize",
        "prompt",
        (("add_special_tokens", False),),
        with_model=True,
        detokenize="/v1/detokenize",
    )
    metrics = MetricNames(
        prefix="sglang",
        drafts="sglang:spec_verify_calls",
        draft_tokens=None,
        accepted_tokens=None,
        accepted_per_pos=None,
        # SGLang counts a request in num_requests_total when it finishes
        finished="sglang:num_requests",
        running="sglang:num_running_reqs",
        waiting="sglang:num_queue_reqs",
        # the value its scheduler last logged, over its own recent window
        spec_gauges=(
            "sglang:spec_accept_length",
            "sglang:spec_accept_rate",
            "sglang:spec_num_draft_tokens",
        ),
        token_counters=("sglang:prompt_tokens", "sglang:generation_tokens"),
        # SGLang adds each finished request's spec_verify_ct to spec_verify_calls_total
        drafts_are_verify_steps=True,
    )

    def carrier(self, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        hit = found(obj)
        return hit[0] if hit is not None else None

    def claims_without_statistics(self, objects: Sequence[Any]) -> bool:
        """SGLang's OpenAI endpoints send statistics only when asked
        (``return_spec_tokens_details``), so an SGLang answer without them is still told
        by the ``matched_stop`` of its choices (no other engine sends that key)."""
        return any(_choice_has(obj, "matched_stop") for obj in objects)

    def parse(
        self, objects: Sequence[Any], stats_map: Mapping[str, str] | None = None
    ) -> SpecStats | None:
        for obj in reversed(objects):
            if isinstance(obj, Mapping):
                hit = found(obj)
                if hit is not None:
                    return self.read(*hit)
        return None

    def normalise(self, raw: Mapping[str, Any]) -> SpecStats:
        return self.read(raw, "meta_info")

    def read(self, raw: Mapping[str, Any], where: str) -> SpecStats:
        """SGLang's statistics (``sglext.spec_tokens_details`` or ``meta_info``).

        SGLang counts ``spec_num_proposed_drafts`` as ``spec_verify_ct`` times its
        drafts per step (``--speculative-num-draft-tokens`` minus the bonus slot), so
        the drafts per step are known when that product divides exactly; its
        ``spec_accept_length`` is ``completion_tokens / spec_verify_ct``. Its
        histogram is as long as the deepest step accepted, not one entry per draft.
        """
        rounds = integer(raw.get("spec_verify_ct"))
        proposed = integer(raw.get("spec_num_proposed_drafts"))
        per_step = None
        if rounds and proposed is not None and proposed >= 0 and proposed % rounds == 0:
            per_step = proposed // rounds
        return SpecStats(
            dialect=self.name,
            decode_rounds=rounds,
            mean_acceptance_length=num(raw.get("spec_accept_length")),
            num_draft_tokens=proposed,
            num_accepted_draft_tokens=integer(raw.get("spec_num_correct_drafts")),
            num_spec_tokens=per_step,
            raw=dict(raw),
            **depth(raw, "spec_correct_drafts_histogram", where),
        )
