"""A fast yes/no validator for the subset of JSON Schema the shipped schemas use.

``jsonschema`` takes 50-150 us per document, which is too slow for hundreds of
stream chunks per request. The shipped schemas only use ``type``, ``const``,
``required``, ``properties``, ``items``, ``minItems``, ``minimum``, ``oneOf`` and
``$ref``; this module compiles those into plain Python predicates once. It only
answers "valid or not": when a document is invalid, ``jsonschema`` is asked for
the precise error. A keyword outside the subset raises at compile time, so a
schema edit cannot silently weaken the check; a property test keeps the two
validators in agreement.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Predicate = Callable[[Any], bool]

_ANNOTATIONS = frozenset({"$schema", "$id", "title", "description"})
_SUPPORTED = frozenset(
    {"type", "const", "required", "properties", "items", "minItems", "minimum", "oneOf", "$ref"}
)


def _is_integer(x: Any) -> bool:
    t = type(x)
    return t is int or (t is float and x.is_integer())


def _is_number(x: Any) -> bool:
    t = type(x)
    return t is int or t is float


_TYPES: dict[str, Predicate] = {
    "object": lambda x: type(x) is dict,
    "array": lambda x: type(x) is list,
    "string": lambda x: type(x) is str,
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda x: type(x) is bool,
    "null": lambda x: x is None,
}


def _type_check(type_: str | list[str]) -> Predicate:
    names = [type_] if isinstance(type_, str) else list(type_)
    preds = [_TYPES[n] for n in names]
    if len(preds) == 1:
        return preds[0]
    return lambda x: any(p(x) for p in preds)


def compile_schema(schema: Mapping[str, Any], resolve: Callable[[str], Predicate]) -> Predicate:
    """A predicate equivalent to validating against ``schema``.

    ``resolve`` maps a ``$ref`` URI to the predicate of that schema (looked up
    lazily, so schemas may refer to each other in any order).
    """
    unknown = set(schema) - _SUPPORTED - _ANNOTATIONS
    if unknown:
        raise ValueError(
            f"schema keyword(s) not supported by the fast validator: {sorted(unknown)}"
        )
    checks: list[Predicate] = []
    if "$ref" in schema:
        uri = str(schema["$ref"])
        checks.append(lambda x: resolve(uri)(x))
    if "type" in schema:
        checks.append(_type_check(schema["type"]))
    if "const" in schema:
        const = schema["const"]
        if not isinstance(const, str):
            raise ValueError(f"fast validator supports string consts only, got {const!r}")
        checks.append(lambda x: type(x) is str and x == const)
    if "minimum" in schema:
        low = schema["minimum"]
        checks.append(lambda x: not _is_number(x) or not x < low)
    if "required" in schema:
        keys = tuple(schema["required"])
        checks.append(lambda x: type(x) is not dict or all(k in x for k in keys))
    if "properties" in schema:
        props = tuple(
            (name, compile_schema(sub, resolve)) for name, sub in schema["properties"].items()
        )

        def properties(x: Any) -> bool:
            if type(x) is not dict:
                return True
            for name, pred in props:  # noqa: SIM110 (a plain loop beats all() on a generator)
                if name in x and not pred(x[name]):
                    return False
            return True

        checks.append(properties)
    if "minItems" in schema:
        n = int(schema["minItems"])
        checks.append(lambda x: type(x) is not list or len(x) >= n)
    if "items" in schema:
        item = compile_schema(schema["items"], resolve)
        checks.append(lambda x: type(x) is not list or all(item(v) for v in x))
    if "oneOf" in schema:
        options = [compile_schema(sub, resolve) for sub in schema["oneOf"]]
        checks.append(lambda x: sum(1 for p in options if p(x)) == 1)
    if not checks:
        return lambda x: True
    if len(checks) == 1:
        return checks[0]
    frozen = tuple(checks)
    return lambda x: all(c(x) for c in frozen)
