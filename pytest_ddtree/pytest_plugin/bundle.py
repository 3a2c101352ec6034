"""The suite shipped in the package (``pytest_ddtree/suite``): where it is, its settings, ``init``.

``pytest --pyargs pytest_ddtree.suite`` runs it from any directory. pytest then takes its
rootdir and ini file from the current directory (the user's project), so it never reads the
suite's own ``pytest.ini``. The plugin reads it instead, for a run whose every path is the
bundled suite, and applies it as pytest would have, under the user's configuration: its
``addopts`` before the user's (``suite_addopts``) and its ``ddtree_*`` keys between the
user's ini file and the environment (``suite_ini``). The suite's settings thus live in one
file, used by ``pytest example_suite`` in a clone (where that file is the ini file), by
``--pyargs`` and by a copy made with ``ddtree-suite init``.
"""

from __future__ import annotations

import argparse
import configparser
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

SUITE_MODULE = "pytest_ddtree.suite"
SUITE_DIR = Path(__file__).resolve().parents[1] / "suite"
SUITE_INI = SUITE_DIR / "pytest.ini"


def targets_suite(args: Sequence[str], pyargs: bool, invocation_dir: Path) -> bool:
    """Whether every test path of the run is in the bundled suite (and there is one)."""
    if not args:
        return False
    return all(_in_suite(arg.split("::", 1)[0], pyargs, invocation_dir) for arg in args)


def _in_suite(arg: str, pyargs: bool, invocation_dir: Path) -> bool:
    if pyargs and (arg == SUITE_MODULE or arg.startswith(SUITE_MODULE + ".")):
        return True
    try:
        path = (invocation_dir / arg).resolve()
    except (OSError, RuntimeError):
        return False
    return path == SUITE_DIR or SUITE_DIR in path.parents


def _read_ini() -> configparser.SectionProxy | None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(SUITE_INI, encoding="utf-8")
    except (OSError, configparser.Error):
        return None
    return parser["pytest"] if parser.has_section("pytest") else None


def suite_ini() -> dict[str, str]:
    """The ``ddtree_*`` keys of the suite's ``pytest.ini``."""
    section = _read_ini()
    if section is None:
        return {}
    return {k: v.strip() for k, v in section.items() if k.startswith("ddtree_")}


def suite_addopts() -> list[str]:
    """The ``addopts`` of the suite's ``pytest.ini``, split as pytest splits them."""
    section = _read_ini()
    return shlex.split(section.get("addopts", "")) if section is not None else []


class InitError(Exception):
    """``ddtree-suite init`` cannot write the suite; the message is one line."""


def suite_files() -> list[Path]:
    """The suite's files, relative to its directory (no bytecode)."""
    return [
        path.relative_to(SUITE_DIR)
        for path in sorted(SUITE_DIR.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    ]


def init(dest: Path, *, force: bool = False) -> list[Path]:
    """Copy the suite into ``dest``; an existing file is overwritten only with ``force``."""
    if dest.exists() and not dest.is_dir():
        raise InitError(f"{dest} exists and is not a directory")
    files = suite_files()
    if not force:
        clash = next((dest / f for f in files if (dest / f).exists()), None)
        if clash is not None:
            raise InitError(f"{clash} already exists; pass --force to overwrite the suite's files")
    written = []
    try:
        for rel in files:
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(SUITE_DIR / rel, target)
            written.append(target)
    except OSError as exc:
        raise InitError(f"cannot write {exc.filename or dest}: {exc.strerror or exc}") from None
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``ddtree-suite init DIR [--force]``: copy the bundled suite into your repository."""
    parser = argparse.ArgumentParser(
        prog="ddtree-suite",
        description="The example suite of pytest-ddtree. Run it in place with "
        "'pytest --pyargs pytest_ddtree.suite'; copy it to adapt with 'ddtree-suite init DIR'.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="init")
    init_cmd = commands.add_parser(
        "init", help="copy the suite into DIR (e.g. tests/ddtree) to adapt it"
    )
    init_cmd.add_argument("dir", metavar="DIR", type=Path)
    init_cmd.add_argument("--force", action="store_true", help="overwrite the suite's files")
    ns = parser.parse_args(argv)
    try:
        written = init(ns.dir, force=ns.force)
    except InitError as exc:
        print(f"ddtree-suite: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(written)} files to {ns.dir}")
    print(f"run it:      pytest {ns.dir} [--ddtree-endpoint=URL]")
    print(f"your prompts: edit {ns.dir / 'prompts.json'}; its settings: {ns.dir / 'pytest.ini'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
