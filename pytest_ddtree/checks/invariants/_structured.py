"""Structured answers: the JSON a ``response_format`` asked for, the tool calls ``tools`` offered.

- ``json-schema``: with ``response_format`` ``json_schema`` the content parses as JSON and
  validates against the schema that was sent (``jsonschema``; the evidence gives the JSON
  path and the rule that failed);
- ``json-object``: with ``response_format`` ``json_object`` the content parses as a JSON
  object;
- ``tool-call``: every call of an answer that offered ``tools`` has an ``id``, names a tool
  offered (the one ``tool_choice`` named, when it named one), carries arguments that parse
  as JSON and validate against that tool's ``parameters``, and ends with ``finish_reason``
  ``tool_calls`` (or ``stop`` under a named ``tool_choice``, as OpenAI answers); an answer
  without a call is judged by what ``tool_choice`` required: ``required`` or a named tool
  needs a call, ``auto`` (the default) takes prose, ``none`` takes no call;
- ``json-cut``: an answer cut at ``length`` before its JSON closed is not judged against
  its schema: "cut by max_tokens after N tokens: raise max_tokens".

The content is JSON as sent: whitespace around it is JSON's own, but a Markdown fence
(```` ```json ... ``` ````) is not JSON, and an enforced format never writes one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError, best_match
from jsonschema.validators import validator_for

from pytest_ddtree.checks.invariants._context import Context, clip
from pytest_ddtree.core.violation import Violation

_MISSING: Any = object()

#: the advice of every answer cut before its JSON closed (the verdict names no layer)
RAISE_MAX_TOKENS = "raise max_tokens"


def response_format(body: Mapping[str, Any]) -> tuple[str, Mapping[str, Any] | None] | None:
    """("json_schema", its schema) or ("json_object", None) when the request asked for JSON,
    else None. The schema is ``response_format.json_schema.schema`` (OpenAI), or
    ``response_format.schema`` (llama.cpp's shorter form)."""
    rf = body.get("response_format") if isinstance(body, Mapping) else None
    if not isinstance(rf, Mapping):
        return None
    kind = rf.get("type")
    if kind == "json_schema":
        inner = rf.get("json_schema")
        schema = inner.get("schema") if isinstance(inner, Mapping) else rf.get("schema")
        return "json_schema", schema if isinstance(schema, Mapping) else None
    if kind == "json_object":
        return "json_object", None
    return None


def parse_json(text: str) -> tuple[Any, str | None]:
    """The JSON value of ``text`` (whitespace around it allowed), or ``_MISSING`` and why not."""
    if text.strip().startswith("```"):
        return _MISSING, "a Markdown ``` fence around it (bare JSON was asked for)"
    try:
        return json.loads(text), None
    except RecursionError:
        return _MISSING, "nested too deep to parse"
    except json.JSONDecodeError as exc:
        return _MISSING, f"{exc.msg} at character {exc.pos}"


#: tokens a server may generate around the JSON asked for and trim from the content (a
#: Markdown fence and its newlines: llama.cpp returns bare JSON where SmolLM2 wrote
#: "```json\n{...}\n```"), allowed beyond the usual slack of ``usage-mismatch``
JSON_TRIM_TOKENS = 8


def json_asked(ctx: Context) -> bool:
    """Whether the request asked for JSON content (a JSON ``response_format``)."""
    return response_format(_body(ctx)) is not None


def json_done(ctx: Context) -> bool:
    """Whether the request asked for JSON and the content is whole JSON (its end is the
    model's natural end: no early stop)."""
    asked = response_format(_body(ctx))
    return asked is not None and parse_json(ctx.text)[1] is None


def _body(ctx: Context) -> Mapping[str, Any]:
    body = getattr(ctx.completion.request, "body", None)
    return body if isinstance(body, Mapping) else {}


@lru_cache(maxsize=64)
def _validator(schema_json: str) -> Any:
    schema = json.loads(schema_json)
    cls = validator_for(schema, default=Draft202012Validator)
    cls.check_schema(schema)
    return cls(schema)


def schema_error(value: Any, schema: Mapping[str, Any]) -> ValidationError | str | None:
    """The most telling way ``value`` breaks ``schema`` (None when it validates), or a string
    saying why the schema itself cannot be used (the request's own problem, not judged)."""
    try:
        validator = _validator(json.dumps(schema, sort_keys=True))
    except SchemaError as exc:
        return f"the schema sent is not a valid JSON Schema: {clip(exc.message, 120)}"
    except (TypeError, ValueError) as exc:
        return f"the schema sent cannot be read: {exc}"
    error: ValidationError | None = best_match(validator.iter_errors(value))
    return error


def json_path(error: ValidationError) -> str:
    """Where in the instance ``error`` is, as a JSON path (``$.unit``, ``$.items[2]``)."""
    out = "$"
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def rule(error: ValidationError) -> str:
    """The schema rule that failed, with its value (``required: ["city", "unit"]``)."""
    value = json.dumps(error.validator_value, sort_keys=True, default=str)
    if len(value) > 80:
        value = value[:79] + "…"
    return f"{error.validator}: {value}"


def _schema_evidence(error: ValidationError) -> dict[str, Any]:
    return {
        "path": json_path(error),
        "rule": rule(error),
        "schema_path": "/".join(str(p) for p in error.absolute_schema_path) or "(root)",
        "detail": clip(error.message, 160),
    }


def _tokens(ctx: Context) -> int:
    if ctx.reported is not None:
        return ctx.reported
    return ctx.content_count()[0]


def _cut(ctx: Context, what: str) -> Violation:
    n = _tokens(ctx)
    return ctx.violation(
        "json-cut",
        f"cut by max_tokens after {n} tokens: {RAISE_MAX_TOKENS} ({what} did not close, so "
        "it is not judged against its schema)",
        completion_tokens=n,
        max_tokens=ctx.max_tokens,
        finish_reason=ctx.finish,
        tail=clip(ctx.text[-80:]) if ctx.text else None,
    )


def check_response_format(ctx: Context) -> Iterator[Violation]:
    """json-schema, json-object and json-cut for an answer that asked for JSON."""
    asked = response_format(_body(ctx))
    if asked is None or not ctx.text.strip():
        return  # nothing asked, or an empty answer (``empty`` says so)
    kind, schema = asked
    code = "json-schema" if kind == "json_schema" else "json-object"
    value, why = parse_json(ctx.text)
    if why is not None:
        if ctx.finish == "length" and _json_started(ctx.text):
            yield _cut(ctx, "the JSON")
            return
        yield ctx.violation(
            code,
            f"response_format {kind} asked for JSON; the content is not JSON ({why})",
            content=clip(ctx.text),
            finish_reason=ctx.finish,
        )
        return
    if kind == "json_object":
        if not isinstance(value, dict):
            yield ctx.violation(
                code,
                f"response_format json_object asked for a JSON object; the content is a "
                f"JSON {type(value).__name__}",
                content=clip(ctx.text),
            )
        return
    if schema is None:
        ctx.withhold("json-schema", "response_format json_schema carries no schema to judge by")
        return
    error = schema_error(value, schema)
    if isinstance(error, str):
        ctx.withhold("json-schema", error)
    elif error is not None:
        ev = _schema_evidence(error)
        yield ctx.violation(
            code,
            f"the content breaks the schema sent at {ev['path']} ({ev['rule']}): {ev['detail']}",
            content=clip(ctx.text),
            **ev,
        )


def _offered(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The tools offered, by name, with their ``parameters`` (None: no tools offered)."""
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools:
        return None
    out: dict[str, Any] = {}
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str):
            out[fn["name"]] = fn.get("parameters")
    return out


def tool_choice(body: Mapping[str, Any]) -> tuple[str, str | None]:
    """("auto" | "none" | "required" | "named", the named tool)."""
    choice = body.get("tool_choice", "auto")
    if isinstance(choice, Mapping):
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
        return "named", name if isinstance(name, str) else None
    if choice in ("none", "required"):
        return str(choice), None
    return "auto", None


def check_tool_calls(ctx: Context) -> Iterator[Violation]:
    """tool-call (and json-cut): the calls of an answer against the tools offered."""
    body = _body(ctx)
    calls = tuple(getattr(ctx.completion, "tool_calls", ()) or ())
    offered = _offered(body)
    if offered is None:
        if calls:
            yield ctx.violation(
                "tool-call",
                f"{len(calls)} tool call(s) in an answer to a request that offered no tools",
                names=", ".join(str(c.name) for c in calls),
            )
        elif ctx.finish == "tool_calls" and "tools" in body:
            yield ctx.violation("tool-call", "finish_reason 'tool_calls' but no call came")
        return
    mode, named = tool_choice(body)
    wanted = f"tool_choice {named!r}" if mode == "named" else f"tool_choice {mode!r}"
    if not calls:
        if ctx.finish == "tool_calls":
            yield ctx.violation(
                "tool-call",
                "finish_reason 'tool_calls' but no call came",
                content=clip(ctx.text) if ctx.text else None,
            )
        elif mode in ("required", "named"):
            if ctx.finish == "length" and _call_may_follow(ctx.text):
                yield _cut(ctx, "the tool call")
            else:
                yield ctx.violation(
                    "tool-call",
                    f"{wanted} requires a tool call; the answer has none"
                    + (": it is prose" if ctx.text.strip() else ""),
                    content=clip(ctx.text) if ctx.text else None,
                    finish_reason=ctx.finish,
                )
        return
    if mode == "none":
        yield ctx.violation(
            "tool-call",
            f"tool_choice 'none' forbids tool calls; the answer has {len(calls)}",
            names=", ".join(str(c.name) for c in calls),
        )
        return
    cut = False
    for call in calls:
        where = f"tool call {call.index}" + (f" ({call.name})" if call.name else "")
        if not call.id:
            yield ctx.violation("tool-call", f"{where} has no id", call=_shown(call))
        if call.name not in offered:
            yield ctx.violation(
                "tool-call",
                f"{where}: name {call.name!r} is not one of the tools offered "
                f"({', '.join(sorted(offered))})",
                call=_shown(call),
            )
        elif mode == "named" and call.name != named:
            yield ctx.violation(
                "tool-call",
                f"{where}: {wanted} named another tool",
                call=_shown(call),
            )
        if ctx.finish == "length" and _arguments_cut(call.arguments):
            cut = True
            continue
        if call.arguments is None:
            yield ctx.violation("tool-call", f"{where} has no arguments", call=_shown(call))
            continue
        value, why = parse_json(call.arguments)
        if why is not None:
            yield ctx.violation(
                "tool-call",
                f"{where}: arguments are not JSON ({why})",
                arguments=clip(call.arguments) or "(empty string)",
            )
            continue
        params = offered.get(call.name or "")
        if not isinstance(params, Mapping):
            continue
        error = schema_error(value, params)
        if isinstance(error, str):
            ctx.withhold("tool-call", f"{where}: {error}")
        elif error is not None:
            ev = _schema_evidence(error)
            yield ctx.violation(
                "tool-call",
                f"{where}: arguments break the tool's parameters at {ev['path']} "
                f"({ev['rule']}): {ev['detail']}",
                arguments=clip(call.arguments),
                **ev,
            )
    if cut:
        yield _cut(ctx, "a tool call's arguments")
        return
    finish = ctx.finish
    ok = ("tool_calls", "stop") if mode == "named" else ("tool_calls",)
    if finish is not None and finish != "length" and finish not in ok:
        yield ctx.violation(
            "tool-call",
            f"finish_reason {finish!r} after {len(calls)} tool call(s); expected "
            + " or ".join(repr(f) for f in ok),
            finish_reason=finish,
        )


def _json_started(text: str) -> bool:
    """Whether text cut by ``length`` is the start of a JSON object or array (then it is cut,
    not judged); prose cut there never was JSON, and is judged."""
    return text.lstrip()[:1] in ("{", "[")


def _arguments_cut(arguments: str | None) -> bool:
    """Whether a call's arguments cut by ``length`` are JSON that did not close: started and
    unparseable, or not started at all (the cut came right after the name)."""
    if arguments is None or not arguments.strip():
        return True
    return _json_started(arguments) and parse_json(arguments)[1] is not None


def _call_may_follow(text: str) -> bool:
    """Whether the text cut by ``length`` may be a call not yet parsed (nothing, or the start of
    JSON or of a tag such as ``<tool_call>``), rather than prose: prose is judged."""
    head = text.lstrip()[:1]
    return head in ("", "{", "[", "<")


def _shown(call: Any) -> str:
    return clip(
        json.dumps(
            {"id": call.id, "name": call.name, "arguments": call.arguments}, ensure_ascii=False
        ),
        160,
    )
