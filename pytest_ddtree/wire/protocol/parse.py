"""Reading an answer's body: its first choice, its text, its JSON, its error.

Small pure helpers shared by the event decoder and the assembly. No I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pytest_ddtree.wire.completion import (
    Api,
    ToolCall,
)


def chunk_choice(obj: Mapping[str, Any], api: Api) -> tuple[str, str, str | None]:
    """(content, reasoning, finish_reason) of one stream chunk (hot: plain dict checks)."""
    choices = obj.get("choices")
    if type(choices) is not list or not choices or type(choices[0]) is not dict:
        return "", "", None
    choice = choices[0]
    fin = choice.get("finish_reason")
    fin_s = fin if isinstance(fin, str) else None
    if api == "completions":
        return _str(choice.get("text")), "", fin_s
    delta = choice.get("delta")
    if type(delta) is not dict:
        return "", "", fin_s
    content = delta.get("content")
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    return (
        content if type(content) is str else "",
        reasoning if type(reasoning) is str else "",
        fin_s,
    )


def plain_choice(raw: Any, api: Api) -> tuple[str, str, str | None]:
    """(content, reasoning, finish_reason) of a plain (non-streamed) answer."""
    choice = _first_choice(raw)
    if choice is None:
        return "", "", None
    fin = choice.get("finish_reason")
    fin_s = fin if isinstance(fin, str) else None
    if api == "completions":
        return _str(choice.get("text")), "", fin_s
    msg = choice.get("message")
    if not isinstance(msg, Mapping):
        return "", "", fin_s
    reasoning = _str(msg.get("reasoning_content")) or _str(msg.get("reasoning"))
    return _str(msg.get("content")), reasoning, fin_s


def plain_tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    """The tool calls of a plain chat answer (``choices[0].message.tool_calls``)."""
    choice = _first_choice(raw)
    msg = choice.get("message") if choice is not None else None
    calls = msg.get("tool_calls") if isinstance(msg, Mapping) else None
    if not isinstance(calls, list):
        return ()
    out = []
    for i, call in enumerate(calls):
        if not isinstance(call, Mapping):
            out.append(ToolCall(i, None, None, None, None))
            continue
        fn = call.get("function")
        fn = fn if isinstance(fn, Mapping) else {}
        args = fn.get("arguments")
        out.append(
            ToolCall(
                i,
                _opt_str(call.get("id")),
                _opt_str(fn.get("name")),
                args if isinstance(args, str) else None,
                _opt_str(call.get("type")),
            )
        )
    return tuple(out)


class ToolCallDeltas:
    """Streamed ``choices[0].delta.tool_calls`` fragments, assembled into calls by ``index``.

    The first ``id``, ``type`` and ``name`` of a call are kept; a later fragment repeating
    the same value adds nothing, a different one is appended (OpenAI's own client appends
    every string fragment), so a conflict shows. ``arguments`` fragments are joined in
    order. A fragment without an ``index`` belongs to the position it comes in.
    """

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, str | None]] = {}

    def feed(self, delta: Mapping[str, Any]) -> None:
        """Take one delta's ``tool_calls`` list."""
        frags = delta.get("tool_calls")
        if not isinstance(frags, list):
            return
        for pos, frag in enumerate(frags):
            if not isinstance(frag, Mapping):
                continue
            index = frag.get("index")
            key = index if isinstance(index, int) and not isinstance(index, bool) else pos
            call = self._calls.setdefault(
                key, {"id": None, "type": None, "name": None, "arguments": None}
            )
            fn = frag.get("function")
            fn = fn if isinstance(fn, Mapping) else {}
            for field, value in (
                ("id", frag.get("id")),
                ("type", frag.get("type")),
                ("name", fn.get("name")),
            ):
                if isinstance(value, str) and value and value != call[field]:
                    call[field] = (call[field] or "") + value
            args = fn.get("arguments")
            if isinstance(args, str):
                call["arguments"] = (call["arguments"] or "") + args

    def calls(self) -> tuple[ToolCall, ...]:
        """The assembled calls, in index order."""
        return tuple(
            ToolCall(i, c["id"], c["name"], c["arguments"], c["type"])
            for i, c in sorted(self._calls.items())
        )


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _first_choice(obj: Any) -> Mapping[str, Any] | None:
    if not isinstance(obj, Mapping):
        return None
    choices = obj.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        return choices[0]
    return None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def server_message(payload: Any, content: bytes) -> str:
    """A non-2xx answer's own message: its ``error.message`` (or ``error``), else the start
    of its body."""
    message = ""
    if isinstance(payload, Mapping):
        err = payload.get("error")
        if isinstance(err, Mapping):
            message = str(err.get("message", ""))
        elif isinstance(err, str):
            message = err
    return message or content[:200].decode("utf-8", "replace")


def http_error(status: int, message: str) -> str:
    """The one-line error of a non-2xx answer, with the server's own ``message``."""
    return f"HTTP {status}: {message}".strip()


def decode_text(content: bytes, where: str) -> tuple[str, str | None]:
    """``content`` as text, and where it is not valid UTF-8 (byte offset), if anywhere."""
    try:
        return content.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        bad = content[exc.start : exc.end]
        return (
            content.decode("utf-8", "replace"),
            f"invalid UTF-8 at byte {exc.start} of {where}: {bad!r}",
        )


def parse_json(text: str) -> tuple[Any, str | None]:
    """Parsed JSON, or None and why not."""
    try:
        return json.loads(text), None
    except RecursionError:
        return None, "response JSON nested too deep to parse"
    except ValueError:
        return None, f"response is not JSON: {text[:200]!r}"


def one_line(text: str, limit: int = 200) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
