"""Where and how requests go: ``EndpointConfig`` and the request it builds.

The endpoint's configuration (from ``Settings``), the request body (the prompt,
the dialect's fields, the budget placed by ``budget_mode``) and the wording of
the client's own limits. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from pytest_ddtree.core import dialects as registry
from pytest_ddtree.core.settings import Settings, Timeout
from pytest_ddtree.wire import dialects
from pytest_ddtree.wire.completion import (
    Api,
    RequestSpec,
)

#: what a request asks: a prompt string, or chat messages (one mapping per message)
Messages = str | Sequence[Mapping[str, Any]]

EVENT_STREAM = "text/event-stream"

# Below the idle timeout of llama.cpp's server and of uvicorn (5 s, as is httpx's own
# default): the client drops an idle connection before the server can, so a reused
# connection is rarely one the server is closing at that very moment.
KEEPALIVE_EXPIRY = 2.0


@dataclass(frozen=True)
class EndpointConfig:
    """Where and how requests go, built once from ``Settings`` (no secret in ``repr``).

    ``budget_mode`` decides how ``tree_budget`` reaches the server: ``field``
    puts it in the JSON body at ``budget_field`` (dotted paths nest),
    ``endpoints`` sends the request to ``budget_endpoints[tree_budget]``,
    ``none`` does not send it. ``max_response_bytes`` caps every answer in
    bytes; ``retry_429`` is how many times an HTTP 429 is sent again after its
    ``Retry-After``; ``retry_stale`` sends a request again, once, on a fresh
    connection when a reused keep-alive connection closed before any byte. Each default
    that is an option's is read from ``Settings``, where it is declared.
    """

    base_url: str
    model: str | None = None
    api: Api = Settings.api
    api_key: str | None = field(default=None, repr=False)
    budget_mode: str = Settings.budget_mode
    budget_field: str = Settings.budget_field
    budget_endpoints: Mapping[int, str] = field(default_factory=dict)
    dialect: str = Settings.dialect
    stats_map: Mapping[str, str] = field(default_factory=dict)
    timeout: Timeout = Settings.timeout
    max_tokens: int = Settings.max_tokens
    enable_thinking: bool = Settings.enable_thinking
    max_response_bytes: int = Settings.max_response_bytes
    retry_429: int = Settings.retry_429
    retry_stale: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        ends = {int(k): str(v).rstrip("/") for k, v in (self.budget_endpoints or {}).items()}
        object.__setattr__(self, "budget_endpoints", ends)
        object.__setattr__(self, "stats_map", dict(self.stats_map or {}))

    @classmethod
    def from_settings(
        cls, settings: Settings, base_url: str, model: str | None = None
    ) -> EndpointConfig:
        """The configuration of ``base_url`` (the endpoint or its baseline) from ``settings``."""
        return cls(
            base_url,
            model=model,
            api=settings.api,
            api_key=settings.api_key,
            budget_mode=settings.budget_mode,
            budget_field=settings.budget_field,
            budget_endpoints=settings.budget_endpoints,
            dialect=settings.dialect,
            stats_map=settings.stats_map,
            timeout=settings.timeout,
            max_tokens=settings.max_tokens,
            enable_thinking=settings.enable_thinking,
            max_response_bytes=settings.max_response_bytes,
            retry_429=settings.retry_429,
        )

    def headers(self, accept: str = "application/json") -> dict[str, str]:
        """The session headers (the key, if any, goes here and nowhere else)."""
        out = {"Accept": accept}
        if self.api_key:
            out["Authorization"] = f"Bearer {self.api_key}"
        return out

    def httpx_timeout(self) -> httpx.Timeout:
        """httpx's per-operation timeouts (the total deadline is the shells' own)."""
        t = self.timeout
        return httpx.Timeout(
            connect=t.connect, read=min(t.read, t.total), write=t.connect, pool=t.total
        )

    def request(
        self,
        prompt: Messages,
        *,
        api: Api | None = None,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        tree_budget: int | None = None,
        stream: bool = True,
        prompt_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
        dialect: str | None = None,
    ) -> RequestSpec:
        """The request for ``prompt`` (a string, or chat messages for the chat API).

        ``dialect`` (default: the configured one) is the statistics dialect the server
        speaks, once detected: SGLang reports statistics only when asked.
        """
        api = api or self.api
        mt = self.max_tokens if max_tokens is None else max_tokens
        if isinstance(mt, bool) or not isinstance(mt, int) or mt < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        extra = dict(extra or {})
        body: dict[str, Any]
        if api == "completions":
            if not isinstance(prompt, str):
                raise TypeError("the completions API takes a prompt string, not messages")
            body = {"prompt": prompt}
        else:
            msgs = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
            body = {"messages": list(msgs)}
            if "chat_template_kwargs" not in extra:
                body["chat_template_kwargs"] = {"enable_thinking": self.enable_thinking}
        if self.model:
            body["model"] = self.model
        body.update(max_tokens=mt, temperature=temperature, stream=stream)
        if stream:
            body["stream_options"] = {"include_usage": True}
        body.update(dialects.request_fields(dialect or self.dialect))
        body.update(extra)
        base = self.base_url
        if tree_budget is not None:
            if self.budget_mode == "field":
                body = dialects.put_budget(body, self.budget_field, tree_budget)
            elif self.budget_mode == "endpoints":
                if tree_budget not in self.budget_endpoints:
                    raise ValueError(
                        f"no endpoint for tree_budget {tree_budget}; known: "
                        f"{sorted(self.budget_endpoints)}"
                    )
                base = self.budget_endpoints[tree_budget]
        return RequestSpec(
            api=api,
            url=base + _path(api),
            body=body,
            tree_budget=tree_budget,
            stream=stream,
            max_tokens=mt,
            temperature=temperature,
            prompt_id=prompt_id,
            headers=dict(headers or {}),
        )

    def spec(
        self,
        prompt: Messages,
        *,
        tree_budget: int | None,
        max_tokens: int,
        temperature: float = 0.0,
        prompt_id: str | None = None,
        extra: Mapping[str, Any] | None = None,
        dialect: str | None = None,
    ) -> RequestSpec:
        """The streamed request for ``prompt`` at ``tree_budget`` (what the load runner sends)."""
        return self.request(
            prompt,
            tree_budget=tree_budget,
            max_tokens=max_tokens,
            temperature=temperature,
            prompt_id=prompt_id,
            extra=extra,
            dialect=dialect,
        )

    def replay(self, spec: RequestSpec) -> RequestSpec:
        """``spec`` for this endpoint, without its budget (a target-only baseline replay)."""
        body = dialects.drop_path(dict(spec.body), self.budget_field)
        # the baseline may be another engine: ask it for statistics only in its own dialect
        for key in registry.all_request_fields():
            body.pop(key, None)
        body.update(dialects.request_fields(self.dialect))
        if self.model:
            body["model"] = self.model
        return RequestSpec(
            api=spec.api,
            url=self.base_url + _path(spec.api),
            body=body,
            tree_budget=None,
            stream=spec.stream,
            max_tokens=spec.max_tokens,
            temperature=spec.temperature,
            prompt_id=spec.prompt_id,
            headers=dict(spec.headers),
        )

    # -- the messages of the client's own limits, one wording on both paths

    def too_large(self, size: int) -> str:
        """The error of an answer cut at the byte cap."""
        return (
            f"response too large: more than {size:,} bytes > --ddtree-max-response-bytes "
            f"{self.max_response_bytes:,}; the rest was not read"
        )

    def deadline(self, received: int = 0) -> str:
        """The error of an exchange that passed the total deadline."""
        got = f" ({received:,} bytes received)" if received else ""
        return (
            f"deadline: no complete response within the total deadline of "
            f"{self.timeout.total:g}s{got}"
        )


def _path(api: Api) -> str:
    return "/chat/completions" if api == "chat" else "/completions"
