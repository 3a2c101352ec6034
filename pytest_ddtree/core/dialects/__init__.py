"""The dialect registry: one plug-in per server family, and the only place that names them.

Every ``--ddtree-dialect`` choice is one ``Dialect`` instance in ``REGISTRY`` (in the
order the docs list them, which is also the detection order). The option's choices and
help, the reference server's ``--stats-dialect`` choices, the wire's parsing and the
checks all read from here; nothing outside this package compares a dialect's name.

Two values that are not dialects:

* ``AUTO`` (``auto``): an option value, "detect it from the answers";
* ``None`` from ``detect``: auto-detection found no dialect's statistics. It is not the
  ``none`` dialect (``OFF``), which is the user's "read no statistics".

Adding a server family: one module here with one ``Dialect`` subclass, its instance in
``REGISTRY`` below, and its sample answer in ``tests/core/test_dialects_registry.py``
(see ``docs/architecture.md``, "Where to add").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pytest_ddtree.core.dialects.base import (
    MAX_DEPTH,
    Dialect,
    MetricNames,
    TokenizeShape,
    histogram,
    lookup,
    register,
)
from pytest_ddtree.core.dialects.custom import Custom, resolve_pointer
from pytest_ddtree.core.dialects.ddtree import DDTree
from pytest_ddtree.core.dialects.llamacpp import LlamaCpp
from pytest_ddtree.core.dialects.off import Off
from pytest_ddtree.core.dialects.omlx import OMLX
from pytest_ddtree.core.dialects.sglang import SGLang
from pytest_ddtree.core.dialects.stats import SpecStats, conditional_acceptance, rounds_reaching
from pytest_ddtree.core.dialects.vllm import VLLM

#: the option value that detects the dialect from the answers (not a dialect)
AUTO = "auto"
#: "configured off": the ``none`` choice
OFF: Dialect = Off()

REGISTRY: Mapping[str, Dialect] = register(
    DDTree(), VLLM(), SGLang(), OMLX(), LlamaCpp(), Custom(), OFF
)
#: every dialect's name, in the registry's order
NAMES: tuple[str, ...] = tuple(REGISTRY)
#: the ``--ddtree-dialect`` choices: ``auto`` and every dialect
CHOICES: tuple[str, ...] = (AUTO, *NAMES)


def get(name: str) -> Dialect:
    """The dialect called ``name``; ``KeyError`` naming the known ones otherwise."""
    found = lookup(name)
    if found is None:
        raise KeyError(f"unknown dialect {name!r}: one of {', '.join(NAMES)}")
    return found


def dialects() -> Iterator[Dialect]:
    """Every registered dialect, in order."""
    return iter(REGISTRY.values())


def detect(objects: Sequence[Any]) -> Dialect | None:
    """The dialect whose statistics appear in ``objects`` (a response or its chunks; the
    newest first), or None when no dialect's do ("detected nothing": not ``OFF``).

    Every dialect is asked in the registry's order, those marked ``detect_last`` after
    the rest; then each is asked whether the answers are its family's without any
    statistics (SGLang's, which sends them only when asked).
    """
    order = sorted(REGISTRY.values(), key=lambda d: d.detect_last)
    for obj in reversed(objects):
        if not isinstance(obj, Mapping):
            continue
        for dialect in order:
            if dialect.claims(obj):
                return dialect
    for dialect in order:
        if dialect.claims_without_statistics(objects):
            return dialect
    return None


def resolve(name: str | None, objects: Sequence[Any]) -> Dialect | None:
    """The dialect to read ``objects`` in: ``name``'s, or the detected one for ``auto``
    (None: nothing detected, or an unknown name)."""
    if name == AUTO:
        return detect(objects)
    return lookup(name)


def asks_statistics(name: str | None) -> bool:
    """Whether a request configured with dialect ``name`` asks for statistics at all
    (every value but the ``none`` choice)."""
    found = lookup(name)
    return found is None or found.reports_statistics


def request_fields(name: str | None) -> dict[str, Any]:
    """Body fields a server of dialect ``name`` needs before it reports its statistics."""
    found = lookup(name)
    return dict(found.request_fields) if found is not None else {}


def all_request_fields() -> tuple[str, ...]:
    """Every field any dialect adds to a request to ask for its statistics."""
    return tuple(key for d in REGISTRY.values() for key in d.request_fields)


def stop_fields() -> tuple[str, ...]:
    """Every choice field some dialect names its stop in, in the registry's order."""
    return tuple(f for d in REGISTRY.values() for f in d.stop_fields)


def stop_field_owner(where: str | None) -> Dialect | None:
    """The dialect that names its stop in ``where`` (``choices[0].stop_reason``), if any."""
    if not where:
        return None
    key = where.rpartition(".")[2]
    return next((d for d in REGISTRY.values() if key in d.stop_fields), None)


def tokenize_shapes() -> tuple[TokenizeShape, ...]:
    """Every family's ``/tokenize`` request, in the registry's order."""
    return tuple(d.tokenize for d in REGISTRY.values() if d.tokenize is not None)


def metric_names() -> tuple[MetricNames, ...]:
    """Every engine's ``/metrics`` names, in the registry's order."""
    return tuple(d.metrics for d in REGISTRY.values() if d.metrics is not None)


def reference_names() -> tuple[str, ...]:
    """The dialects the reference server can emit (its ``--stats-dialect`` choices)."""
    return tuple(d.name for d in REGISTRY.values() if d.reference_emits)


def stats_map_dialect() -> Dialect:
    """The dialect that reads ``--ddtree-stats-map``."""
    return next(d for d in REGISTRY.values() if d.needs_stats_map)


__all__ = [
    "AUTO",
    "CHOICES",
    "MAX_DEPTH",
    "NAMES",
    "OFF",
    "REGISTRY",
    "Dialect",
    "MetricNames",
    "SpecStats",
    "TokenizeShape",
    "all_request_fields",
    "asks_statistics",
    "conditional_acceptance",
    "detect",
    "dialects",
    "get",
    "histogram",
    "lookup",
    "metric_names",
    "reference_names",
    "request_fields",
    "resolve",
    "resolve_pointer",
    "rounds_reaching",
    "stats_map_dialect",
    "stop_field_owner",
    "stop_fields",
    "tokenize_shapes",
]
