"""Prompt sets: the prompts a suite sends, and what a correct answer to each looks like.

A prompt set is a JSON file shaped like the suite's ``prompts.json`` (an object with a
``prompts`` list) or a JSON Lines file (``.jsonl``/``.ndjson``, or any file whose lines are
JSON objects), one prompt object a line. Every entry is validated against the shipped
schema ``schemas/prompts.json`` and then for what a schema cannot say (repeated ids, a
conversation that does not end with the user's turn, expectation values), so a bad file
stops the run with one line naming the file, the entry and the field.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["REQUEST_FIELDS", "Prompt", "PromptFileError", "PromptSet", "load_prompts"]

_JSONL_SUFFIXES = (".jsonl", ".ndjson")

#: The fields of a prompt entry that go into every request made for it, unchanged
#: (OpenAI request fields; the checks read them back from the request that was sent).
REQUEST_FIELDS = ("stop", "logprobs", "top_logprobs", "response_format", "tools", "tool_choice")


class PromptFileError(ValueError):
    """A prompt set that cannot be used; the message is one line naming file, entry and field."""


@dataclass(frozen=True)
class Prompt:
    """One prompt of a set and what a correct answer to it looks like.

    ``payload`` is what a request sends: the user's text, or the whole conversation
    (a list of ``{"role", "content"}`` messages ending with the user's turn). ``params``
    holds the request fields the entry asks for (``REQUEST_FIELDS``: stop sequences,
    logprobs, a response format, tools), sent with every request made for it.
    """

    id: str
    kind: str
    payload: str | tuple[Mapping[str, str], ...]
    expect: Mapping[str, Any] = field(default_factory=dict)
    sweep: bool = False
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def conversation(self) -> bool:
        """Whether the prompt is a list of messages (it needs the chat API)."""
        return not isinstance(self.payload, str)

    @property
    def needs_chat(self) -> str | None:
        """Why the prompt needs the chat API (a conversation, tools offered), or None."""
        if self.conversation:
            return "a conversation needs --ddtree-api chat"
        if self.params.get("tools"):
            return "tool calls need --ddtree-api chat"
        if "logprobs" in self.params or "top_logprobs" in self.params:
            # the chat form (true, top_logprobs); the completions API takes a count instead
            return "logprobs as a prompt field (true, top_logprobs) need --ddtree-api chat"
        return None

    @property
    def messages(self) -> str | list[dict[str, str]]:
        """The payload in the form ``DDTreeClient.request`` takes."""
        if isinstance(self.payload, str):
            return self.payload
        return [dict(m) for m in self.payload]

    def expectations(self, max_tokens: int) -> dict[str, Any]:
        """Keyword arguments for ``ddtree_check`` at this ``max_tokens``.

        A minimum length above ``max_tokens`` can never be met, so it is capped there.
        """
        out = dict(self.expect)
        if isinstance(out.get("min_tokens"), int):
            out["min_tokens"] = min(out["min_tokens"], max_tokens)
        return out


@dataclass(frozen=True)
class PromptSet:
    """The prompts of one file, in file order."""

    path: str
    prompts: tuple[Prompt, ...]

    def sweep_prompts(self) -> tuple[Prompt, ...]:
        """The prompts marked ``"sweep": true``, or the first three when none is."""
        return tuple(p for p in self.prompts if p.sweep) or self.prompts[:3]


def load_prompts(path: str | Path) -> PromptSet:
    """Read and validate a prompt set; a bad file raises :class:`PromptFileError`."""
    where = f"prompt file {str(path)!r}"
    entries, line_numbers = _read_entries(Path(path), where)
    _check_schema(entries, line_numbers, where)
    prompts = tuple(_prompt(e, _entry_name(i, line_numbers), where) for i, e in enumerate(entries))
    seen: dict[str, int] = {}
    for i, p in enumerate(prompts):
        if p.id in seen:
            raise PromptFileError(
                f"{where}: {_entry_name(i, line_numbers)}, field 'id': {p.id!r} is repeated "
                f"(first used by {_entry_name(seen[p.id], line_numbers)}); ids must be unique"
            )
        seen[p.id] = i
    return PromptSet(str(path), prompts)


def _read_entries(path: Path, where: str) -> tuple[list[Any], list[int] | None]:
    """The entries and, for JSON Lines, the line number of each."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PromptFileError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptFileError(f"{where}: cannot read it ({exc})") from None
    if not text.strip():
        raise PromptFileError(f"{where}: the file is empty")
    if path.suffix.lower() not in _JSONL_SUFFIXES:
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            if exc.msg != "Extra data":  # several JSON values: JSON Lines
                raise PromptFileError(f"{where}: not JSON ({exc})") from None
        else:
            if not isinstance(document, dict):
                raise PromptFileError(
                    f"{where}: expected an object with a 'prompts' list (or JSON Lines, one "
                    f"prompt object a line), got a JSON {type(document).__name__}"
                )
            _check_document(document, where)
            return list(document["prompts"]), None
    return _read_lines(text, where)


def _read_lines(text: str, where: str) -> tuple[list[Any], list[int]]:
    entries: list[Any] = []
    numbers: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise PromptFileError(f"{where}: line {number}: not JSON ({exc})") from None
        numbers.append(number)
    return entries, numbers


def _check_document(document: Mapping[str, Any], where: str) -> None:
    """The top level of a JSON prompt set: ``description`` and a non-empty ``prompts`` list."""
    unknown = sorted(set(document) - {"prompts", "description"})
    if unknown:
        raise PromptFileError(
            f"{where}: unknown top-level field {unknown[0]!r}; expected 'prompts' "
            "(and optionally 'description')"
        )
    prompts = document.get("prompts")
    if not isinstance(prompts, list) or not prompts:
        raise PromptFileError(f"{where}: field 'prompts': expected a non-empty list of prompts")


@cache
def _validator() -> Any:
    import jsonschema

    text = resources.files("pytest_ddtree").joinpath("schemas/prompts.json").read_text("utf-8")
    schema = json.loads(text)
    entry_schema = {**schema["$defs"]["prompt"], "$defs": schema["$defs"]}
    return jsonschema.Draft202012Validator(entry_schema)


def _check_schema(entries: Sequence[Any], numbers: list[int] | None, where: str) -> None:
    validator = _validator()
    for i, entry in enumerate(entries):
        errors = sorted(validator.iter_errors(entry), key=_error_order)
        if errors:
            name = _entry_name(i, numbers)
            ident = f" (id {entry['id']!r})" if isinstance(entry, dict) and "id" in entry else ""
            field_, why = _explain(errors[0])
            at = f", field {field_!r}" if field_ else ""
            raise PromptFileError(f"{where}: {name}{ident}{at}: {why}")


def _error_order(error: Any) -> tuple[int, str]:
    # the shallowest error first: a wrong 'expect' object before a wrong value inside it
    return len(error.absolute_path), str(list(error.absolute_path))


def _explain(error: Any) -> tuple[str, str]:
    """The dotted field an error is about and why, in words."""
    path = ".".join(str(p) for p in error.absolute_path)
    kind = error.validator
    if kind == "additionalProperties":
        known = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(known))[0]
        what = "expectation key" if path == "expect" else "field"
        hint = difflib.get_close_matches(extra, known, n=1)
        tail = f"; did you mean {hint[0]!r}?" if hint else f"; known: {', '.join(known)}"
        return _join(path, extra), f"unknown {what}{tail}"
    if kind == "required":
        missing = next(k for k in error.validator_value if k not in error.instance)
        return _join(path, missing), "is required"
    if kind == "oneOf" and not path:
        return "prompt", "give either 'prompt' (one user message) or 'messages' (a conversation)"
    if kind == "pattern" and path == "id":
        return path, f"{error.instance!r}: use letters, digits, '_', '.' and '-' (ids name tests)"
    if kind == "type" and not path:
        return "", "expected a prompt object"
    message = error.message if len(error.message) <= 120 else error.message[:117] + "..."
    return path, message


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _entry_name(index: int, numbers: list[int] | None) -> str:
    return f"entry {index + 1}" if numbers is None else f"line {numbers[index]}"


def _prompt(entry: Mapping[str, Any], name: str, where: str) -> Prompt:
    """A schema-valid entry as a ``Prompt``; checks what the schema cannot express."""
    from pytest_ddtree.core.expectation import Expectation

    pid = entry["id"]
    at = f"{where}: {name} (id {pid!r})"
    messages = entry.get("messages")
    if messages is not None and messages[-1]["role"] != "user":
        raise PromptFileError(
            f"{at}, field 'messages.{len(messages) - 1}.role': a conversation must end with "
            "the user's turn"
        )
    if "top_logprobs" in entry and not entry.get("logprobs"):
        raise PromptFileError(f"{at}, field 'top_logprobs': needs \"logprobs\": true beside it")
    if "tool_choice" in entry and "tools" not in entry:
        raise PromptFileError(f"{at}, field 'tool_choice': needs the 'tools' it chooses from")
    expect = dict(entry.get("expect", {}))
    try:
        Expectation.from_mapping(expect)
    except ValueError as exc:
        raise PromptFileError(f"{at}, field 'expect': {exc}") from None
    payload: str | tuple[Mapping[str, str], ...] = (
        entry["prompt"] if messages is None else tuple(dict(m) for m in messages)
    )
    return Prompt(
        id=pid,
        kind=str(entry.get("kind", "")),
        payload=payload,
        expect=expect,
        sweep=bool(entry.get("sweep", False)),
        params={k: entry[k] for k in REQUEST_FIELDS if k in entry},
    )
