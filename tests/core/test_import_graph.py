"""No import cycle inside the package, lazy imports included.

A cycle hidden in a function-level import (``session`` importing ``integrations`` at the end of
the run while ``integrations`` imports ``session`` at the top) works until the day the order of
first imports changes. The graph below is read from the source: every ``import`` of a
``pytest_ddtree`` module, at module level or inside a function, except those under
``if TYPE_CHECKING:`` (never executed).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_ddtree"


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """The ``pytest_ddtree`` modules one module imports when it runs."""

    def __init__(self, module: str, is_package: bool, known: set[str]) -> None:
        self.module, self.is_package, self.known = module, is_package, known
        self.found: set[str] = set()

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.update(a.name for a in node.names if a.name in self.known)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.module.split(".")
            base = base if self.is_package else base[:-1]
            base = base[: len(base) - (node.level - 1)]
            source = ".".join([*base, node.module] if node.module else base)
        else:
            source = node.module or ""
        for alias in node.names:
            child = f"{source}.{alias.name}"
            if child in self.known:
                self.found.add(child)
            elif source in self.known:
                self.found.add(source)


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (itself left out)."""
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        visitor = _Imports(name, path.name == "__init__.py", known)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        graph[name] = visitor.found - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = walk(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = walk(start)
            if found:
                return found
    return None


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert "pytest_ddtree.session" in graph and "pytest_ddtree.integrations" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_session_does_not_import_its_integrations() -> None:
    graph = import_graph()
    assert "pytest_ddtree.session" in graph["pytest_ddtree.integrations"]
    assert "pytest_ddtree.integrations" not in graph["pytest_ddtree.session"]


def test_the_cycle_finder_finds_a_lazy_cycle() -> None:
    # the shape of the cycle this file guards against: one side imports inside a function
    source = {
        "pytest_ddtree.a": "from pytest_ddtree.b import B\n",
        "pytest_ddtree.b": "def finish():\n    from pytest_ddtree.a import A\n",
        "pytest_ddtree.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from pytest_ddtree.a import A\n",
    }
    graph = {}
    for name, text in source.items():
        visitor = _Imports(name, False, set(source))
        visitor.visit(ast.parse(text))
        graph[name] = visitor.found - {name}
    assert graph["pytest_ddtree.c"] == set()  # TYPE_CHECKING imports never run
    assert find_cycle(graph) == ["pytest_ddtree.a", "pytest_ddtree.b", "pytest_ddtree.a"]


@pytest.mark.parametrize(
    "first", ["pytest_ddtree.integrations", "pytest_ddtree.session", "pytest_ddtree.diagnose"]
)
def test_each_module_imports_fresh_first(first: str) -> None:
    code = f"import {first}; from pytest_ddtree.session import WorkerPayload; WorkerPayload()"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
