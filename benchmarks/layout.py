"""The package's layout in figures: modules at the root, lines, the largest module and function
per folder, long functions, and the imports against the layer order.

    python benchmarks/layout.py [PACKAGE_DIR] [--moved]

``PACKAGE_DIR`` defaults to this checkout's ``pytest_ddtree``. ``--moved`` reads a tree from
before the layer folders: each old module is placed in the layer its new folder has (``MOVED``)
before the imports are judged, so the two tables count the same arrows. The bundled suite
(``suite/``, a user's tests) is left out. The import graph and the layer rules are the ones
``tests/core/test_import_graph.py`` enforces.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]

#: Where the modules of the flat layout went (old name below the package -> new name).
MOVED = {
    "settings": "core.settings",
    "violation": "core.violation",
    "prompts": "core.prompts",
    "load.slo": "core.slo",
    "invariants._codes": "core.codes",
    "invariants._expectation": "core.expectation",
    "servermetrics": "wire.servermetrics",
    "invariants": "checks.invariants",
    "comparable": "checks.comparable",
    "diagnose": "checks.diagnose",
    "distribution": "checks.distribution",
    "sampling": "checks.sampling",
    "margin": "checks.margin",
    "bench": "measure.bench",
    "machine": "measure.machine",
    "sweep": "measure.sweep",
    "load.html": "report.load_html",
    "load": "measure.load",
    "session": "pytest_plugin.session",
    "collection": "pytest_plugin.collection",
    "integrations": "pytest_plugin.integrations",
    "runtime": "pytest_plugin.runtime",
    "summary": "pytest_plugin.summary",
    "_guard": "pytest_plugin._guard",
    "analysis": "pytest_plugin.analysis",
    "bundle": "pytest_plugin.bundle",
    "fixtures": "pytest_plugin.fixtures",
}


def _graph_module() -> Any:
    path = HERE / "tests" / "core" / "test_import_graph.py"
    spec = importlib.util.spec_from_file_location("_import_graph", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def moved(module: str) -> str:
    """A module's name in the layer folders."""
    head, _, rest = module.partition(".")
    for old in sorted(MOVED, key=len, reverse=True):
        if rest == old or rest.startswith(old + "."):
            return f"{head}.{MOVED[old]}{rest[len(old) :]}"
    return module


def _functions(tree: ast.AST) -> list[tuple[int, str]]:
    """(lines, qualified name) of every function and method."""
    out: list[tuple[int, str]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                out.append(((child.end_lineno or child.lineno) - child.lineno + 1, name))
                walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")

    walk(tree, "")
    return out


@dataclass
class Folder:
    modules: int = 0
    lines: int = 0
    largest_module: tuple[int, str] = (0, "")
    largest_function: tuple[int, str] = (0, "")


@dataclass
class Figures:
    folders: dict[str, Folder] = field(default_factory=dict)
    at_root: list[str] = field(default_factory=list)
    long60: int = 0
    long100: int = 0
    arrows: dict[bool, list[str]] = field(default_factory=dict)


def figures(package: Path, rename: bool) -> Figures:
    out = Figures()
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if rel.parts[0] == "suite":
            continue
        name = "(root)" if len(rel.parts) == 1 else rel.parts[0]
        if len(rel.parts) == 1:
            out.at_root.append(rel.stem)
        text = path.read_text(encoding="utf-8")
        folder = out.folders.setdefault(name, Folder())
        folder.modules += 1
        folder.lines += len(text.splitlines())
        folder.largest_module = max(folder.largest_module, (len(text.splitlines()), rel.name))
        for size, function in _functions(ast.parse(text)):
            out.long60 += size >= 60
            out.long100 += size >= 100
            where = f"{rel.as_posix()}:{function}"
            folder.largest_function = max(folder.largest_function, (size, where))
    graphs = _graph_module()
    for types in (False, True):
        graph = graphs.import_graph(types, package)
        if rename:
            graph = {moved(m): {moved(i) for i in imports} for m, imports in graph.items()}
        out.arrows[types] = graphs.against_the_layers(graph)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("package", nargs="?", type=Path, default=HERE / "pytest_ddtree")
    parser.add_argument("--moved", action="store_true", help="a tree of the flat layout")
    args = parser.parse_args(argv)
    out = figures(args.package.resolve(), args.moved)
    print(f"modules at the package root: {len(out.at_root)} ({', '.join(out.at_root)})")
    print("| folder | modules | lines | largest module | largest function |")
    print("|---|---:|---:|---|---|")
    for name, f in sorted(out.folders.items()):
        module, function = f.largest_module, f.largest_function
        print(
            f"| {name} | {f.modules} | {f.lines} | {module[1]} {module[0]} "
            f"| {function[1]} {function[0]} |"
        )
    print(f"functions of 60 lines or more: {out.long60}; of 100 or more: {out.long100}")
    for types, label in ((False, "run-time imports"), (True, "type-only imports included")):
        print(f"imports against the layer order ({label}): {len(out.arrows[types])}")
        for arrow in out.arrows[types]:
            print(f"  {arrow}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
