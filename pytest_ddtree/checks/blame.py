"""The blame vocabulary: which layer a failure is blamed on, and what to do about it.

``Diagnosis`` and the advice sentences shared by the differential diagnosis
(``diagnose``) and the losslessness comparison (``lossless``).

No pytest here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pytest_ddtree.checks.comparable import SHAPING_OPTIONS
from pytest_ddtree.checks.invariants import LAYERS
from pytest_ddtree.core import jsonmodel

#: The layer a failure is blamed on ("undetermined": no layer could be told).
Blame = Literal["template", "server", "speculation", "undetermined"]
#: What a recorded diagnosis says: a blame, or a temperature-0 divergence at a numerical
#: near-tie (tolerated: no layer is blamed).
RecordedBlame = Literal["template", "server", "speculation", "undetermined", "near-tie"]

BLAME_TITLES: dict[str, str] = {**LAYERS, "undetermined": "undetermined"}


@dataclass(frozen=True)
class Diagnosis:
    """Which layer is at fault for one failing request, and what to do."""

    blame: Blame
    reason: str
    advice: str
    baseline_codes: tuple[str, ...] = ()
    cached: bool = False
    #: where the answer left the target-only baseline's, when that decided the blame:
    #: the target's margin there (``Margin.to_json``), a near-tie or a confident token
    margin: Mapping[str, Any] | None = None

    @property
    def title(self) -> str:
        """Human name of the blamed layer."""
        return BLAME_TITLES[self.blame]

    def render(self) -> str:
        """Two lines appended to a failure message."""
        return f"diagnosis: {self.title} - {self.reason}\n    what to do: {self.advice}"

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for reports and JUnit properties."""
        return jsonmodel.to_json(self)


jsonmodel.register(
    Diagnosis,
    cached=jsonmodel.override(omit=True),
    blame=jsonmodel.override(rename="verdict"),  # the key older files have
    derived={"title": lambda d: d.title},
    order=("verdict", "title"),
)

TEMPLATE_ADVICE = (
    "the target model alone fails the same way: fix the chat template, the stop tokens "
    "or the prompt; speculative decoding is not the cause"
)
SPECULATION_ADVICE = (
    "the target model alone is fine: the speculative-decoding layer (wrapper, drafter or "
    "tree verification) is at fault"
)
#: what a failure only the endpoint under test shows, beside one the baseline shares, points at
OWN_FAILURE_ADVICE = (
    "the endpoint under test alone breaks the rest, so look for it in its own stack "
    "(speculation, a wrapper, a proxy or its sampling settings)"
)
NO_DRAFTS_TITLE = "the speculative endpoint's stack, not its drafts"
NO_DRAFTS_ADVICE = (
    "no drafted token reached this answer, so neither the drafter nor tree verification wrote "
    "it: what remains is the rest of the speculative endpoint's stack - a wrapper, a proxy, the "
    "chat template or the sampling settings; compare them with the target-only baseline's"
)
SERVER_ADVICE = (
    "the target-only server fails the same way (errors, timeouts, broken streams, wrong "
    "usage or finish accounting): check the serving stack, its resources and the network; "
    "speculation is not the cause"
)
#: what a shared failure of a requested structure or stop points at, by code: the serving
#: stack's own machinery for it, not its resources or the network
SERVER_FEATURE_ADVICE: dict[str, str] = {
    "tool-call": (
        "the target-only server breaks the tool call the same way: its tool support is at fault "
        "(tool_choice honoured or ignored, the tool-call parser, the chat template's tools; "
        "llama.cpp: --jinja)"
    ),
    "json-schema": (
        "the target-only server breaks the schema the same way: its structured-output backend "
        "does not enforce response_format"
    ),
    "json-object": (
        "the target-only server breaks response_format json_object the same way: its "
        "structured-output backend does not enforce it"
    ),
    "stop-sequence": (
        "the target-only server misses the stop sequence the same way: the serving stack's stop "
        "matching is at fault"
    ),
}


#: the capabilities llama.cpp's ``GET /props`` reports of its chat template that tell
#: whether the template can carry tools, in the order named
TOOL_CAPS = ("supports_tools", "supports_tool_calls")


def template_tool_caps(props: Mapping[str, Any] | None) -> dict[str, bool] | None:
    """What ``props`` (a server's ``GET /props``) says its chat template does with tools:
    ``TOOL_CAPS`` present as booleans; None when it says nothing of them."""
    caps = props.get("chat_template_caps") if props is not None else None
    if not isinstance(caps, Mapping):
        return None
    found = {name: caps[name] for name in TOOL_CAPS if isinstance(caps.get(name), bool)}
    return found or None


def tool_call_advice(props: Mapping[str, Any] | None) -> str:
    """The advice for a tool call the target-only server breaks too: what its chat template
    says of tools when its ``GET /props`` says it (llama.cpp), else the general one."""
    caps = template_tool_caps(props)
    if caps is None:
        return SERVER_FEATURE_ADVICE["tool-call"]
    said = ", ".join(f"chat_template_caps.{k}={str(v).lower()}" for k, v in caps.items())
    head = "the target-only server breaks the tool call the same way: its chat template says it"
    if not all(caps.values()):
        return (
            f"{head} does not support tools (llama.cpp GET /props: {said}): serve a template "
            "that does (llama.cpp: --chat-template-file), or a model whose template does"
        )
    return (
        f"{head} supports tools (llama.cpp GET /props: {said}): the model's answer or the "
        "server's reading of it is at fault (tool_choice honoured or ignored, the tool-call "
        "parser for this template's format)"
    )


def server_advice(
    shared: Iterable[str],
    followers: Iterable[str] = (),
    props: Callable[[], Mapping[str, Any] | None] | None = None,
) -> str:
    """The advice for failures the target-only baseline shares: each requested feature's own
    (in the order of ``SERVER_FEATURE_ADVICE``) when every shared code is such a feature or
    follows from one (``followers``); else the stack's resources and network, which a cut
    stream or an error beside a broken structure points at first. ``props`` reads the
    server's ``GET /props``, asked only for a shared tool call (``tool_call_advice``)."""
    codes, after = set(shared), set(followers)
    features = [code for code in SERVER_FEATURE_ADVICE if code in codes]
    if not features or not codes <= set(features) | after:
        return SERVER_ADVICE
    advice = "; ".join(
        tool_call_advice(props() if props is not None else None)
        if code == "tool-call"
        else SERVER_FEATURE_ADVICE[code]
        for code in features
    )
    return f"{advice}; speculation is not the cause"


REJECTED_ADVICE = f"the server refused the request as sent: {SHAPING_OPTIONS}"
NO_BASELINE_LOSSY_ADVICE = (
    "the output changes with the tree budget, which lossless speculation never does: look at "
    "the speculative-decoding layer; no baseline is configured, so target-only decoding was "
    "not compared (give --ddtree-baseline-endpoint to compare with it)"
)
CLIENT_SIDE_ADVICE = (
    "this is the client's side of the exchange (its connection, deadline or size limit), not "
    "evidence about speculation or the template: check the network, --ddtree-timeout and "
    "--ddtree-max-response-bytes, then run again"
)


def lossless_advice(has_baseline: bool) -> str:
    """What to do about a not-lossless result; no claim about the target alone without one."""
    return SPECULATION_ADVICE if has_baseline else NO_BASELINE_LOSSY_ADVICE


NOT_WHOLE_ADVICE = (
    "an answer that did not arrive whole (a broken or cut stream, an in-band error, a failed "
    "request) cannot be compared: fix what cut it (the server's stream, a proxy in between, or "
    "the client's --ddtree-timeout and --ddtree-max-response-bytes), then run again"
)
NOT_COMPARABLE_TITLE = "not comparable"

SAMPLED_ADVICE = (
    "judge sampled answers by rates, as test_lossless_in_distribution (ddtree_distribution) "
    "does; to name a layer, reproduce the failure at temperature 0, where the baseline's "
    "answer is the one a lossless server must give"
)
NEAR_TIE_FLIP_ADVICE = (
    "a lossless speculative server may flip a numerical near-tie (batched verification "
    "computes the logits in another order): the failure is the model's own continuation from "
    "that token, so fix it where the model is (prompt, sampling settings, max_tokens); "
    "speculative decoding is not shown to be at fault"
)
#: what to do when the target alone answers one request two ways at temperature 0
UNSTABLE_TARGET_ADVICE = (
    "the target-only server does not reproduce its own greedy answer here (its numerics "
    "depend on the request: batching, log-probabilities, the cache): compare on prompts where "
    "it does, or serve both sides deterministically; speculative decoding is not shown to be "
    "at fault"
)

PROMPT_MISMATCH_ADVICE = (
    "serve the baseline with the same chat template and tokenizer as the server (same model "
    "files, same --chat-template); until both see the same prompt, a difference in output says "
    "nothing about speculative decoding"
)
