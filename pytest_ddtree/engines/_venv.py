"""Where the engines' own interpreters and the launcher's cache are.

vLLM and SGLang each run from a virtualenv of their own (``python -m pytest_ddtree.engines
install vllm|sglang`` makes one). The interpreter is, in this order: the ``python``
argument, the environment variable (``DDTREE_VLLM_PYTHON``, ``DDTREE_SGLANG_PYTHON``), the
virtualenv the installer makes by default under the cache directory
(``DDTREE_ENGINE_CACHE``, by default ``~/.cache/pytest-ddtree/engines``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

CACHE_ENV = "DDTREE_ENGINE_CACHE"
PYTHON_ENV = {"vllm": "DDTREE_VLLM_PYTHON", "sglang": "DDTREE_SGLANG_PYTHON"}
# the module each engine's server is started from, which must import in its interpreter
SERVER_MODULE = {"vllm": "vllm.entrypoints.openai.api_server", "sglang": "sglang.launch_server"}
TOP_PACKAGE = {"vllm": "vllm", "sglang": "sglang"}


def cache_dir() -> Path:
    """The launcher's cache: the converted model, the stub library, default virtualenvs."""
    value = os.environ.get(CACHE_ENV)
    if value:
        return Path(value).expanduser()
    return Path.home() / ".cache" / "pytest-ddtree" / "engines"


def default_venv(engine: str) -> Path:
    """The virtualenv ``install`` makes when no ``--venv`` is given."""
    return cache_dir() / "venvs" / engine


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def engine_python(engine: str, python: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """The interpreter for ``engine`` and where it came from (for one-line errors)."""
    if python is not None:
        return Path(python), "python argument"
    env = PYTHON_ENV[engine]
    value = os.environ.get(env)
    if value:
        return Path(value).expanduser(), env
    return _venv_python(default_venv(engine)), f"the default virtualenv ({env} not set)"


def python_missing(engine: str, python: str | os.PathLike[str] | None = None) -> str | None:
    """One line naming why ``engine`` cannot start from its interpreter, or None."""
    path, source = engine_python(engine, python)
    hint = f"python -m pytest_ddtree.engines install {engine}"
    if not path.exists():
        if source.startswith("the default"):
            return (
                f"{engine} is not installed: set {PYTHON_ENV[engine]} to its virtualenv's "
                f"python, or run `{hint}`"
            )
        return f"{engine}: {source}={str(path)!r} does not exist (`{hint} --venv DIR` makes one)"
    probe = (
        "import importlib.util, sys; "
        f"sys.exit(0 if importlib.util.find_spec({TOP_PACKAGE[engine]!r}) else 3)"
    )
    try:
        result = subprocess.run(
            [str(path), "-c", probe], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{engine}: {source}={str(path)!r} does not run: {exc}"
    if result.returncode == 3:
        return f"{engine}: {source}={str(path)!r} has no {TOP_PACKAGE[engine]} package (`{hint}`)"
    if result.returncode != 0:
        err = (result.stderr.decode("utf-8", "replace").strip().splitlines() or ["?"])[-1]
        return f"{engine}: {source}={str(path)!r} does not run: {err}"
    return None
