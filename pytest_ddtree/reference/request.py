"""The reference server's requests: the body of a chat or text completion, checked field by
field into a ``Request``, and the OpenAI-style error a bad field gets (``RequestError``).

Each field has its checker, called in the order a client reads the first error of; a bad value
is a 400 naming the field (``param``) and why, an unknown model a 404.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .grammar import OBJECT_SCHEMA, GrammarSpec, compile_schema
from .model import ReferenceModel

__all__ = ["Request", "RequestError", "Tool", "error_body", "parse_request"]

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
    #: the grammar ``response_format`` asks for (None: plain text)
    response_format: GrammarSpec | None = None
    #: the tools offered, and ``tool_choice``: "none", "auto", "required" or a tool's name
    tools: tuple[Tool, ...] = ()
    tool_choice: str = "none"
    #: the tool this answer calls (None: the answer is content)
    call: Tool | None = None

    @property
    def named_tool(self) -> bool:
        """True when ``tool_choice`` named a function."""
        return self.tool_choice not in ("none", "auto", "required")


@dataclass(frozen=True)
class Tool:
    """A function offered in ``tools``: its name, description and the grammar of its
    ``parameters``."""

    name: str
    description: str
    parameters: GrammarSpec


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
    response_format = _response_format(body)
    tools, tool_choice = _tools(body, chat)
    return Request(
        response_format=response_format,
        tools=tools,
        tool_choice=tool_choice,
        call=_call(tools, tool_choice, prompt_text),
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


def _schema_grammar(schema: Any, param: str) -> GrammarSpec:
    if not isinstance(schema, dict):
        raise _bad(f"'{param}' must be a JSON schema object", param, "invalid_type")
    try:
        return compile_schema(schema)
    except ValueError as e:
        raise _bad(f"'{param}' is not a JSON schema the server can decode: {e}", param) from None


def _response_format(body: dict[str, Any]) -> GrammarSpec | None:
    """The grammar of ``response_format``: ``json_object`` (any object) or ``json_schema``
    (``{"name", "schema", "strict"?}``); None for ``text`` or no format."""
    rf = body.get("response_format")
    if rf is None:
        return None
    if not isinstance(rf, dict):
        raise _bad("'response_format' must be an object", "response_format", "invalid_type")
    kind = rf.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return compile_schema(OBJECT_SCHEMA)
    if kind != "json_schema":
        raise _bad(
            f"'response_format.type' must be 'text', 'json_object' or 'json_schema', got {kind!r}",
            "response_format",
        )
    js = rf.get("json_schema")
    if not isinstance(js, dict):
        raise _bad(
            "'response_format.json_schema' must be an object with 'name' and 'schema'",
            "response_format",
            "invalid_type",
        )
    name = js.get("name")
    if not isinstance(name, str) or not name:
        raise _bad(
            "'response_format.json_schema.name' must be a non-empty string",
            "response_format",
            "invalid_type",
        )
    strict = js.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise _bad(
            "'response_format.json_schema.strict' must be a boolean",
            "response_format",
            "invalid_type",
        )
    return _schema_grammar(js.get("schema", {}), "response_format.json_schema.schema")


#: the parameters of a function that declares none: an object without properties
_NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


def _tools(body: dict[str, Any], chat: bool) -> tuple[tuple[Tool, ...], str]:
    """``tools`` and ``tool_choice`` (chat only); the choice as "none", "auto", "required"
    or the named function."""
    raw, choice = body.get("tools"), body.get("tool_choice")
    if not chat:
        for name in ("tools", "tool_choice"):
            if body.get(name) is not None:
                raise _bad(f"'{name}' is only supported on /v1/chat/completions", name)
        return (), "none"
    if raw is None or raw == []:
        if choice not in (None, "none"):
            raise _bad("'tool_choice' needs 'tools'", "tool_choice")
        return (), "none"
    if not isinstance(raw, list):
        raise _bad("'tools' must be an array", "tools", "invalid_type")
    tools = []
    for i, t in enumerate(raw):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(fn, dict):
            raise _bad(
                f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}",
                "tools",
                "invalid_type",
            )
        tool_name = fn.get("name")
        if not isinstance(tool_name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tool_name):
            raise _bad(f"tools[{i}].function.name must match [A-Za-z0-9_-]{{1,64}}", "tools")
        desc = fn.get("description", "")
        if not isinstance(desc, str):
            raise _bad(f"tools[{i}].function.description must be a string", "tools")
        params = fn.get("parameters")
        grammar = _schema_grammar(
            _NO_PARAMETERS if params is None else params, f"tools[{i}].function.parameters"
        )
        tools.append(Tool(tool_name, desc, grammar))
    names = [t.name for t in tools]
    if choice is None:
        return tuple(tools), "auto"
    if choice in ("none", "auto", "required"):
        return tuple(tools), str(choice)
    fn = choice.get("function") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or not isinstance(fn, dict):
        raise _bad(
            "'tool_choice' must be 'none', 'auto', 'required' or "
            "{'type': 'function', 'function': {'name': ...}}",
            "tool_choice",
        )
    if fn.get("name") not in names:
        raise _bad(
            f"'tool_choice' names {fn.get('name')!r}, not one of the tools: {', '.join(names)}",
            "tool_choice",
        )
    return tuple(tools), str(fn["name"])


def _mentioned(tool: Tool, words: set[str]) -> bool:
    """True when the prompt's words hold the tool's name or a word of four letters or more
    of it (``get_weather``: ``weather``)."""
    parts = re.findall(r"[a-z]+", re.sub(r"([a-z])([A-Z])", r"\1 \2", tool.name).lower())
    return tool.name.lower() in words or any(len(p) >= 4 and p in words for p in parts)


def _call(tools: tuple[Tool, ...], choice: str, prompt_text: str) -> Tool | None:
    """The tool the answer calls: the named one; for "required" the first tool the prompt
    mentions (else the first tool); for "auto" the first tool the prompt mentions (else
    none: prose); for "none" none."""
    if not tools or choice == "none":
        return None
    by_name = {t.name: t for t in tools}
    if choice in by_name:
        return by_name[choice]
    words = set(re.findall(r"[a-z0-9_]+", prompt_text.lower()))
    words |= {p for w in words for p in w.split("_")}
    mentioned = next((t for t in tools if _mentioned(t, words)), None)
    if choice == "required":
        return mentioned or tools[0]
    return mentioned
