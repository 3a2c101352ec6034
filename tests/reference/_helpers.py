"""Small HTTP helpers for the reference server tests (plain httpx, no plugin code)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

LONG = "Write a long essay about rivers and the valleys they shape."
SHORT = "What is the capital of Norland?"


def chat_body(prompt: str = LONG, **extra: Any) -> dict[str, Any]:
    """A chat request body for one user message."""
    body: dict[str, Any] = {
        "model": "ddtree-reference",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 64,
        "temperature": 0,
    }
    body.update(extra)
    return body


def post(
    client: httpx.Client, prompt: str = LONG, fault: str | None = None, **extra: Any
) -> httpx.Response:
    """POST /chat/completions (non-streaming)."""
    headers = {"X-DDTree-Fault": fault} if fault else {}
    return client.post("/chat/completions", json=chat_body(prompt, **extra), headers=headers)


@dataclass
class Stream:
    """A parsed SSE stream."""

    status: int
    events: list[Any] = field(default_factory=list)  # parsed JSON objects, or raw strings
    done: bool = False
    raw: str = ""

    @property
    def chunks(self) -> list[dict[str, Any]]:
        return [e for e in self.events if isinstance(e, dict)]

    @property
    def content(self) -> str:
        return "".join(
            c["choices"][0]["delta"].get("content") or ""
            for c in self.chunks
            if c.get("choices") and "delta" in c["choices"][0]
        )

    @property
    def reasoning(self) -> str:
        return "".join(
            c["choices"][0]["delta"].get("reasoning_content") or ""
            for c in self.chunks
            if c.get("choices") and "delta" in c["choices"][0]
        )

    @property
    def finish_reasons(self) -> list[str]:
        return [
            c["choices"][0]["finish_reason"]
            for c in self.chunks
            if c.get("choices") and c["choices"][0].get("finish_reason")
        ]

    @property
    def usage(self) -> dict[str, Any] | None:
        found = [c["usage"] for c in self.chunks if c.get("usage")]
        return found[-1] if found else None

    @property
    def stats(self) -> dict[str, Any] | None:
        found = [c["ddtree_stats"] for c in self.chunks if "ddtree_stats" in c]
        return found[-1] if found else None


def stream(
    client: httpx.Client,
    prompt: str = LONG,
    fault: str | None = None,
    path: str = "/chat/completions",
    body: dict[str, Any] | None = None,
    **extra: Any,
) -> Stream:
    """POST with ``stream: true`` and parse every event (unparsable ones kept as strings)."""
    headers = {"X-DDTree-Fault": fault} if fault else {}
    payload = body if body is not None else chat_body(prompt, stream=True, **extra)
    with client.stream("POST", path, json=payload, headers=headers) as r:
        text = r.read().decode()
    out = Stream(status=r.status_code, raw=text)
    for block in text.split("\n\n"):
        block = block.strip()
        if not block.startswith("data: "):
            if block:
                out.events.append(block)
            continue
        data = block[len("data: ") :]
        if data == "[DONE]":
            out.done = True
            continue
        try:
            out.events.append(json.loads(data))
        except ValueError:
            out.events.append(data)
    return out


def counts(usage: dict[str, Any]) -> dict[str, Any]:
    """A ``usage`` block's token counts: what the prefix cache held
    (``prompt_tokens_details``) depends on the requests before, never on the answer."""
    return {k: v for k, v in usage.items() if k != "prompt_tokens_details"}
