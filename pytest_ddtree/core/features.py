"""Request features a deployment may not serve, and how its refusal names them.

A deployment started without a feature refuses a request that asks for it with an HTTP 400
whose message names the request field (vLLM without ``--tool-call-parser``:
``tool_choice=function "get_weather" requires --tool-call-parser to be set``). Such an answer
says the deployment does not offer the feature, not that it serves it wrongly: the tests that
need it are skipped, unless ``--ddtree-require`` names it. A 400 that names no field of a
feature the request asked for (a bad ``max_tokens``, a context too long) stays a failure.
No I/O, no pytest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FEATURES", "Feature", "feature_names", "refused_feature"]


@dataclass(frozen=True)
class Feature:
    """One feature: its name, the request fields that ask for it (a request that sets none of
    them, say a ``tool_choice`` without ``tools``, is malformed, and its refusal a failure),
    and the words of a refusal that name it (matched in lower case)."""

    name: str
    fields: tuple[str, ...]
    words: tuple[str, ...]
    aliases: tuple[str, ...] = ()


FEATURES: tuple[Feature, ...] = (
    Feature(
        "tools",
        fields=("tools",),
        words=("tool_choice", "tools", "tool-call-parser", "tool_call_parser", "tool call"),
    ),
    Feature(
        "response_format",
        fields=("response_format",),
        words=(
            "response_format",
            "json_schema",
            "json_object",
            "guided",
            "structured output",
        ),
        aliases=("json",),
    ),
    Feature("logprobs", fields=("logprobs", "top_logprobs"), words=("logprobs",)),
)


def feature_names() -> dict[str, str]:
    """Every name a user may write (aliases too), to the feature's own name."""
    out = {f.name: f.name for f in FEATURES}
    out.update({alias: f.name for f in FEATURES for alias in f.aliases})
    return out


def refused_feature(status: int, body: Mapping[str, Any], answer: Any) -> tuple[str, str] | None:
    """``(feature, the server's message)`` when an HTTP 400 refuses a feature the request
    ``body`` asked for by naming it; None for any other answer.

    ``answer`` is the error answer (its JSON, or its text): the message is read from
    ``{"error": {"message": ...}}``, ``{"message": ...}`` or ``{"detail": ...}``.
    """
    if status != 400:
        return None
    message = _message(answer)
    if not message:
        return None
    lowered = message.lower()
    for feature in FEATURES:
        asked = any(body.get(f) not in (None, False, [], {}) for f in feature.fields)
        if asked and any(word in lowered for word in feature.words):
            return feature.name, message
    return None


def _message(answer: Any) -> str:
    if isinstance(answer, (bytes, str)):
        text = answer.decode("utf-8", "replace") if isinstance(answer, bytes) else answer
        try:
            answer = json.loads(text)
        except ValueError:
            return text.strip()
    if isinstance(answer, Mapping):
        error = answer.get("error", answer)
        if isinstance(error, Mapping):
            for key in ("message", "detail", "msg"):
                if isinstance(error.get(key), str):
                    return str(error[key])
        elif isinstance(error, str):
            return error
        detail = answer.get("detail")
        if isinstance(detail, str):
            return detail
    return ""
