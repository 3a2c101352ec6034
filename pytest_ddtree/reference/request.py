"""The reference server's requests: the body of a chat or text completion, checked field by
field into a ``Request``, and the OpenAI-style error a bad field gets (``RequestError``).

Each field has its checker, called in the order a client reads the first error of; a bad value
is a 400 naming the field (``param``) and why, an unknown model a 404.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .model import ReferenceModel

__all__ = ["Request", "RequestError", "error_body", "parse_request"]

MAX_TREE_BUDGET = 4096
DEFAULT_MAX_TOKENS = 256
MAX_MODEL_LEN = 32768


class RequestError(Exception):
    def __init__(self, status: int, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param


def error_body(status: int, message: str, code: str, param: str | None = None) -> bytes:
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 404 and code == "model_not_found":
        kind = "not_found_error"
    return json.dumps(
        {"error": {"message": message, "type": kind, "param": param, "code": code}}
    ).encode()


# ------------------------------------------------------------------ request parsing


@dataclass
class Request:
    chat: bool
    prompt_text: str  # the text the plan is derived from (last user message or raw prompt)
    rendered: str  # what the model actually reads
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    tree_budget: int | None
    think: bool
    #: alternatives per token when the request asked for log-probabilities (None: not asked)
    logprobs: int | None = None


#: the most alternatives per token the server lists (``top_logprobs``), as OpenAI's API
MAX_TOP_LOGPROBS = 20


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _bad(msg: str, param: str, code: str = "invalid_value") -> RequestError:
    return RequestError(400, msg, code, param)


def parse_request(body: dict[str, Any], chat: bool, model_id: str) -> Request:
    """The request's fields, checked in the order a client reads the first error of."""
    _check_model(body, model_id)
    if chat:
        prompt_text, rendered, think = _chat_prompt(body)
    else:
        prompt_text = rendered = _text_prompt(body)
        think = False
    max_tokens = _max_tokens(body)
    temperature = _number(body, "temperature", 0.0, lambda v: 0 <= v <= 2, "[0, 2]")
    top_p = _number(body, "top_p", 1.0, lambda v: 0 < v <= 1, "(0, 1]")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise _bad(f"'seed' must be an integer, got {seed!r}", "seed", "invalid_type")
    stops = _stops(body)
    stream, include_usage = _streaming(body)
    n = body.get("n", 1)
    if n is not None and (not _is_int(n) or n != 1):
        raise _bad(f"only n=1 is supported, got {n!r}", "n")
    budget = _tree_budget(body)
    return Request(
        logprobs=_logprobs_asked(body, chat, _bad),
        chat=chat,
        prompt_text=prompt_text,
        rendered=rendered,
        max_tokens=max_tokens,
        temperature=float(temperature),
        top_p=float(top_p),
        seed=seed,
        stop=stops,
        stream=stream,
        include_usage=include_usage,
        tree_budget=budget,
        think=think,
    )


def _check_model(body: dict[str, Any], model_id: str) -> None:
    model = body.get("model", model_id)
    if not isinstance(model, str):
        raise _bad(f"'model' must be a string, got {type(model).__name__}", "model", "invalid_type")
    if model != model_id:
        raise RequestError(
            404,
            f"The model '{model}' does not exist; this server serves '{model_id}'",
            "model_not_found",
            "model",
        )


def _chat_prompt(body: dict[str, Any]) -> tuple[str, str, bool]:
    """A chat request's prompt text (the last user message), what the model reads, and
    whether thinking is on (``chat_template_kwargs.enable_thinking``)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty array", "messages", "invalid_type")
    pairs = [_message(i, m) for i, m in enumerate(messages)]
    kwargs = body.get("chat_template_kwargs", {})
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict):
        raise _bad(
            "'chat_template_kwargs' must be an object", "chat_template_kwargs", "invalid_type"
        )
    think = kwargs.get("enable_thinking", False)
    if not isinstance(think, bool):
        raise _bad(
            "'chat_template_kwargs.enable_thinking' must be a boolean",
            "chat_template_kwargs",
            "invalid_type",
        )
    users = [c for r, c in pairs if r == "user"]
    prompt_text = users[-1] if users else pairs[-1][1]
    return prompt_text, ReferenceModel.render_chat(pairs, think), think


def _message(i: int, m: Any) -> tuple[str, str]:
    """One chat message as (role, text); text parts are joined."""
    if not isinstance(m, dict):
        raise _bad(f"messages[{i}] must be an object", "messages", "invalid_type")
    role = m.get("role")
    if role not in ("system", "user", "assistant", "tool", "developer"):
        raise _bad(f"messages[{i}].role {role!r} is not a known role", "messages")
    content = m.get("content")
    if isinstance(content, list):
        texts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise _bad(
                    f"messages[{i}].content parts must be {{'type': 'text', 'text': str}}",
                    "messages",
                    "invalid_type",
                )
            texts.append(part["text"])
        content = "".join(texts)
    if not isinstance(content, str):
        raise _bad(f"messages[{i}].content must be a string", "messages", "invalid_type")
    return role, content


def _text_prompt(body: dict[str, Any]) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise _bad("'prompt' must be a string", "prompt", "invalid_type")
    return prompt


def _max_tokens(body: dict[str, Any]) -> int:
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens", DEFAULT_MAX_TOKENS))
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not _is_int(max_tokens):
        raise _bad(
            f"'max_tokens' must be an integer, got {max_tokens!r}", "max_tokens", "invalid_type"
        )
    if max_tokens < 1:
        raise _bad(f"'max_tokens' must be at least 1, got {max_tokens}", "max_tokens")
    if max_tokens > MAX_MODEL_LEN:
        raise _bad(
            f"'max_tokens' {max_tokens} exceeds the model's context of {MAX_MODEL_LEN} tokens",
            "max_tokens",
        )
    return int(max_tokens)


def _number(
    body: dict[str, Any], name: str, default: float, ok: Callable[[float], bool], within: str
) -> float:
    """A sampling number (``temperature``, ``top_p``): its default when absent or null."""
    value = body.get(name, default)
    if value is None:
        value = default
    if not _is_num(value):
        raise _bad(f"'{name}' must be a number, got {value!r}", name, "invalid_type")
    if not ok(value):
        raise _bad(f"'{name}' must be in {within}, got {value}", name)
    return float(value)


def _stops(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,) if stop else ()
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        if len(stop) > 16:
            raise _bad("'stop' may hold at most 16 strings", "stop")
        return tuple(s for s in stop if s)
    raise _bad("'stop' must be a string or an array of strings", "stop", "invalid_type")


def _streaming(body: dict[str, Any]) -> tuple[bool, bool]:
    """``stream`` and ``stream_options.include_usage``."""
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad(f"'stream' must be a boolean, got {stream!r}", "stream", "invalid_type")
    so = body.get("stream_options")
    if so is None:
        return stream, False
    if not isinstance(so, dict):
        raise _bad("'stream_options' must be an object", "stream_options", "invalid_type")
    include_usage = so.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise _bad(
            "'stream_options.include_usage' must be a boolean", "stream_options", "invalid_type"
        )
    return stream, include_usage


def _tree_budget(body: dict[str, Any]) -> int | None:
    budget = body.get("tree_budget")
    if budget is None:
        return None
    if not _is_int(budget):
        raise _bad(
            f"'tree_budget' must be an integer, got {budget!r}", "tree_budget", "invalid_type"
        )
    if not 1 <= budget <= MAX_TREE_BUDGET:
        raise _bad(f"'tree_budget' must be in 1..{MAX_TREE_BUDGET}, got {budget}", "tree_budget")
    return int(budget)


def _logprobs_asked(body: dict[str, Any], chat: bool, bad: Any) -> int | None:
    """The alternatives per token a request asks for (chat: ``logprobs`` true and
    ``top_logprobs``; text completions: ``logprobs`` as a count), None when not asked."""
    lp = body.get("logprobs")
    if chat:
        if lp is None or lp is False:
            return None
        if lp is not True:
            raise bad(f"'logprobs' must be a boolean, got {lp!r}", "logprobs", "invalid_type")
        top = body.get("top_logprobs", 0)
        top = 0 if top is None else top
    else:
        if lp is None:
            return None
        top = lp
    if not _is_int(top) or not 0 <= top <= MAX_TOP_LOGPROBS:
        param = "top_logprobs" if chat else "logprobs"
        raise bad(f"'{param}' must be an integer in 0..{MAX_TOP_LOGPROBS}, got {top!r}", param)
    return int(top)
