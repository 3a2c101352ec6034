"""The benchmarks the docs and the issues quote still run: every name a script imports from
the package exists (a rename that left a script behind is caught here, not when someone
runs it to check a figure)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[2] / "benchmarks").glob("*.py"))


def test_there_are_benchmarks() -> None:
    assert len(BENCHMARKS) >= 10


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_every_name_a_benchmark_imports_from_the_package_exists(script: Path) -> None:
    missing = []
    for node in ast.walk(ast.parse(script.read_text(), str(script))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pytest_ddtree"):
            module = importlib.import_module(node.module or "")
            missing += [
                f"{node.module}.{alias.name}"
                for alias in node.names
                if not hasattr(module, alias.name)
                and importlib.util.find_spec(f"{node.module}.{alias.name}") is None
            ]
    assert not missing, f"{script.name} imports what the package no longer has: {missing}"
