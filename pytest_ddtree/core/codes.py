"""The stable violation codes and their one-line meanings.

Tests, ``--ddtree-skip-check``, reports and the documentation all key on these
strings, so a code is never renamed once released; new checks add new codes.
"""

from __future__ import annotations

CODES: dict[str, str] = {
    "http-error": "the request did not complete: non-2xx status, transport failure or deadline",
    "empty": "HTTP 200 with no content and no reasoning text",
    "schema": "a response, stream chunk or stats block does not match the shipped JSON Schema",
    "early-stop": "finished with 'stop' after fewer tokens than the test expects",
    "finish-reason": (
        "finish_reason missing or not allowed, or 'length' while fewer than max_tokens came back"
    ),
    "finish-lie": "finish_reason 'stop' although max_tokens was reached",
    "overrun": "more tokens than max_tokens, or text after the end-of-sequence token",
    "role-leak": "chat-template role text in content ('user:', '<|im_start|>user', '[INST]', ...)",
    "special-token-leak": "special tokens in content ('<|im_end|>', '<|endoftext|>', ...)",
    "reasoning-leak": (
        "reasoning in content ('<think>', 'Thinking Process:') or reasoning while thinking is off"
    ),
    "reasoning-only": "all text in reasoning_content and none in content",
    "usage-mismatch": (
        "usage disagrees with the text or with itself (counts off, total != prompt + completion, "
        "reasoning > completion)"
    ),
    "degenerate": "a token or phrase repeated over most of a long output",
    "non-printable": "mostly control, unassigned or replacement characters",
    "budget-mismatch": "the tree budget the server echoes differs from the one requested",
    "stats-inconsistent": (
        "speculation statistics contradict each other or the output "
        "(acceptance outside 1..block_size+1, fewer tokens than acceptance x rounds)"
    ),
    "stats-inflated": (
        "self-reported acceptance or throughput higher than what the client observed"
    ),
    "stream-integrity": (
        "broken event stream: no [DONE], not exactly one finish chunk, unparseable chunk"
    ),
    "stream-error": "an in-band error event inside a 200 stream",
    "encoding": "the response body or stream is not valid UTF-8 (the byte offset is given)",
    "too-large": "the response passed --ddtree-max-response-bytes; the rest was not read",
    "nondeterministic": "the same temperature-0 request gave different output",
    "state-leak": ("a temperature-0 request gave different output right after a different request"),
    "not-lossless": (
        "at temperature 0 the output differs from target-only decoding or between tree budgets"
    ),
    "not-lossless-in-distribution": (
        "above temperature 0 the sampled answers are not distributed as target-only decoding's "
        "(a two-sample permutation test over whole answers rejects at alpha)"
    ),
    "budget-ignored": (
        "no echoed budget and timing and acceptance indistinguishable across every budget"
    ),
    "not-comparable": (
        "answers that were to be compared did not arrive whole or saw different prompts: "
        "no verdict drawn"
    ),
    "temperature-ignored": (
        "above temperature 0, requests with distinct seeds all got the temperature-0 answer"
    ),
    "seed-ignored": (
        "above temperature 0, the same seed gave different answers, or every seed one answer"
    ),
    "json-schema": (
        "response_format json_schema: the content is not JSON, or breaks the schema sent "
        "(the JSON path and the rule are given)"
    ),
    "json-object": "response_format json_object: the content is not a JSON object",
    "tool-call": (
        "a tool call without an id, naming a tool not offered or not the one tool_choice named, "
        "with arguments that are not JSON or break the tool's parameters, a finish_reason other "
        "than tool_calls, or no call where tool_choice required one"
    ),
    "json-cut": (
        "JSON asked for (response_format or a tool call) cut by max_tokens before it closed: "
        "not judged against its schema; raise max_tokens"
    ),
    "logprobs": (
        "log-probabilities asked for are missing, not one per token, not finite and at most 0, "
        "all 0.0, or apart from target-only decoding's"
    ),
    "stop-sequence": (
        "a stop sequence of the request inside the content or text after it, or finish_reason "
        "not 'stop' although the server names the stop that matched"
    ),
    "cold-warm-batched": (
        "at temperature 0 one request's answer differs cold (a prompt new to the server's "
        "cache), warm (the same again) or batched (beside other requests), where the target "
        "was sure"
    ),
}
"""Every stable code mapped to a one-line meaning (documentation is generated from it)."""

#: The layers a failure can come from, keyed as the diagnosis verdicts and the reference
#: server's fault list are, with the one name users see for each (messages, reports, docs).
LAYERS: dict[str, str] = {
    "template": "prompt / chat template / model",
    "server": "serving stack",
    "speculation": "speculative decoding",
}

#: The layer each code points at on its own evidence; None when only a replay of the
#: request on a target-only baseline can tell (the text the model wrote, its repeatability).
CODE_LAYERS: dict[str, str | None] = {
    "http-error": "server",
    "empty": None,
    "schema": "server",
    "early-stop": None,
    "finish-reason": None,
    "finish-lie": "server",
    "overrun": None,
    "role-leak": None,
    "special-token-leak": None,
    "reasoning-leak": None,
    "reasoning-only": None,
    "usage-mismatch": "server",
    "degenerate": None,
    "non-printable": None,
    "budget-mismatch": "speculation",
    "stats-inconsistent": "speculation",
    "stats-inflated": "speculation",
    "stream-integrity": "server",
    "stream-error": "server",
    "encoding": "server",
    "too-large": "server",
    "nondeterministic": None,
    "state-leak": None,
    "not-lossless": "speculation",
    "not-lossless-in-distribution": "speculation",
    "budget-ignored": "speculation",
    "not-comparable": None,
    "temperature-ignored": "server",
    "seed-ignored": "server",
    "json-schema": "server",
    "json-object": "server",
    "tool-call": "server",
    "json-cut": None,
    # wrong only under speculation (llama.cpp #27972, vLLM #17876) or in any decoding: the
    # target-only baseline's replay tells which
    "logprobs": None,
    # the serving stack matches stops; the replay still tells a speculation-only miss
    "stop-sequence": "server",
    # a prefix cache or a batch may break either layer: the baseline's own run tells
    "cold-warm-batched": None,
}

#: Codes that judge no layer at all: the answers could not be compared, so neither their
#: own evidence nor a baseline replay tells which layer is at fault.
UNJUDGED_CODES = frozenset({"not-comparable", "json-cut"})
