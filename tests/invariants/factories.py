"""Hand-built completions for the invariant tests: healthy by default, with
keyword overrides to break exactly one thing at a time."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from pytest_ddtree.wire.completion import (
    Completion,
    RequestSpec,
    SpecStats,
    StreamInfo,
    Timings,
    Usage,
)
from pytest_ddtree.wire.protocol import Exchange, StreamDecoder, assemble

HEALTHY_TEXT = (
    "Speculative decoding lets a small drafter propose several tokens at once, and the "
    "target model checks them in a single forward pass. When the drafter guesses well, "
    "each round commits many tokens; when it guesses badly, the round still commits the "
    "target's own token, so the output never changes. The tree budget decides how many "
    "candidate nodes the drafter may propose per round."
)


def request(
    *,
    api: str = "chat",
    stream: bool = False,
    max_tokens: int = 256,
    tree_budget: int | None = 64,
    temperature: float = 0.0,
    body: dict[str, Any] | None = None,
) -> RequestSpec:
    """A request spec with sensible defaults."""
    return RequestSpec(
        api=api,  # type: ignore[arg-type]
        url="http://127.0.0.1:9/v1/chat/completions",
        body=body if body is not None else {"model": "m", "max_tokens": max_tokens},
        tree_budget=tree_budget,
        stream=stream,
        max_tokens=max_tokens,
        temperature=temperature,
        prompt_id="p1",
    )


def chat_body(
    text: str,
    *,
    finish: str | None = "stop",
    usage: dict[str, Any] | None = None,
    stats: dict[str, Any] | None = None,
    reasoning: str | None = None,
) -> dict[str, Any]:
    """A non-streamed chat.completion body."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    if stats is not None:
        body["ddtree_stats"] = stats
    return body


def chunks_for(
    pieces: list[str],
    *,
    finish: str = "stop",
    usage: dict[str, Any] | None = None,
    stats: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """chat.completion.chunk objects for ``pieces``: role chunk, content, finish, usage."""
    base = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "m",
    }
    out: list[dict[str, Any]] = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}
    ]
    for p in pieces:
        out.append(
            {**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
        )
    out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    last: dict[str, Any] = {**base, "choices": [], "usage": usage}
    if stats is not None:
        last["ddtree_stats"] = stats
    out.append(last)
    return out


CHUNK_HEAD = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "created": 1700000000,
    "model": "m",
}


def chunk(delta: dict[str, Any], *, finish: str | None = None, **choice: Any) -> dict[str, Any]:
    """One chat.completion.chunk carrying ``delta`` (``choice``: more fields of its choice,
    such as ``logprobs``)."""
    return {
        **CHUNK_HEAD,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, **choice}],
    }


def usage_chunk(completion_tokens: int, prompt_tokens: int = 20) -> dict[str, Any]:
    """The closing chunk of a stream asked for ``stream_options.include_usage``."""
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return {**CHUNK_HEAD, "choices": [], "usage": usage}


def sse(objects: Sequence[dict[str, Any]]) -> bytes:
    """The body of an event stream sending ``objects``, then ``[DONE]``."""
    events = [f"data: {json.dumps(obj)}\n\n" for obj in objects] + ["data: [DONE]\n\n"]
    return "".join(events).encode()


def assembled(
    sent: dict[str, Any] | Sequence[dict[str, Any]],
    body: dict[str, Any],
    *,
    api: str = "chat",
    reads: int = 1,
) -> Completion:
    """The completion the client's own protocol core (``wire.protocol``) makes of what a
    server sent: a list of chunk objects is a stream (sent as server-sent events, read in
    ``reads`` slices of the bytes), one object a plain answer. ``body`` is the request's."""
    stream = not isinstance(sent, dict)
    max_tokens = body.get("max_tokens")
    spec = RequestSpec(
        api=api,  # type: ignore[arg-type]
        url="http://127.0.0.1:9/v1/chat/completions",
        body=body,
        tree_budget=None,
        stream=stream,
        max_tokens=max_tokens if isinstance(max_tokens, int) else 256,
        temperature=float(body.get("temperature", 0.0)),
        prompt_id="p1",
    )
    ex = Exchange(spec)
    ex.status = 200
    if not stream:
        ex.content_type, ex.body = "application/json", json.dumps(sent).encode()
        return assemble(ex)[0]
    ex.content_type = "text/event-stream"
    data = sse(list(sent))  # type: ignore[arg-type]
    dec = StreamDecoder(spec.api)
    size = max(1, -(-len(data) // max(1, reads)))
    for at in range(0, len(data), size):
        dec.feed(data[at : at + size], stamp=1.0 + at / len(data))
    dec.close()
    return assemble(ex, dec)[0]


def completion(
    text: str = HEALTHY_TEXT,
    *,
    tokens: int | None = None,
    finish: str | None = "stop",
    max_tokens: int = 256,
    stream: bool = False,
    reasoning: str = "",
    prompt_tokens: int = 20,
    usage: Usage | str | None = "auto",
    stats: SpecStats | str | None = "auto",
    tree_budget: int | None = 64,
    status: int = 200,
    error: str | None = None,
    stream_info: StreamInfo | str | None = "auto",
    raw: Any = "auto",
    chunk_count: int | None = None,
    chunk_span: float = 0.5,
    temperature: float = 0.0,
    local: int | str | None = "auto",
    token_count_source: str = "tokenizer.json (test)",
) -> Completion:
    """A healthy completion of ``text``; every keyword breaks one aspect.

    ``tokens`` is the true completion token count (default: words * 4 // 3,
    which is what the tests' fake counter reports too).
    """
    n = tokens if tokens is not None else fake_count(text) + fake_count(reasoning)
    if usage == "auto":
        usage = Usage(prompt_tokens, n, prompt_tokens + n)
    if stats == "auto":
        rounds = max(1, n // 4)
        stats = SpecStats(
            dialect="ddtree",
            tree_budget=tree_budget,
            decode_rounds=rounds,
            mean_acceptance_length=round(n / rounds, 2),
            server_tokens_per_second=None,
            block_size=16,
        )
    usage_dict = (
        None
        if not isinstance(usage, Usage)
        else {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        }
    )
    stats_dict = None
    if isinstance(stats, SpecStats):
        stats_dict = {
            "tree_budget": stats.tree_budget if stats.tree_budget is not None else 64,
            "cycles": stats.decode_rounds or 0,
            "avg_acceptance": stats.mean_acceptance_length or 1.0,
            "tok_per_sec": stats.server_tokens_per_second or 100.0,
            "block_size": 16,
        }
    chunk_times: tuple[float, ...] = ()
    chunk_tokens: tuple[int, ...] = ()
    if stream:
        k = chunk_count if chunk_count is not None else max(1, min(n, 40))
        pieces = split(text, k)
        if raw == "auto":
            raw = chunks_for(pieces, finish=finish or "stop", usage=usage_dict, stats=stats_dict)
        if stream_info == "auto":
            stream_info = StreamInfo(
                events=len(pieces) + 3, done_seen=True, finish_chunks=1, usage_seen=True
            )
        k = len(pieces)
        chunk_times = tuple(1.0 + chunk_span * i / max(1, k - 1) for i in range(k))
        per = [n // k] * k
        per[-1] += n - sum(per)
        chunk_tokens = tuple(per)
    else:
        if raw == "auto":
            raw = chat_body(
                text, finish=finish, usage=usage_dict, stats=stats_dict, reasoning=reasoning or None
            )
        if stream_info == "auto":
            stream_info = None
    timings = Timings(
        sent=0.9,
        headers=0.95,
        first_content=chunk_times[0] if chunk_times else 1.0,
        done=(chunk_times[-1] if chunk_times else 1.5) + 0.01,
        chunk_times=chunk_times,
        chunk_tokens=chunk_tokens,
    )
    return Completion(
        request=request(
            stream=stream, max_tokens=max_tokens, tree_budget=tree_budget, temperature=temperature
        ),
        status_code=status,
        text=text,
        reasoning_text=reasoning,
        finish_reason=finish,
        usage=usage if isinstance(usage, Usage) or usage is None else None,
        stats=stats if isinstance(stats, SpecStats) or stats is None else None,
        timings=timings,
        raw=raw,
        stream=stream_info if isinstance(stream_info, StreamInfo) or stream_info is None else None,
        error=error,
        local_completion_tokens=n if local == "auto" else local,  # type: ignore[arg-type]
        token_count_source=token_count_source,
        local_count_source=token_count_source,
    )


def split(text: str, k: int) -> list[str]:
    """``text`` cut into ``k`` nearly equal non-empty pieces (fewer if too short)."""
    k = max(1, min(k, len(text) or 1))
    size = max(1, len(text) // k)
    pieces = [text[i * size : (i + 1) * size] for i in range(k - 1)]
    pieces.append(text[(k - 1) * size :])
    return [p for p in pieces if p] or [""]


def fake_count(text: str) -> int:
    """The fake tokenizer: about 4/3 tokens per whitespace-separated word."""
    return (len(text.split()) * 4 + 2) // 3


class FakeCounter:
    """An exact-claiming counter with the fake count, for deterministic tests."""

    source = "fake counter"
    exact = True
    special_tokens = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>")

    def count(self, text: str) -> int:
        return fake_count(text)

    def encode(self, text: str) -> list[int] | None:
        return list(range(fake_count(text)))


class RecordedCounter:
    """An exact counter that answers with token ids recorded from a real tokenizer for one
    text, so tests of real answers run without the engine; other text gets the fake count
    and no ids."""

    source = "recorded ids"
    exact = True
    special_tokens: tuple[str, ...] = ()

    def __init__(self, text: str, ids: list[int] | None) -> None:
        self.text, self.ids = text, ids

    def count(self, text: str) -> int:
        return len(self.ids) if text == self.text and self.ids else fake_count(text)

    def encode(self, text: str) -> list[int] | None:
        return list(self.ids) if text == self.text and self.ids is not None else None


def replace(c: Completion, **changes: Any) -> Completion:
    """``dataclasses.replace`` for completions."""
    return dataclasses.replace(c, **changes)
