"""Fault catalogue of the reference server: every way it can be told to misbehave."""

from __future__ import annotations

__all__ = [
    "FAULTS",
    "FAULT_LAYERS",
    "SPECULATION_FAULTS",
    "TEMPLATE_FAULTS",
    "WIRE_FAULTS",
    "parse_faults",
]

FAULTS: dict[str, str] = {
    "early-eos": "the end-of-turn token fires after 4-6 tokens (finish_reason stop, "
    "stop_reason its id), as with a stop list that holds a template token; also in "
    "target-only mode",
    "role-leak": "the model runs past its turn: content gains a fake next turn "
    "('\\nuser: ...' or '\\n<|im_start|>user'); also in target-only mode",
    "think-leak": "with thinking off, a '<think>...</think>' block or a 'Thinking Process:' "
    "preamble appears inside content; also in target-only mode",
    "reasoning-only": "all generated text is returned in reasoning_content, content is empty",
    "finish-always-stop": "finish_reason is 'stop' even when max_tokens was reached",
    "overrun": "a whole extra draft block is appended past max_tokens or past the "
    "end-of-turn token (speculative decoding only)",
    "usage-mismatch": "usage.completion_tokens is far from the real count and "
    "total_tokens != prompt_tokens + completion_tokens",
    "lossy": "above budget 64 the verifier commits one drafter token the target rejected and "
    "gives no probability, so output diverges from target-only decoding where the target was "
    "sure (speculative decoding only)",
    "near-tie": "at temperature 0 the verifier once commits, in place of the target's token, "
    "its runner-up where the target's logits put the two within 0.15 nats (a near-tie "
    "batched verification can flip), so output diverges at a numerical near-tie "
    "(speculative decoding only)",
    "draft-confidence": "at temperature > 0 the verifier accepts a drafted token whenever the "
    "drafter gives it probability 0.5 or more, even where the target sampled another token, "
    "so sampled output leans towards the drafter's favourites; temperature 0 is unchanged "
    "(speculative decoding only)",
    "seed-dropped": "speculative decoding drops the request's seed: above temperature 0 every "
    "request is sampled with one fixed seed, so distinct seeds give one answer "
    "(speculative decoding only)",
    "nondeterministic": "temperature-0 output differs between identical requests",
    "state-leak": "drafter/context cache not reset: a request that follows a different "
    "request starts from the previous one's context; an identical repeat is fine "
    "(speculative decoding only)",
    "degenerate": "the first sentence is repeated until max_tokens",
    "budget-ignored": "the requested tree_budget is ignored (server default used) and "
    "no tree_budget is echoed (speculative decoding only)",
    "stats-inflated": "reported tok_per_sec is ~3x the real rate and avg_acceptance "
    "exceeds completion_tokens/cycles (speculative decoding only)",
    "empty-200": "HTTP 200 with empty content",
    "stream-error-event": "an in-band 'data: {\"error\": ...}' event mid-stream "
    "(non-streaming requests get HTTP 500)",
    "stream-no-done": "the stream ends without [DONE], its last event cut mid-JSON "
    "(non-streaming bodies are cut mid-JSON)",
    "intermittent-5xx": "every second request carrying this fault gets HTTP 503",
    "temperature-ignored": "requests above temperature 0 are decoded as at temperature 0 "
    "(seed and temperature never reach the sampler); also in target-only mode",
    "seed-ignored": "requests above temperature 0 are sampled with a fresh random seed, "
    "never the request's; also in target-only mode",
    "logprobs-zero": "every log-probability (the chosen token's and its alternatives') is "
    "0.0, as llama.cpp #27972 and vLLM #17876 (speculative decoding only)",
    "logprobs-draft": "every accepted draft token's log-probability and its alternatives are "
    "the drafter's at that draft position, not the target's (the text is the target's): at "
    "temperature 0 the chosen token is often not the best alternative listed, as when a "
    "speculative server reports the proposer's scores (speculative decoding only)",
    "cold-garble": "a cold prefill (a prompt not all in the prefix cache) garbles the answer: "
    "every 8th token is a word the target gives no probability; a warm repeat, served from the "
    "cache, is clean (speculative decoding only: a drafter whose cache a cold prefill leaves "
    "wrong, as with prefix caching plus MTP)",
    "batch-garble": "decoding beside other requests garbles the answer: while another request "
    "is in flight, every 8th token is a word the target gives no probability; alone it is "
    "clean (speculative decoding only: concurrent speculative decoding)",
    "hang": "the response stalls after a few chunks until the client disconnects, "
    "the server stops, or hang_seconds (default 600 s, longer than any sane read timeout) pass",
    "grammar-skip": "above budget 64 the verifier accepts once a drafted token the grammar "
    "of response_format or of a tool's parameters forbids (drafted tokens skip the grammar), "
    "so the JSON comes back invalid (speculative decoding only)",
    "schema-ignored": "response_format is ignored: a JSON request gets prose; also in "
    "target-only mode",
    "tool-args-dropped": "streamed tool calls lose the argument fragments of every chunk "
    "that carries more than one token (an accepted draft block); plain answers are whole "
    "(speculative decoding only)",
    "tool-call-no-id": "tool calls come without an id, plain and streamed; also in "
    "target-only mode",
    "stop-missed-in-block": "a stop string that completes inside an accepted draft block, "
    "before its last token, is not seen and the text goes on past it (SGLang PR #23802; "
    "speculative decoding only)",
    "usage-past-stop": "when a stop string completes inside a draft block, the text is "
    "trimmed at the stop but usage.completion_tokens counts every position the pass verified "
    "for the block (block_size), the tokens past the stop included (as ik_llama.cpp PR #2358 "
    "counted the accepted block; speculative decoding only: its plain decode path counts one "
    "token at a time)",
}

TEMPLATE_FAULTS = frozenset({"early-eos", "role-leak", "think-leak"})
# a drafter's cache does not exist in target-only decoding, so state-leak is speculative too
SPECULATION_FAULTS = frozenset(
    {
        "lossy",
        "near-tie",
        "draft-confidence",
        "seed-dropped",
        "overrun",
        "stats-inflated",
        "budget-ignored",
        "state-leak",
        "grammar-skip",
        "tool-args-dropped",
        "logprobs-zero",
        "logprobs-draft",
        "stop-missed-in-block",
        "usage-past-stop",
        # prefix caching with speculation (vLLM #43559) and concurrent speculative decoding
        # (DSpark PR #3): the target-only server is clean, so the baseline replay tells them
        "cold-garble",
        "batch-garble",
    }
)
WIRE_FAULTS = frozenset(FAULTS) - TEMPLATE_FAULTS - SPECULATION_FAULTS

#: The layer each fault imitates, keyed as the plugin's diagnosis verdicts are
#: (``template``, ``server``, ``speculation``; their titles are ``invariants.LAYERS``).
FAULT_LAYERS: dict[str, str] = {
    name: "template"
    if name in TEMPLATE_FAULTS
    else "speculation"
    if name in SPECULATION_FAULTS
    else "server"
    for name in FAULTS
}


def parse_faults(names: str | tuple[str, ...] | list[str], source: str) -> frozenset[str]:
    """Validate fault names (a comma-separated string or a sequence) from ``source``."""
    if isinstance(names, str):
        items = [n.strip() for n in names.split(",")]
    else:
        items = [str(n).strip() for n in names]
    out = set()
    for name in items:
        if not name:
            continue
        if name not in FAULTS:
            raise ValueError(
                f"unknown fault {name!r} in {source}; known: {', '.join(sorted(FAULTS))}"
            )
        out.add(name)
    return frozenset(out)
