"""The contract every registered dialect keeps: adding a server family is one class in
``pytest_ddtree/core/dialects/`` and its sample answer here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from pytest_ddtree.core import dialects as registry
from pytest_ddtree.core.dialects import Dialect, SpecStats
from pytest_ddtree.core.options import resolve
from pytest_ddtree.core.settings import DIALECTS
from pytest_ddtree.reference.server import STATS_DIALECTS
from pytest_ddtree.wire import dialects as wire
from tests.core.test_dialects import (
    DDTREE_RESPONSE,
    LLAMACPP_CHUNK,
    OMLX_RESPONSE,
    SGLANG_RESPONSE,
    VLLM_RESPONSE,
)

#: the stats map the ``custom`` sample is read with
STATS_MAP = {"decode_rounds": "/engine/spec/rounds", "tree_budget": "/engine/spec/budget"}
#: one answer in each dialect, in the shapes the engines send (see test_dialects.py); a
#: dialect that reads no statistics has None
SAMPLES: dict[str, Mapping[str, Any] | None] = {
    "ddtree": DDTREE_RESPONSE,
    "vllm": VLLM_RESPONSE,
    "sglang": SGLANG_RESPONSE,
    "omlx": OMLX_RESPONSE,
    "llamacpp": LLAMACPP_CHUNK,
    "custom": {"choices": [], "engine": {"spec": {"rounds": 12, "budget": 32}}},
    "none": None,
}
ALL = list(registry.dialects())


def _ids(d: Dialect) -> str:
    return d.name


def test_every_dialect_has_a_sample() -> None:
    assert set(SAMPLES) == set(registry.NAMES)


@pytest.mark.parametrize("dialect", ALL, ids=_ids)
def test_its_name_is_an_option_choice(dialect: Dialect) -> None:
    assert dialect.name in DIALECTS
    mapped = ",".join(f"{k}={v}" for k, v in STATS_MAP.items())
    extra = {"ddtree_stats_map": mapped} if dialect.needs_stats_map else {}
    settings = resolve({"ddtree_dialect": dialect.name, **extra}, {}, {})
    assert settings.dialect == dialect.name
    assert registry.get(dialect.name) is dialect
    assert registry.AUTO not in registry.NAMES


@pytest.mark.parametrize("dialect", ALL, ids=_ids)
def test_it_parses_its_own_sample(dialect: Dialect) -> None:
    sample = SAMPLES[dialect.name]
    if sample is None:
        assert not dialect.reports_statistics
        assert dialect.parse([DDTREE_RESPONSE], STATS_MAP) is None
        return
    stats = dialect.parse([sample], STATS_MAP)
    assert isinstance(stats, SpecStats)
    assert stats.dialect == dialect.name and stats.speculative
    # the wire's entry point reads it the same way, in a stream too (newest chunk wins)
    assert wire.extract_stats(dialect.name, [sample], STATS_MAP) == stats
    assert dialect.parse([{"choices": []}, sample], STATS_MAP) == stats
    assert dialect.malformed(stats.raw) == []


@pytest.mark.parametrize("dialect", ALL, ids=_ids)
def test_detection_claims_its_sample_and_no_other(dialect: Dialect) -> None:
    sample = SAMPLES[dialect.name]
    if sample is not None and dialect.claims(sample):
        assert registry.detect([sample]) is dialect
        assert wire.extract_stats("auto", [sample]) == dialect.parse([sample])
    for name, other in SAMPLES.items():
        if name != dialect.name and other is not None:
            assert not dialect.claims(other), f"{dialect.name} claims the {name} sample"


def test_detecting_nothing_is_not_the_none_choice() -> None:
    assert registry.detect([{"choices": []}, "garbage", None]) is None
    assert registry.resolve("auto", [{"choices": []}]) is None
    assert registry.resolve("none", [DDTREE_RESPONSE]) is registry.OFF
    assert not registry.asks_statistics("none")
    assert registry.asks_statistics("auto")


def test_declared_names_do_not_collide() -> None:
    shapes = [d.tokenize.name for d in ALL if d.tokenize is not None]
    prefixes = [d.metrics.prefix for d in ALL if d.metrics is not None]
    stops = [f for d in ALL for f in d.stop_fields]
    for names in (shapes, prefixes, stops):
        assert len(names) == len(set(names))
    assert tuple(stops) == wire.STOP_FIELDS
    for d in ALL:
        assert d.summary, d.name
        assert d.unstated is None or d.unstated.strip()


def test_the_reference_server_emits_a_declared_subset() -> None:
    assert registry.reference_names() == STATS_DIALECTS
    assert set(STATS_DIALECTS) <= set(registry.NAMES)
