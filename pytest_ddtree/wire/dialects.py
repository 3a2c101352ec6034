"""Budget placement and the wire's view of the speculation-statistics dialects.

Speculative-decoding servers differ from plain OpenAI servers in two places:
how a request picks its tree budget, and where the server reports its
speculation statistics. This module places the budget in a request body and reads
log-probabilities and usage, which every engine shares; each dialect (detection,
parsing, stop evidence, what its statistics promise) is one plug-in in
``pytest_ddtree.core.dialects``, and the functions here delegate to it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_ddtree.core import dialects as registry
from pytest_ddtree.core.dialects.base import integer as _int
from pytest_ddtree.core.dialects.base import num as _num
from pytest_ddtree.wire.completion import SpecStats, TokenLogprob, Usage

__all__ = [
    "STOP_FIELDS",
    "budget_path",
    "detect",
    "drop_path",
    "extract_stats",
    "extract_usage",
    "logprobs_of",
    "put_budget",
    "request_fields",
    "stop_of",
]


def budget_path(path: str) -> list[str]:
    """The object keys a ``--ddtree-budget-field`` value names, outermost first.

    Two syntaxes, told apart by the first character:

    * a JSON Pointer (RFC 6901) starts with ``/``: ``/speculative.n_max`` is
      the top-level key ``speculative.n_max`` (dots are literal),
      ``/extra/ddtree/budget`` nests; ``~1`` stands for ``/`` and ``~0`` for ``~``;
    * anything else is a dotted path: ``extra.ddtree.budget`` nests and
      ``tree_budget`` is a top-level key.
    """
    if path.startswith("/"):
        return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]
    return path.split(".")


def put_budget(body: dict[str, Any], path: str, budget: int) -> dict[str, Any]:
    """A copy of ``body`` with ``budget`` at ``path`` (see ``budget_path``; objects
    created as needed)."""
    out = copy.deepcopy(body)
    node = out
    parts = budget_path(path)
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = budget
    return out


def drop_path(body: dict[str, Any], path: str) -> dict[str, Any]:
    """A copy of ``body`` without the value at ``path`` (see ``budget_path``), if present."""
    out = copy.deepcopy(body)
    node: Any = out
    parts = budget_path(path)
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(parts[-1], None)
    return out


def detect(objects: Sequence[Any]) -> str:
    """The name of the dialect whose statistics appear in ``objects`` (a response or
    chunks), or 'none' when no dialect's do (``core.dialects.detect`` keeps the two
    apart: it returns None for "detected nothing"; this string form is kept for callers
    that print it)."""
    found = registry.detect(objects)
    return found.name if found is not None else registry.OFF.name


def request_fields(dialect: str | None) -> dict[str, Any]:
    """Body fields a server of ``dialect`` needs before it reports its statistics."""
    return registry.request_fields(dialect)


#: the choice fields naming the stop that fired, each declared by its dialect
STOP_FIELDS = registry.stop_fields()


def stop_of(choice: Any) -> tuple[str | int | None, str | None]:
    """(the stop that ended the answer, the field it came from) of one choice.

    Each dialect declares its stop fields (vLLM's ``stop_reason``, SGLang's
    ``matched_stop``); they hold the stop string or the stop token id; a null one keeps
    its field named (vLLM: the model's own end-of-sequence, or the length limit);
    anything else says nothing.
    """
    if not isinstance(choice, Mapping):
        return None, None
    for key in STOP_FIELDS:
        if key not in choice:
            continue
        value = choice[key]
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            return value, f"choices[0].{key}"
        # present and null: the server says no stop of the request's list fired
        return None, f"choices[0].{key}" if value is None else None
    return None, None


# ------------------------------------------------------------ log-probabilities
#
# Every engine puts them in ``choices[0].logprobs``, each in its own shape:
# * chat completions (vLLM, SGLang, llama.cpp, OpenAI): ``{"content": [{"token", "logprob",
#   "bytes", "top_logprobs": [{"token", "logprob", "bytes"}, ...]}, ...]}``; llama.cpp adds
#   ``id`` and sends the same list on its text completions too; in a stream each chunk
#   carries the entries of its own tokens;
# * text completions (vLLM, SGLang, OpenAI's legacy shape): parallel lists ``tokens``,
#   ``token_logprobs`` and ``top_logprobs`` (one ``{token: logprob}`` object per token);
# * vLLM writes minus infinity as ``-9999.0``; SGLang and the legacy shape may send null.

#: below this a log-probability stands for minus infinity (vLLM's -9999.0)
_NO_LOGPROB = -9000.0


def _logprob(value: Any) -> float:
    num = _num(value)
    if num is None or num <= _NO_LOGPROB or math.isnan(num):
        return -math.inf
    return min(num, 0.0)


def _token_bytes(token: str, raw: Any) -> bytes:
    if isinstance(raw, list) and all(isinstance(b, int) and 0 <= b < 256 for b in raw):
        return bytes(raw)
    return token.encode("utf-8", "surrogatepass")


def _entry(item: Any) -> tuple[str, float, bytes] | None:
    if not isinstance(item, Mapping):
        return None
    token = item.get("token")
    if not isinstance(token, str):
        return None
    return token, _logprob(item.get("logprob")), _token_bytes(token, item.get("bytes"))


def _content_logprobs(content: Sequence[Any]) -> list[TokenLogprob] | None:
    out: list[TokenLogprob] = []
    for item in content:
        head = _entry(item)
        if head is None:
            return None
        top_raw = item.get("top_logprobs")
        top = (
            [e for e in (_entry(t) for t in top_raw) if e is not None]
            if isinstance(top_raw, list)
            else []
        )
        top.sort(key=lambda e: -e[1])
        out.append(TokenLogprob(head[0], head[1], head[2], tuple(top)))
    return out


def _legacy_logprobs(raw: Mapping[str, Any]) -> list[TokenLogprob] | None:
    tokens, lps, tops = raw.get("tokens"), raw.get("token_logprobs"), raw.get("top_logprobs")
    if not isinstance(tokens, list) or not isinstance(lps, list) or len(tokens) != len(lps):
        return None
    if not all(isinstance(t, str) for t in tokens):
        return None
    out: list[TokenLogprob] = []
    for i, (token, lp) in enumerate(zip(tokens, lps, strict=True)):
        alts = tops[i] if isinstance(tops, list) and i < len(tops) else None
        top = (
            [(str(k), _logprob(v), _token_bytes(str(k), None)) for k, v in alts.items()]
            if isinstance(alts, Mapping)
            else []
        )
        top.sort(key=lambda e: -e[1])
        out.append(TokenLogprob(token, _logprob(lp), _token_bytes(token, None), tuple(top)))
    return out


def logprobs_of(choice: Any) -> list[TokenLogprob] | None:
    """The per-token log-probabilities in one choice (or stream chunk's choice), in any of
    the engines' shapes; None when the choice carries none (or an unreadable shape)."""
    if not isinstance(choice, Mapping):
        return None
    raw = choice.get("logprobs")
    if not isinstance(raw, Mapping):
        return None
    content = raw.get("content")
    if isinstance(content, list):
        return _content_logprobs(content)
    return _legacy_logprobs(raw)


def extract_stats(
    dialect: str,
    objects: Sequence[Any],
    stats_map: Mapping[str, str] | None = None,
) -> SpecStats | None:
    """Normalise the statistics found in ``objects`` (newest first wins) into ``SpecStats``.

    ``objects`` is ``[response]`` for a plain request or the list of stream
    chunks. ``dialect`` 'auto' detects; 'none' returns None.
    """
    found = registry.resolve(dialect, objects)
    return found.parse(objects, stats_map or {}) if found is not None else None


def extract_usage(objects: Sequence[Any]) -> Usage | None:
    """The last ``usage`` object in a response or stream, as ``Usage``."""
    for obj in reversed(objects):
        if not isinstance(obj, Mapping):
            continue
        usage = obj.get("usage")
        if isinstance(usage, Mapping):
            details = usage.get("completion_tokens_details")
            reasoning = details.get("reasoning_tokens") if isinstance(details, Mapping) else None
            if reasoning is None:
                # SGLang puts the count at the top of ``usage`` (its details object is null)
                reasoning = usage.get("reasoning_tokens")
            prompt = usage.get("prompt_tokens_details")
            cached = prompt.get("cached_tokens") if isinstance(prompt, Mapping) else None
            return Usage(
                prompt_tokens=_int(usage.get("prompt_tokens")),
                completion_tokens=_int(usage.get("completion_tokens")),
                total_tokens=_int(usage.get("total_tokens")),
                reasoning_tokens=_int(reasoning),
                cached_tokens=_int(cached),
            )
    return None
