"""docs/architecture.md's glossary ("Words with one meaning") names what the code names: every
class, attribute and function it cites exists, and the former names it retired do not.

Read from the source (no import): a class's names are its fields, methods and properties and
those of the classes it derives from, by name, within the package.
"""

from __future__ import annotations

import ast
import builtins
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_ddtree"
GLOSSARY = "## Words with one meaning"
#: a cited code name: ``Class``, ``Class.attr``, ``Class.method()`` or ``layer.module.name``
CITED = re.compile(
    r"`((?:core|wire|checks|measure|report|reference|engines|pytest_plugin)(?:\.\w+)+"
    r"|[A-Z]\w*(?:\.\w+)?)(?:\(\))?`"
)
#: names retired for good (0.1.0 keeps no alias): module, name
RETIRED = [
    ("reference/model.py", "Round"),
    ("wire/protocol/__init__.py", "Prompt"),
    ("measure/load/runner.py", "Prompt"),
    ("measure/load/runner.py", "Endpoint"),
    ("checks/blame.py", "Verdict"),
    *(
        ("wire/dialects.py", name)
        for name in (
            "DIALECT_NAMES",
            "LLAMACPP_TIMING_FIELDS",
            "MAX_DEPTH",
            "OMLX_PREFIX",
            "SGLANG_DETAILS_FIELD",
            "VLLM_WHERE",
            "histogram",
            "llamacpp_bad_fields",
            "resolve_pointer",
        )
    ),
]


def _assigned(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    return []


@cache
def _module_names(path: Path) -> frozenset[str]:
    """The names a module defines or imports at its top level."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return frozenset(name for node in tree.body for name in _assigned(node))


@cache
def _classes() -> dict[str, tuple[frozenset[str], tuple[str, ...]]]:
    """Every class of the package: its own names and its bases' names."""
    out: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                own = frozenset(n for item in node.body for n in _assigned(item))
                own |= {  # what its methods set on ``self``
                    t.attr
                    for item in ast.walk(node)
                    if isinstance(item, (ast.Assign, ast.AnnAssign))
                    for t in (item.targets if isinstance(item, ast.Assign) else [item.target])
                    if isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                }
                bases = tuple(b.id for b in node.bases if isinstance(b, ast.Name))
                old = out.get(node.name, (frozenset(), ()))
                out[node.name] = (old[0] | own, old[1] + bases)
    return out


def _attributes(cls: str) -> frozenset[str]:
    own, bases = _classes()[cls]
    return own.union(*(_attributes(b) for b in bases if b in _classes()))


def _defined(name: str) -> bool:
    if name in dir(builtins):  # ``None``: Python's, not the package's
        return True
    parts = name.split(".")
    if parts[0][0].islower():  # a module path: wire.tokens.TokenCounter
        *module, leaf = parts
        base = PACKAGE.joinpath(*module)
        path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        return path.exists() and leaf in _module_names(path)
    if parts[0] not in _classes():
        return any(parts[0] in _module_names(p) for p in PACKAGE.rglob("*.py"))
    return len(parts) == 1 or parts[1] in _attributes(parts[0])


def _glossary() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = text.index(GLOSSARY)
    end = text.find("\n## ", start + len(GLOSSARY))
    return text[start:end]


def test_the_glossary_cites_code_names() -> None:
    cited = CITED.findall(_glossary())
    assert len(cited) >= 10, cited  # the pattern still finds the glossary's names


@pytest.mark.parametrize("name", sorted(set(CITED.findall(_glossary()))))
def test_each_name_the_glossary_cites_is_the_codes(name: str) -> None:
    assert _defined(name), f"docs/architecture.md's glossary cites {name}, which the code lacks"


@pytest.mark.parametrize(("module", "name"), RETIRED, ids=[f"{m}:{n}" for m, n in RETIRED])
def test_a_retired_name_is_gone(module: str, name: str) -> None:
    assert name not in _module_names(PACKAGE / module), f"{module} still defines {name}"
