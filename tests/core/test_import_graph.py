"""No import cycle inside the package, lazy imports included; no import against the layers.

A cycle hidden in a function-level import (``session`` importing ``integrations`` at the end of
the run while ``integrations`` imports ``session`` at the top) works until the day the order of
first imports changes. The graph below is read from the source: every ``import`` of a
``pytest_ddtree`` module, at module level or inside a function, except those under
``if TYPE_CHECKING:`` (never executed).

The layers are read from the same graph, type-only imports included (a type is a dependency
too): the pytest layer (the root, ``plugin``, ``pytest_plugin/``) -> ``report/`` -> ``measure/``
-> ``checks/`` -> ``wire/`` -> ``core/``; a module imports its own layer or one below. The
servers (``reference/``, ``engines/``) import nothing but themselves and ``core/``, and only the
pytest layer starts them. Only the pytest layer (and the bundled suite, which is a user's tests)
imports pytest.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_ddtree"


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """The ``pytest_ddtree`` modules one module imports when it runs."""

    def __init__(self, module: str, is_package: bool, known: set[str], types: bool = False) -> None:
        self.module, self.is_package, self.known = module, is_package, known
        self.types = types  # also the imports under ``if TYPE_CHECKING:``
        self.found: set[str] = set()
        self.outside: set[str] = set()  # top-level names of the other packages imported

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test) and not self.types:
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.update(a.name for a in node.names if a.name in self.known)
        self.outside.update(a.name.split(".")[0] for a in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.module.split(".")
            base = base if self.is_package else base[:-1]
            base = base[: len(base) - (node.level - 1)]
            source = ".".join([*base, node.module] if node.module else base)
        else:
            source = node.module or ""
            self.outside.add(source.split(".")[0])
        for alias in node.names:
            child = f"{source}.{alias.name}"
            if child in self.known:
                self.found.add(child)
            elif source in self.known:
                self.found.add(source)


def _visitors(types: bool, package: Path = PACKAGE) -> dict[str, _Imports]:
    modules = _modules(package)
    known = set(modules)
    out: dict[str, _Imports] = {}
    for name, path in modules.items():
        visitor = _Imports(name, path.name == "__init__.py", known, types)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        out[name] = visitor
    return out


def import_graph(types: bool = False, package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package modules it imports (itself left out); ``types``: type-only too."""
    return {name: v.found - {name} for name, v in _visitors(types, package).items()}


#: The layers, top first; a module may import its own layer or one below.
LAYERS = ("pytest", "report", "measure", "checks", "wire", "core")
#: The servers the tests talk to: they import only themselves and ``core``.
SERVERS = ("reference", "engines")


def layer_of(module: str) -> str:
    """``pytest``, a folder of ``LAYERS`` or ``SERVERS``, or ``suite`` (a user's tests)."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ("plugin", "pytest_plugin"):
        return "pytest"
    if parts[1] in (*LAYERS, *SERVERS, "suite"):
        return parts[1]
    return "root"  # a module at the root outside the pytest layer: nowhere


def against_the_layers(graph: dict[str, set[str]]) -> list[str]:
    """Every import against the layer order, as ``a -> b (layer -> layer)``."""
    bad: list[str] = []
    for module, imports in sorted(graph.items()):
        here = layer_of(module)
        for imported in sorted(imports):
            there = layer_of(imported)
            if here == "suite" or here == there:
                continue
            if here in SERVERS:
                ok = there == "core"
            elif there in SERVERS:
                ok = here == "pytest"
            else:
                ok = here in LAYERS and there in LAYERS
                ok = ok and LAYERS.index(here) <= LAYERS.index(there)
            if not ok:
                bad.append(f"{module} -> {imported} ({here} -> {there})")
    return bad


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
    assert (
        "pytest_ddtree.pytest_plugin.session" in graph
        and "pytest_ddtree.pytest_plugin.integrations" in graph
    )
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_session_does_not_import_its_integrations() -> None:
    graph = import_graph()
    assert (
        "pytest_ddtree.pytest_plugin.session" in graph["pytest_ddtree.pytest_plugin.integrations"]
    )
    assert (
        "pytest_ddtree.pytest_plugin.integrations"
        not in graph["pytest_ddtree.pytest_plugin.session"]
    )


def test_every_module_belongs_to_a_layer() -> None:
    graph = import_graph()
    assert {layer_of(m) for m in graph} == {*LAYERS, *SERVERS, "suite"}
    assert sorted(m for m in graph if m.count(".") == 1 and layer_of(m) == "pytest") == [
        "pytest_ddtree.plugin",
        "pytest_ddtree.pytest_plugin",
    ]


@pytest.mark.parametrize("types", [False, True], ids=["run", "types"])
def test_no_import_goes_against_the_layers(types: bool) -> None:
    bad = against_the_layers(import_graph(types))
    assert bad == [], "imports against the layer order:\n" + "\n".join(bad)


def test_the_layer_check_finds_an_import_upward() -> None:
    graph = {
        "pytest_ddtree.wire.client": {"pytest_ddtree.core.settings"},
        "pytest_ddtree.core.settings": {"pytest_ddtree.measure.load.slo"},
        "pytest_ddtree.checks.diagnose": {"pytest_ddtree.reference.server"},
        "pytest_ddtree.reference.server": {"pytest_ddtree.wire.client"},
        "pytest_ddtree.pytest_plugin.runtime": {"pytest_ddtree.reference", "pytest_ddtree.wire"},
        "pytest_ddtree.suite.conftest": {"pytest_ddtree.pytest_plugin.session"},
    }
    assert against_the_layers(graph) == [
        "pytest_ddtree.checks.diagnose -> pytest_ddtree.reference.server (checks -> reference)",
        "pytest_ddtree.core.settings -> pytest_ddtree.measure.load.slo (core -> measure)",
        "pytest_ddtree.reference.server -> pytest_ddtree.wire.client (reference -> wire)",
    ]


def test_only_the_pytest_layer_imports_pytest() -> None:
    importers = sorted(
        name
        for name, v in _visitors(types=True).items()
        if v.outside & {"pytest", "_pytest"} and layer_of(name) not in ("pytest", "suite")
    )
    assert importers == []
    # the check sees an import of pytest at all: the pytest layer does import it
    assert "pytest" in _visitors(types=False)["pytest_ddtree.plugin"].outside


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
    "first",
    [
        "pytest_ddtree.pytest_plugin.integrations",
        "pytest_ddtree.pytest_plugin.session",
        "pytest_ddtree.checks.diagnose",
    ],
)
def test_each_module_imports_fresh_first(first: str) -> None:
    session = "pytest_ddtree.pytest_plugin.session"
    code = f"import {first}; from {session} import WorkerPayload; WorkerPayload()"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
