"""Command line of the reference server: ``python -m pytest_ddtree.reference``."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import textwrap
import threading
from typing import NoReturn

from .cost import CostModel
from .faults import FAULT_LAYERS, FAULTS
from .flags import ARGUMENTS, FLAG_OF
from .server import STATS_DIALECTS, ServerOptions, announce, serve

__all__ = ["build_parser", "docs_markdown", "main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # one line naming the bad value, as every bad input in this project
        self.exit(2, f"{self.prog}: error: {message}\n")


def _fault_help() -> str:
    lines = ["faults (--fault NAME, repeatable; or per request: header X-DDTree-Fault: a,b):"]
    for name, desc in FAULTS.items():
        kind = f" [{FAULT_LAYERS[name]}]"
        lines.append(
            textwrap.fill(
                f"{name}{kind}: {desc}", width=96, initial_indent="  ", subsequent_indent="      "
            )
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to document the options), from ``flags.ARGUMENTS``."""
    p = _Parser(
        prog="ddtree-reference-server",
        description=(
            "Embedded reference DDTree server: an OpenAI-compatible endpoint backed by a small "
            "n-gram target model and drafter with real tree-speculative decoding, a simulated "
            "accelerator cost, and injectable faults."
        ),
        epilog=_fault_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    defaults: dict[str, object] = {"server": ServerOptions(), "cost": CostModel()}
    for flag, source, kwargs in ARGUMENTS:
        if source is not None:
            owner, _, name = source.partition(".")
            default = getattr(defaults[owner], name)
            append = kwargs.get("action") == "append"
            kwargs = {**kwargs, "default": list(default) if append else default}
            if source == "server.stats_dialect":
                kwargs["choices"] = STATS_DIALECTS
        p.add_argument(flag, **kwargs)
    return p


def docs_markdown() -> str:
    """Markdown reference of the command line, the faults and the cost model.

    Generated from the parser and the fault catalogue, so documentation cannot drift.
    """
    parser = build_parser()
    out = [
        "| option | default | meaning |",
        "| --- | --- | --- |",
    ]
    for action in parser._actions:  # argparse has no public API for this
        if not action.option_strings or action.dest == "help":
            continue
        flag = ", ".join(f"`{o}`" for o in action.option_strings)
        if action.nargs == 0:
            default = ""
        else:
            default = f"`{action.default}`" if action.default not in (None, []) else ""
        helptext = re.sub(r" \(default %\(default\)s\)", "", action.help or "")
        helptext = helptext.replace("|", "\\|")
        out.append(f"| {flag} | {default} | {helptext} |")
    out += ["", "| fault | kind | symptom |", "| --- | --- | --- |"]
    for name, desc in FAULTS.items():
        kind = FAULT_LAYERS[name]
        out.append(f"| `{name}` | {kind} | {desc.replace('|', chr(92) + '|')} |")
    return "\n".join(out) + "\n"


def options_from_args(ns: argparse.Namespace) -> ServerOptions:
    """Map parsed arguments onto :class:`ServerOptions` (raises ValueError on bad values)."""
    cost = CostModel(
        draft_ms=ns.draft_ms,
        verify_base_ms=ns.verify_base_ms,
        verify_free_nodes=ns.verify_free_nodes,
        verify_per_node_ms=ns.verify_per_node_ms,
        verify_quadratic_ms=ns.verify_quadratic_ms,
        prefill_ms_per_token=ns.prefill_ms_per_token,
        slowdown=ns.slowdown,
        verify_context_ms=ns.verify_context_ms,
        context_free_tokens=ns.context_free_tokens,
    )
    return ServerOptions(
        host=ns.host,
        port=ns.port,
        target_only=ns.target_only,
        faults=tuple(ns.fault),
        simulated_latency=ns.simulated_latency,
        default_tree_budget=ns.tree_budget,
        block_size=ns.block_size,
        cost=cost,
        seed=ns.seed,
        stats_dialect=ns.stats_dialect,
        hang_seconds=ns.hang_seconds,
        model_id=ns.model_id,
        slowdown_after=ns.slowdown_after,
        slowdown_factor=ns.slowdown_factor,
        jitter=ns.jitter,
        draft_context=ns.draft_context,
        draft_halflife=ns.draft_halflife,
        max_model_len=ns.max_model_len,
        state_context=ns.state_context,
    )


def _stop_at_stdin_eof() -> None:
    # the raw descriptor, not sys.stdin.buffer: a daemon thread blocked in a buffered read
    # holds the buffer's lock, and the interpreter's exit then waits a second for it
    with contextlib.suppress(OSError, ValueError):
        while os.read(sys.stdin.fileno(), 65536):
            pass
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    """Run the server until interrupted or terminated."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        options = options_from_args(ns)
    except ValueError as e:
        name, _, rest = str(e).partition(": ")
        parser.error(f"{FLAG_OF.get(name, name)}: {rest}")
    try:
        httpd, stop_event = serve(options)
    except OSError as e:
        parser.exit(1, f"{parser.prog}: error: cannot listen on {ns.host}:{ns.port}: {e}\n")

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:  # a parent may stop the server as soon as it has read the URL
        if ns.stop_on_stdin_eof:
            threading.Thread(target=_stop_at_stdin_eof, daemon=True).start()
        print(announce(httpd), flush=True)
        httpd.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    finally:
        stop_event.set()
        httpd.server_close()
        httpd.close_connections()
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
