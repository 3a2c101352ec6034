"""``python -m pytest_ddtree.engines``: serve one engine until Ctrl-C or SIGTERM, or install one.

    python -m pytest_ddtree.engines --speculation ngram --port 8080        # llama.cpp
    python -m pytest_ddtree.engines --engine vllm --speculation ngram --port 8000
    python -m pytest_ddtree.engines --engine sglang --port 30000
    python -m pytest_ddtree.engines install vllm --venv ~/venvs/vllm

The URL is printed once the server answers ``/v1/models``.
"""

from __future__ import annotations

import argparse
import sys

from pytest_ddtree.engines import _process, _venv, llamacpp

ENGINE_NAMES = ("llamacpp", "vllm", "sglang")
DEFAULT_PORT = {"vllm": 8000, "sglang": 30000}


def _engine_of(argv: list[str]) -> str:
    pre = argparse.ArgumentParser(prog="python -m pytest_ddtree.engines", add_help=False)
    pre.add_argument("--engine", choices=ENGINE_NAMES, default="llamacpp")
    known, _ = pre.parse_known_args(argv)
    return str(known.engine)


def _parser(engine: str) -> argparse.ArgumentParser:
    name = {"vllm": "vLLM", "sglang": "SGLang"}[engine]
    parser = argparse.ArgumentParser(
        prog="python -m pytest_ddtree.engines",
        description=(
            f"Serve {name}'s own OpenAI-compatible server on 127.0.0.1 until stopped, "
            f"from its virtualenv ({_venv.PYTHON_ENV[engine]}, or "
            f"`python -m pytest_ddtree.engines install {engine}`)."
        ),
    )
    parser.add_argument("--engine", choices=ENGINE_NAMES, required=True)
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT[engine], help="0 picks a free port"
    )
    parser.add_argument("--python", help=f"the interpreter (default: {_venv.PYTHON_ENV[engine]})")
    parser.add_argument(
        "--model-dir", help="a Hugging Face checkpoint (default: SmolLM2 converted from GGUF)"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for it")
    if engine == "vllm":
        parser.add_argument("--speculation", choices=("none", "ngram"), default="none")
        parser.add_argument(
            "--spec-metrics",
            choices=("detailed", "summary", "none"),
            default="detailed",
            help="per-request speculative statistics (with --speculation ngram)",
        )
        parser.add_argument(
            "--compiled", action="store_true", help="compiled mode (default: --enforce-eager)"
        )
        parser.add_argument(
            "--tool-call-parser",
            metavar="PARSER",
            help="serve tool calls: passes --enable-auto-tool-choice --tool-call-parser PARSER "
            "(hermes for SmolLM2; without them vLLM answers a named or required tool_choice "
            "with HTTP 400)",
        )
    else:
        parser.add_argument(
            "--speculation",
            choices=("none",),
            default="none",
            help="none: SGLang's n-gram speculation needs CPU kernels PyPI does not ship",
        )
    return parser


class _Stop(Exception):
    """SIGTERM while the engine starts."""


def serve(argv: list[str], engine: str) -> int:
    """Start vLLM or SGLang, print its URL, wait for Ctrl-C or SIGTERM, stop it."""
    from pytest_ddtree.engines.sglang_server import start_sglang
    from pytest_ddtree.engines.vllm_server import start_vllm, tool_args

    parser = _parser(engine)
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.exit(2, f"error: --timeout must be above 0, got {args.timeout:g}\n")
    if not 0 <= args.port <= 65535:
        parser.exit(2, f"error: --port must be 0-65535, got {args.port}\n")
    starting = True

    def while_starting() -> None:
        if starting:
            raise _Stop

    stop = _process.StopSignals(while_starting).install()
    server: _process.EngineProcess | None = None
    try:
        if engine == "vllm":
            server = start_vllm(
                speculation=args.speculation,
                spec_metrics=None if args.spec_metrics == "none" else args.spec_metrics,
                compiled=args.compiled,
                port=args.port,
                python=args.python,
                model_dir=args.model_dir,
                timeout=args.timeout,
                extra_args=tool_args(args.tool_call_parser),
            )
            what = f"vLLM ({args.speculation}, {'compiled' if args.compiled else 'eager'})"
        else:
            server = start_sglang(
                port=args.port, python=args.python, model_dir=args.model_dir, timeout=args.timeout
            )
            what = "SGLang (none)"
        starting = False
        print(
            f"{what} serving {server.base_url} model {server.model}; "
            f"log {server.log_path}; Ctrl-C stops it",
            flush=True,
        )
        if not stop.wait(server.running):
            print(f"error: {what} exited: {_process.log_tail(server.log_path)}", file=sys.stderr)
            return 1
    except (RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except _Stop:
        pass
    finally:
        starting = False
        if server is not None:
            server.stop()
    print("stopped", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Dispatch: ``install ENGINE``, or serve ``--engine`` (llama.cpp by default)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "install":
        from pytest_ddtree.engines import install

        return install.main(args[1:])
    engine = _engine_of(args)
    if engine == "llamacpp":
        return llamacpp.main(args)
    return serve(args, engine)
