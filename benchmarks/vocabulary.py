"""How many times the package writes one concept: dialect names compared outside the dialect
registry, and the ``to_json``/``from_json`` methods, and how many of them still write their
keys by hand rather than through the one converter (``core/jsonmodel.py``).

    python benchmarks/vocabulary.py [PACKAGE_DIR]

``PACKAGE_DIR`` defaults to this checkout's ``pytest_ddtree``; give an older checkout's to
compare. A dialect comparison is an ``==``, ``!=``, ``in`` or ``not in`` with a dialect's name
as a string literal on one side (``auto`` and ``none`` count only where the compared text
mentions a dialect); the registry (``core/dialects/``) and the engine launchers
(``engines/``, whose names are servers, not dialects) are left out. The largest module and
function per folder: ``python benchmarks/layout.py``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
NAMES = {"ddtree", "vllm", "sglang", "omlx", "llamacpp", "custom"}
LEFT_OUT = ("core/dialects/", "engines/")


def _is_dialect(node: ast.expr, text: str) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value in NAMES or (node.value in ("auto", "none") and "dialect" in text)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_dialect(e, text) for e in node.elts)
    return False


def _delegates(fn: ast.FunctionDef) -> bool:
    """Hands the record to a converter: no dict literal of three keys or more and no
    ``cls(...)`` call naming the fields (``return {"a": ..., "b": ..., ...}``,
    ``return cls(a=doc["a"], ...)``), the marks of a method that writes each key by hand."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Dict) and len(node.keys) >= 3:
            return False
        if isinstance(node, ast.Call) and len(node.keywords) >= 3:
            return False
    return True


def main(package: Path) -> None:
    compared: dict[str, int] = {}
    written = delegated = 0
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        src = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.FunctionDef) and node.name in ("to_json", "from_json"):
                if _delegates(node):
                    delegated += 1
                else:
                    written += 1
            if isinstance(node, ast.Compare) and not rel.startswith(LEFT_OUT):
                text = ast.get_source_segment(src, node) or ""
                if any(_is_dialect(n, text) for n in [node.left, *node.comparators]):
                    compared[rel] = compared.get(rel, 0) + 1
    print(f"dialect-name comparisons outside the registry: {sum(compared.values())}")
    for rel, n in sorted(compared.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:3d}  {rel}")
    print(
        f"to_json/from_json methods: {written + delegated} ({written} write their keys by hand, "
        f"{delegated} do not)"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "pytest_ddtree")
