"""Budget placement and speculation-statistics dialects.

Speculative-decoding servers differ from plain OpenAI servers in two places:
how a request picks its tree budget, and where the server reports its
speculation statistics. This module turns every known statistics dialect into
one ``SpecStats`` record.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_ddtree.wire.completion import SpecStats, TokenLogprob, Usage

DIALECT_NAMES = ("ddtree", "vllm", "sglang", "omlx", "llamacpp", "custom", "none")
OMLX_PREFIX = "dflash_ddtree_"
# llama.cpp's per-response ``timings`` fields: every one a number >= 0 when present
LLAMACPP_TIMING_FIELDS = (
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


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def _int(value: Any) -> int | None:
    f = _num(value)
    return int(f) if f is not None and f == int(f) else None


def _ddtree_carrier(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    stats = obj.get("ddtree_stats")
    return stats if isinstance(stats, Mapping) else None


def _vllm_carrier(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    metrics = obj.get("metrics")
    if isinstance(metrics, Mapping):
        spec = metrics.get("speculative_decoding")
        if isinstance(spec, Mapping):
            return spec
    return None


def _sglang_found(obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], str] | None:
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


def _sglang_carrier(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    found = _sglang_found(obj)
    return found[0] if found is not None else None


def _omlx_carrier(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    usage = obj.get("usage")
    if isinstance(usage, Mapping) and any(str(k).startswith(OMLX_PREFIX) for k in usage):
        return usage
    return None


def _llamacpp_carrier(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    # llama.cpp puts a top-level ``timings`` object in the response, or in the
    # final (usage) chunk of a stream; ``predicted_n`` is always in it
    timings = obj.get("timings")
    if isinstance(timings, Mapping) and "predicted_n" in timings:
        return timings
    return None


# detection order: the explicit statistics blocks first, llama.cpp's generic
# ``timings`` last (a server could add timings beside its own block)
_CARRIERS = {
    "ddtree": _ddtree_carrier,
    "vllm": _vllm_carrier,
    "sglang": _sglang_carrier,
    "omlx": _omlx_carrier,
    "llamacpp": _llamacpp_carrier,
}


def detect(objects: Sequence[Any]) -> str:
    """The dialect whose statistics appear in ``objects`` (a response or chunks), or 'none'.

    SGLang's OpenAI endpoints send statistics only when asked
    (``return_spec_tokens_details``), so an SGLang answer without them is still
    told by the ``matched_stop`` of its choices (no other engine sends that key):
    'sglang', so that later requests ask for the statistics.
    """
    for obj in reversed(objects):
        if not isinstance(obj, Mapping):
            continue
        for name, carrier in _CARRIERS.items():
            if carrier(obj) is not None:
                return name
    if any(_choice_has(obj, "matched_stop") for obj in objects):
        return "sglang"
    return "none"


def _choice_has(obj: Any, key: str) -> bool:
    if not isinstance(obj, Mapping):
        return False
    choices = obj.get("choices")
    return isinstance(choices, list) and any(isinstance(c, Mapping) and key in c for c in choices)


#: the request field that makes SGLang's OpenAI endpoints send their statistics; sent
#: only to a server known to be SGLang (another server may reject an unknown field)
SGLANG_DETAILS_FIELD = "return_spec_tokens_details"


def request_fields(dialect: str | None) -> dict[str, Any]:
    """Body fields a server of ``dialect`` needs before it reports its statistics."""
    return {SGLANG_DETAILS_FIELD: True} if dialect == "sglang" else {}


#: where each stop field sits in a choice, and which engine sends it
STOP_FIELDS = ("stop_reason", "matched_stop")


def stop_of(choice: Any) -> tuple[str | int | None, str | None]:
    """(the stop that ended the answer, the field it came from) of one choice.

    vLLM's ``stop_reason`` and SGLang's ``matched_stop`` hold the stop string or
    the stop token id; a null one keeps its field named (vLLM: the model's own
    end-of-sequence, or the length limit); anything else says nothing.
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


def resolve_pointer(doc: Any, pointer: str) -> Any:
    """RFC 6901 JSON pointer lookup; None when the path does not exist."""
    if pointer == "":
        return doc
    node = doc
    for token in pointer.lstrip("/").split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping):
            if token not in node:
                return None
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node


def extract_stats(
    dialect: str,
    objects: Sequence[Any],
    stats_map: Mapping[str, str] | None = None,
) -> SpecStats | None:
    """Normalise the statistics found in ``objects`` (newest first wins) into ``SpecStats``.

    ``objects`` is ``[response]`` for a plain request or the list of stream
    chunks. ``dialect`` 'auto' detects; 'none' returns None.
    """
    if dialect == "auto":
        dialect = detect(objects)
    if dialect == "none":
        return None
    if dialect == "custom":
        return _custom(objects, stats_map or {})
    carrier_fn = _CARRIERS.get(dialect)
    if carrier_fn is None:
        return None
    for obj in reversed(objects):
        if isinstance(obj, Mapping):
            if dialect == "sglang":
                found = _sglang_found(obj)
                if found is not None:
                    return _sglang(*found)
                continue
            raw = carrier_fn(obj)
            if raw is not None:
                return _normalise(dialect, raw)
    return None


def histogram(value: Any) -> tuple[int, ...] | None:
    """``value`` as an acceptance histogram (a non-empty list of integers >= 0), or None."""
    if not isinstance(value, list) or not value:
        return None
    out = tuple(_int(v) for v in value)
    if any(v is None or v < 0 for v in out):
        return None
    return tuple(v for v in out if v is not None)


def _depth(raw: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    """The SpecStats fields of a histogram at ``raw[key]`` (``where`` names ``raw``);
    a malformed one keeps its source named and no histogram, for the stats check."""
    if key not in raw or raw[key] is None:
        return {}
    return {"acceptance_histogram": histogram(raw[key]), "depth_source": f"{where}.{key}"}


def _per_step(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    """vLLM's detailed mode: the histogram built from ``per_step_accepted``."""
    steps = raw.get("per_step_accepted")
    if steps is None:
        return {}
    source = f"{where}.per_step_accepted"
    if not isinstance(steps, list) or not steps:
        return {"acceptance_histogram": None, "depth_source": source}
    counts = [_int(v) for v in steps]
    if any(c is None or c < 0 or c > MAX_DEPTH for c in counts):
        return {"acceptance_histogram": None, "depth_source": source}
    hist = [0] * (max(c for c in counts if c is not None) + 1)
    for c in counts:
        if c is not None:
            hist[c] += 1
    return {"acceptance_histogram": tuple(hist), "depth_source": source}


VLLM_WHERE = "metrics.speculative_decoding"
#: no draft is deeper than this: a per-step count beyond it is malformed (and would cost
#: a histogram that long)
MAX_DEPTH = 4096


def _normalise(dialect: str, raw: Mapping[str, Any]) -> SpecStats:
    if dialect == "ddtree":
        return SpecStats(
            dialect="ddtree",
            tree_budget=_int(raw.get("tree_budget")),
            decode_rounds=_int(raw.get("cycles")),
            mean_acceptance_length=_num(raw.get("avg_acceptance")),
            server_tokens_per_second=_num(raw.get("tok_per_sec")),
            block_size=_int(raw.get("block_size")),
            raw=dict(raw),
            **_depth(raw, "acceptance_histogram", "ddtree_stats"),
        )
    if dialect == "vllm":
        return _vllm(raw)
    if dialect == "sglang":
        return _sglang(raw, "meta_info")
    if dialect == "llamacpp":
        return _llamacpp(raw)
    # omlx
    return SpecStats(
        dialect="omlx",
        tree_budget=_int(raw.get(OMLX_PREFIX + "tree_budget")),
        decode_rounds=_int(raw.get(OMLX_PREFIX + "cycles_completed")),
        mean_acceptance_length=_num(raw.get(OMLX_PREFIX + "avg_acceptance")),
        server_tokens_per_second=_num(raw.get(OMLX_PREFIX + "tokens_per_second")),
        raw={k: v for k, v in raw.items() if str(k).startswith(OMLX_PREFIX)},
    )


def _vllm(raw: Mapping[str, Any]) -> SpecStats:
    """vLLM's per-request ``metrics.speculative_decoding`` (summary or detailed)."""
    rounds = _int(raw.get("num_spec_steps"))
    tau = _num(raw.get("mean_acceptance_length"))
    drafted = _int(raw.get("num_draft_tokens"))
    accepted = _int(raw.get("num_accepted_draft_tokens"))
    if tau is None and rounds and accepted is not None:
        # accepted drafts per step plus the bonus token of each step
        tau = 1.0 + accepted / rounds
    # the dense histogram when sent, else the detailed mode's per-step counts
    depth = _depth(raw, "acceptance_histogram", VLLM_WHERE) or _per_step(raw, VLLM_WHERE)
    return SpecStats(
        dialect="vllm",
        decode_rounds=rounds,
        mean_acceptance_length=tau,
        num_draft_tokens=drafted,
        num_accepted_draft_tokens=accepted,
        num_spec_tokens=_int(raw.get("num_spec_tokens")),
        raw=dict(raw),
        **depth,
    )


def _sglang(raw: Mapping[str, Any], where: str) -> SpecStats:
    """SGLang's statistics (``sglext.spec_tokens_details`` or ``meta_info``).

    SGLang counts ``spec_num_proposed_drafts`` as ``spec_verify_ct`` times its
    drafts per step (``--speculative-num-draft-tokens`` minus the bonus slot), so
    the drafts per step are known when that product divides exactly; its
    ``spec_accept_length`` is ``completion_tokens / spec_verify_ct``. Its
    histogram is as long as the deepest step accepted, not one entry per draft.
    """
    rounds = _int(raw.get("spec_verify_ct"))
    proposed = _int(raw.get("spec_num_proposed_drafts"))
    per_step = None
    if rounds and proposed is not None and proposed >= 0 and proposed % rounds == 0:
        per_step = proposed // rounds
    return SpecStats(
        dialect="sglang",
        decode_rounds=rounds,
        mean_acceptance_length=_num(raw.get("spec_accept_length")),
        num_draft_tokens=proposed,
        num_accepted_draft_tokens=_int(raw.get("spec_num_correct_drafts")),
        num_spec_tokens=per_step,
        raw=dict(raw),
        **_depth(raw, "spec_correct_drafts_histogram", where),
    )


def _llamacpp(raw: Mapping[str, Any]) -> SpecStats:
    """llama.cpp's ``timings``: drafted and accepted tokens and the decode rate.

    The server adds ``draft_n`` and ``draft_n_accepted`` only when a draft was
    made, so their absence means no draft token (0 of 0, rate unknown). The
    number of verification rounds is not reported per response, so the mean
    acceptance length is unknown (never derived from a guess); the acceptance
    *rate* is ``accepted / drafted``. A field of the wrong type is left out here
    and reported by the stats check, naming it.
    """
    predicted = _int(raw.get("predicted_n"))
    if "draft_n" in raw:
        drafted = _int(raw.get("draft_n"))
        accepted = _int(raw.get("draft_n_accepted"))
    else:
        drafted, accepted = (0, 0) if predicted is not None else (None, None)
    rate = _num(raw.get("predicted_per_second"))
    return SpecStats(
        dialect="llamacpp",
        num_draft_tokens=drafted,
        num_accepted_draft_tokens=accepted,
        server_tokens_per_second=rate if rate is not None and rate >= 0 else None,
        raw=dict(raw),
    )


def llamacpp_bad_fields(raw: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The ``timings`` fields present with a value that is not a finite number >= 0."""
    bad: list[tuple[str, Any]] = []
    for name in LLAMACPP_TIMING_FIELDS:
        if name in raw:
            value = _num(raw[name])
            if value is None or value < 0:
                bad.append((name, raw[name]))
    return bad


def _custom(objects: Sequence[Any], stats_map: Mapping[str, str]) -> SpecStats | None:
    for obj in reversed(objects):
        found = {key: resolve_pointer(obj, ptr) for key, ptr in stats_map.items()}
        if any(v is not None for v in found.values()):
            return SpecStats(
                dialect="custom",
                tree_budget=_int(found.get("tree_budget")),
                decode_rounds=_int(found.get("decode_rounds")),
                mean_acceptance_length=_num(found.get("mean_acceptance_length")),
                server_tokens_per_second=_num(found.get("server_tokens_per_second")),
                block_size=_int(found.get("block_size")),
                num_draft_tokens=_int(found.get("num_draft_tokens")),
                num_accepted_draft_tokens=_int(found.get("num_accepted_draft_tokens")),
                raw={k: v for k, v in found.items() if v is not None},
            )
    return None


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
            return Usage(
                prompt_tokens=_int(usage.get("prompt_tokens")),
                completion_tokens=_int(usage.get("completion_tokens")),
                total_tokens=_int(usage.get("total_tokens")),
                reasoning_tokens=_int(reasoning),
            )
    return None
