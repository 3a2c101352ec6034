"""The shipped artifacts are exactly what the build script produces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tokenizers

from pytest_ddtree.reference import _build, tokenizer_path
from pytest_ddtree.reference._corpus import generate_corpus

DATA = tokenizer_path().parent / "data"


def test_corpus_is_deterministic_and_generated() -> None:
    a, b = generate_corpus(7, 8), generate_corpus(7, 8)
    assert [d.text for d in a] == [d.text for d in b]
    assert {d.kind for d in a} >= {"essay", "short", "list", "code", "arithmetic", "facts"}
    assert [d.text for d in generate_corpus(8, 8)] != [d.text for d in a]


def test_artifacts_are_small() -> None:
    total = tokenizer_path().stat().st_size + sum(p.stat().st_size for p in DATA.iterdir())
    assert total < 2_000_000


def test_rebuild_reproduces_the_shipped_artifacts(tmp_path: Path) -> None:
    info = json.loads((DATA / "build.json").read_text())
    if info["tokenizers_version"] != tokenizers.__version__:
        pytest.skip(
            f"artifacts were built with tokenizers {info['tokenizers_version']}, "
            f"this is {tokenizers.__version__}"
        )
    _build.build(tmp_path, info["corpus_seed"])
    assert (tmp_path / "tokenizer.json").read_bytes() == tokenizer_path().read_bytes()
    assert (tmp_path / "data" / "ngram.bin").read_bytes() == (DATA / "ngram.bin").read_bytes()
