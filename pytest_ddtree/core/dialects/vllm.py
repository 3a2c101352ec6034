"""``vllm``: vLLM's per-request ``metrics.speculative_decoding``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_ddtree.core.dialects.base import (
    MAX_DEPTH,
    Dialect,
    MetricNames,
    TokenizeShape,
    depth,
    integer,
    num,
)
from pytest_ddtree.core.dialects.stats import SpecStats


def _per_step(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """vLLM's detailed mode: the histogram built from ``per_step_accepted``."""
    steps = raw.get("per_step_accepted")
    if steps is None:
        return {}
    source = f"{where}.per_step_accepted"
    if not isinstance(steps, list) or not steps:
        return {"acceptance_histogram": None, "depth_source": source}
    counts = [integer(v) for v in steps]
    if any(c is None or c < 0 or c > MAX_DEPTH for c in counts):
        return {"acceptance_histogram": None, "depth_source": source}
    hist = [0] * (max(c for c in counts if c is not None) + 1)
    for c in counts:
        if c is not None:
            hist[c] += 1
    return {"acceptance_histogram": tuple(hist), "depth_source": source}


class VLLM(Dialect):
    name = "vllm"
    summary = "`metrics.speculative_decoding` per request (vLLM)"
    where = "metrics.speculative_decoding"
    reference_emits = True
    unstated = (
        "completion tokens are not checked against acceptance x num_spec_steps: vLLM counts "
        "only the steps that verified drafts (a step whose drafter proposed nothing is a plain "
        "decode step), the first token comes from the prefill, and the tokens of the last step "
        "after a stop are dropped; checked instead: the tokens of the speculative steps fit in "
        "the answer, accepted <= drafted, and the histogram, per-step counts, mean and rate "
        "agree with each other"
    )
    rounds_are_speculative_steps = True
    stop_fields = ("stop_reason",)
    # null: the model's own end-of-sequence, or the length limit
    null_stop_is_eos = True
    # model + prompt -> count, max_model_len, tokens
    tokenize = TokenizeShape(
        "vllm", "/tokenize", "prompt", (("add_special_tokens", False),), with_model=True
    )
    metrics = MetricNames(
        prefix="vllm",
        drafts="vllm:spec_decode_num_drafts",
        draft_tokens="vllm:spec_decode_num_draft_tokens",
        accepted_tokens="vllm:spec_decode_num_accepted_tokens",
        accepted_per_pos="vllm:spec_decode_num_accepted_tokens_per_pos",
        finished="vllm:request_success",
        running="vllm:num_requests_running",
        waiting="vllm:num_requests_waiting",
    )

    def carrier(self, obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
        metrics = obj.get("metrics")
        if isinstance(metrics, Mapping):
            spec = metrics.get("speculative_decoding")
            if isinstance(spec, Mapping):
                return spec
        return None

    def normalise(self, raw: Mapping[str, Any]) -> SpecStats:
        """vLLM's per-request ``metrics.speculative_decoding`` (summary or detailed)."""
        rounds = integer(raw.get("num_spec_steps"))
        tau = num(raw.get("mean_acceptance_length"))
        drafted = integer(raw.get("num_draft_tokens"))
        accepted = integer(raw.get("num_accepted_draft_tokens"))
        if tau is None and rounds and accepted is not None:
            # accepted drafts per step plus the bonus token of each step
            tau = 1.0 + accepted / rounds
        # the dense histogram when sent, else the detailed mode's per-step counts
        hist = depth(raw, "acceptance_histogram", self.where) or _per_step(raw, self.where)
        return SpecStats(
            dialect=self.name,
            decode_rounds=rounds,
            mean_acceptance_length=tau,
            num_draft_tokens=drafted,
            num_accepted_draft_tokens=accepted,
            num_spec_tokens=integer(raw.get("num_spec_tokens")),
            raw=dict(raw),
            **hist,
        )
