"""The one JSON form of the records: read and written from their dataclass fields.

Every record that goes into ``sweep.json`` or the pytest-xdist payload is a plain dataclass;
:func:`to_json` and :func:`from_json` turn it into plain JSON and back from its field
declarations, through one ``cattrs`` converter. A record whose JSON differs from its fields
(a renamed key, a derived figure written beside the fields) registers its hook here with
:func:`register`, next to the record, never a hand-written loop over its fields.

Reading is strict where the record is: a value of the wrong kind raises one ``ValueError``
line that names where it is (``samples[3]: field 'round' must be an integer, got 'one'``;
a nested field is named by its path, ``field 'point.value'``). Integers are never read from
``true``/``false``; a whole number is read as a float where a float is declared.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Mapping, Sequence
from types import UnionType as _UnionType
from typing import Any, TypeVar, Union, get_args, get_origin

import cattrs
from cattrs.errors import ClassValidationError, IterableValidationError
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

__all__ = [
    "FieldError",
    "converter",
    "from_json",
    "json_schema",
    "number",
    "override",
    "register",
    "to_json",
    "writer",
]

T = TypeVar("T")


class FieldError(ValueError):
    """One value of the wrong kind: what was wanted (alternatives) and what came."""

    def __init__(self, wants: tuple[str, ...], value: Any) -> None:
        self.wants = wants
        self.value = value
        super().__init__(f"must be {_either(wants)}, got {value!r}")


def _either(wants: tuple[str, ...]) -> str:
    return wants[0] if len(wants) == 1 else f"{', '.join(wants[:-1])} or {wants[-1]}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: Any, _: Any = None) -> int:
    if not _is_int(value):
        raise FieldError(("an integer",), value)
    return int(value)


def _float(value: Any, _: Any = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FieldError(("a finite number",), value)
    return float(value)


def number(value: Any, _: Any = None) -> int | float:
    """A finite number kept as written (a whole number stays an integer, so it is written
    back as it was read); for a field declared ``float`` that an older version wrote as
    ``16``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FieldError(("a finite number",), value)
    return value


def _str(value: Any, _: Any = None) -> str:
    if not isinstance(value, str):
        raise FieldError(("a string",), value)
    return value


def _bool(value: Any, _: Any = None) -> bool:
    if not isinstance(value, bool):
        raise FieldError(("true", "false"), value)
    return value


def _counts(value: Any, _: Any = None) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(_is_int(x) and x >= 0 for x in value):
        raise FieldError(("a list of integers >= 0",), value)
    return tuple(value)


def _strings(value: Any, _: Any = None) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise FieldError(("a list of strings",), value)
    return tuple(value)


def _optional_inner(tp: Any) -> Any:
    """``X`` of ``X | None`` (a two-member union with None), else None."""
    if get_origin(tp) not in (Union, _UnionType):
        return None
    args = [a for a in get_args(tp) if a is not type(None)]
    return args[0] if len(args) == 1 and len(get_args(tp)) == 2 else None


def _make_optional(tp: Any) -> Callable[[Any, Any], Any]:
    inner = _optional_inner(tp)
    handler = converter.get_structure_hook(inner)

    def structure(value: Any, _: Any) -> Any:
        if value is None:
            return None
        try:
            return handler(value, inner)
        except FieldError as exc:
            raise FieldError((*exc.wants, "null"), value) from None

    return structure


#: The one converter: tuples are written as lists, keys in field order.
converter = cattrs.Converter(
    unstruct_collection_overrides={tuple: list},
    detailed_validation=True,
)
converter.register_structure_hook(int, _int)
converter.register_structure_hook(float, _float)
converter.register_structure_hook(str, _str)
converter.register_structure_hook(bool, _bool)
converter.register_structure_hook_func(lambda tp: tp == tuple[int, ...], _counts)
converter.register_structure_hook_func(lambda tp: tp == tuple[str, ...], _strings)
converter.register_structure_hook_factory(
    lambda tp: _optional_inner(tp) is not None and tp is not Any, _make_optional
)


def register(
    cls: type[Any],
    *,
    omit_if_default: bool = False,
    derived: Mapping[str, Callable[[Any], Any]] | None = None,
    order: Sequence[str] = (),
    localns: Mapping[str, Any] | None = None,
    read: bool = True,
    upgrade: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
    **fields: Any,
) -> None:
    """Read and write ``cls`` from its fields, with ``fields`` overrides (``override(...)``):
    ``rename`` for a JSON key other than the field's name, ``omit`` for a field kept out.

    ``derived``: figures computed from the record, written after the fields (a reader
    ignores them); ``order``: the JSON keys that come first, in this order (the form an
    older version wrote), the others after them in field order; ``localns``: the names
    the annotations use that the record's module imports only for type checking;
    ``read=False``: written only (a generic record, recomputed when a file is read);
    ``upgrade``: turns the form an older version wrote (former keys) into today's, before
    it is read."""
    if localns is not None:  # resolved here, once: cattrs then reads the fields' types
        hints = typing.get_type_hints(cls, localns=dict(localns))
        for f in dataclasses.fields(cls):
            f.type = hints[f.name]
    converter.register_unstructure_hook(
        cls, writer(cls, omit_if_default=omit_if_default, derived=derived, order=order, **fields)
    )
    # an error names the JSON key a user sees in the file, not the field's name
    _KEYS[cls] = {n: o.rename for n, o in fields.items() if getattr(o, "rename", None)}
    if not read:
        return
    today = make_dict_structure_fn(cls, converter, **fields)
    if upgrade is None:
        converter.register_structure_hook(cls, today)
        return

    def structure(data: Any, tp: Any) -> Any:
        return today(upgrade(data) if isinstance(data, Mapping) else data, tp)

    converter.register_structure_hook(cls, structure)


def writer(
    cls: type[Any],
    *,
    omit_if_default: bool = False,
    derived: Mapping[str, Callable[[Any], Any]] | None = None,
    order: Sequence[str] = (),
    **fields: Any,
) -> Callable[[Any], dict[str, Any]]:
    """The JSON writer :func:`register` builds for ``cls`` from the same declarations, not
    registered: for a record written in a second form beside its own (an arm's budget row
    in the sweep beside its load-point row)."""
    plain: Callable[[Any], dict[str, Any]] = make_dict_unstructure_fn(
        cls, converter, _cattrs_omit_if_default=omit_if_default, **fields
    )
    extra = dict(derived or {})
    first = tuple(order)

    def unstructure(record: Any) -> dict[str, Any]:
        out: dict[str, Any] = plain(record)
        for key, figure in extra.items():
            out[key] = converter.unstructure(figure(record))
        if first:
            out = {**{k: out[k] for k in first if k in out}, **out}
        return out

    return unstructure if extra or first else plain


def plain_unstructure_fn(cls: type[Any], *, omit: tuple[str, ...] = ()) -> Callable[[Any], Any]:
    """The field-by-field writer of ``cls`` (``omit``: fields left out), for a hook that
    then reshapes what it writes."""
    overrides: dict[str, Any] = {name: override(omit=True) for name in omit}
    return make_dict_unstructure_fn(cls, converter, **overrides)


def _int_or_str(value: Any, _: Any) -> int | str:
    if isinstance(value, str) or _is_int(value):
        return value  # type: ignore[no-any-return]
    raise FieldError(("an integer", "a string"), value)


converter.register_structure_hook_func(lambda tp: tp == int | str, _int_or_str)


def to_json(record: Any) -> dict[str, Any]:
    """The plain-JSON form of a record (a dict; tuples as lists)."""
    out: dict[str, Any] = converter.unstructure(record)
    return out


def from_json(cls: type[T], data: Any, *, source: str = "record") -> T:
    """Read ``cls`` from its JSON form; a bad value raises one ``ValueError`` line."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{source}: expected an object, got {type(data).__name__}")
    try:
        return converter.structure(data, cls)
    except (ClassValidationError, IterableValidationError) as group:
        path, exc = _first_leaf(group)
        where = f"field {path!r}" if path else "value"
        if isinstance(exc, FieldError):
            raise ValueError(f"{source}: {where} {exc}") from None
        if isinstance(exc, KeyError):
            raise ValueError(f"{source}: {where} is required") from None
        raise ValueError(f"{source}: {where}: {exc}") from None


#: per registered record, the fields written under another JSON key (``rename``)
_KEYS: dict[type[Any], dict[str, str]] = {}


def _first_leaf(exc: BaseException, path: str = "") -> tuple[str, BaseException]:
    """The first failure inside a ``cattrs`` error group and its JSON path (``a.b[2]``)."""
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        inner = exc.exceptions[0]
        keys = _KEYS.get(getattr(exc, "cl", None) or type(None), {})
        step = ""
        for note in getattr(inner, "__notes__", ()):
            name = getattr(note, "name", None)
            index = getattr(note, "index", None)
            if name is not None:
                name = keys.get(name, name)
                step = f".{name}" if path else str(name)
            elif index is not None:
                step = f"[{index}]"
        if isinstance(inner, KeyError) and not step:
            step = f".{inner.args[0]}" if path else str(inner.args[0])
        return _first_leaf(inner, path + step)
    return path, exc


_SCHEMAS: dict[Any, dict[str, Any]] = {
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    bool: {"type": "boolean"},
    tuple[int, ...]: {"type": "array", "items": {"type": "integer", "minimum": 0}},
    tuple[str, ...]: {"type": "array", "items": {"type": "string"}},
    tuple[float, ...]: {"type": "array", "items": {"type": "number"}},
}


def json_schema(cls: type[Any]) -> dict[str, Any]:
    """The JSON Schema of a flat record of plain fields, from the same declarations."""
    hints = _hints(cls)
    fields = dataclasses.fields(cls)
    properties: dict[str, Any] = {}
    for f in fields:
        tp = hints[f.name]
        inner = _optional_inner(tp)
        if inner is not None:
            schema = dict(_schema(inner))
            schema["type"] = [schema["type"], "null"]
        else:
            schema = _schema(tp)
        properties[f.name] = schema
    required = [
        f.name
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    return {"type": "object", "required": required, "properties": properties}


def _schema(tp: Any) -> dict[str, Any]:
    """The schema of one plain field; a nested record is an object."""
    if dataclasses.is_dataclass(tp):
        return {"type": "object"}
    return _SCHEMAS[tp]


def _hints(cls: type[Any]) -> Mapping[str, Any]:
    return typing.get_type_hints(cls)
