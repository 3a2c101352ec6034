"""schema: responses and stream chunks against the JSON Schemas shipped in
``pytest_ddtree/schemas``.

Validators are built once per process, on first use: a compiled predicate
(``_fastschema``) decides validity, ``jsonschema`` explains failures. A stream is validated in
two tiers to stay cheap on long outputs: the first and last chunks, every chunk
with a ``finish_reason``, ``usage`` or ``ddtree_stats``, and one chunk in
``_SAMPLE_EVERY`` get the full schema; every chunk gets a structural check
(object type, ``choices`` list, ``delta``/``text`` types), which is where a
malformed middle chunk shows up.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Resource

from pytest_ddtree.checks.invariants._context import Context, clip
from pytest_ddtree.checks.invariants._fastschema import Predicate, compile_schema
from pytest_ddtree.core.violation import Violation

SCHEMA_NAMES = (
    "usage",
    "ddtree_stats",
    "error",
    "chat.completion",
    "text_completion",
    "chat.completion.chunk",
    "text_completion.chunk",
)
"""Every schema shipped, by file stem."""

_SAMPLE_EVERY = 128


def load_schema(name: str) -> dict[str, Any]:
    """The parsed JSON Schema ``name`` (a file stem from ``SCHEMA_NAMES``)."""
    if name not in SCHEMA_NAMES:
        raise ValueError(f"unknown schema {name!r}; known: {', '.join(SCHEMA_NAMES)}")
    text = resources.files("pytest_ddtree").joinpath(f"schemas/{name}.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _registry() -> Registry:
    resources_ = [
        (load_schema(n)["$id"], Resource.from_contents(load_schema(n))) for n in SCHEMA_NAMES
    ]
    registry: Registry = Registry().with_resources(resources_)
    return registry


@cache
def validator(name: str) -> Draft202012Validator:
    """The compiled validator for schema ``name``, built once per process."""
    return Draft202012Validator(load_schema(name), registry=_registry())


@cache
def _fast(name: str) -> Predicate:
    by_id = {load_schema(n)["$id"]: n for n in SCHEMA_NAMES}

    def resolve(uri: str) -> Predicate:
        if uri not in by_id:
            raise ValueError(f"unresolvable $ref {uri!r} in schema {name!r}")
        return _fast(by_id[uri])

    return compile_schema(load_schema(name), resolve)


def schema_errors(name: str, instance: Any) -> str | None:
    """The most relevant validation error as one line, or None when valid.

    The compiled fast predicate answers for valid documents; ``jsonschema``
    explains invalid ones (and has the last word if the two ever disagree).
    """
    if _fast(name)(instance):
        return None
    err = best_match(validator(name).iter_errors(instance))
    return None if err is None else _describe(err)


def _describe(err: ValidationError) -> str:
    where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
    return f"{where}: {clip(err.message, 160)}"


def _scan_chunk(chunk: Any, obj: str, field: str) -> tuple[str | None, bool]:
    """Cheap structural check of one stream chunk.

    Returns (problem or None, whether the chunk needs the full schema: it
    carries a finish_reason, usage or statistics). Kept to a handful of dict
    lookups because it runs on every chunk of every stream.
    """
    if type(chunk) is not dict:
        return f"chunk is a {type(chunk).__name__}, not an object", False
    if chunk.get("object") != obj:
        return f"object: {chunk.get('object')!r} is not {obj!r}", False
    choices = chunk.get("choices")
    if type(choices) is not list:
        return "choices: not an array", False
    full = chunk.get("usage") is not None or "ddtree_stats" in chunk
    for i, choice in enumerate(choices):
        if type(choice) is not dict:
            return f"choices/{i}: not an object", False
        if choice.get("finish_reason") is not None:
            full = True
        if field == "delta":
            delta = choice.get("delta")
            if type(delta) is not dict:
                return f"choices/{i}/delta: not an object", False
            content = delta.get("content")
            if content is not None and type(content) is not str:
                return f"choices/{i}/delta/content: not a string", False
        elif type(choice.get("text")) is not str:
            return f"choices/{i}/text: not a string", False
    return None, full


def _is_error_event(item: Any) -> bool:
    return isinstance(item, Mapping) and "error" in item and "choices" not in item


def check_schema(ctx: Context) -> Iterator[Violation]:
    """schema: ``completion.raw`` against the schema of its API and mode."""
    c = ctx.completion
    chat = getattr(c.request, "api", "chat") != "completions"
    raw = c.raw
    if c.stream is None and not isinstance(raw, list):
        name = "chat.completion" if chat else "text_completion"
        if raw is None:
            yield ctx.violation("schema", f"no JSON body to validate against {name}")
            return
        problem = schema_errors(name, raw)
        if problem is not None:
            yield ctx.violation(
                "schema", f"response does not match {name}: {problem}", body=clip(repr(raw), 200)
            )
        return
    if not isinstance(raw, list):
        yield ctx.violation(
            "schema", f"stream chunks are a {type(raw).__name__}, expected a list of chunks"
        )
        return
    name = "chat.completion.chunk" if chat else "text_completion.chunk"
    obj = "chat.completion.chunk" if chat else "text_completion"
    field = "delta" if chat else "text"
    chunks = [item for item in raw if not _is_error_event(item)]
    last = len(chunks) - 1
    bad = 0
    first_problem: tuple[int, str, Any] | None = None
    for i, chunk in enumerate(chunks):
        problem, full = _scan_chunk(chunk, obj, field)
        if problem is None and (full or i == 0 or i == last or i % _SAMPLE_EVERY == 0):
            problem = schema_errors(name, chunk)
        if problem is not None:
            bad += 1
            if first_problem is None:
                first_problem = (i, problem, chunk)
    if first_problem is not None:
        i, problem, chunk = first_problem
        yield ctx.violation(
            "schema",
            f"{bad} stream chunk(s) do not match {name}; chunk {i}: {problem}",
            chunk=clip(repr(chunk), 200),
            chunks=len(chunks),
        )
