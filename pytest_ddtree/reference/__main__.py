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
from typing import Any, NoReturn

from .cost import CostModel
from .faults import FAULT_LAYERS, FAULTS
from .server import STATS_DIALECTS, ServerOptions, announce, serve

__all__ = ["build_parser", "docs_markdown", "main"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # one line naming the bad value, as every bad input in this project
        self.exit(2, f"{self.prog}: error: {message}\n")


# option field (as named in validation errors) -> command-line flag
_FLAGS = {
    "port": "--port",
    "default_tree_budget": "--tree-budget",
    "block_size": "--block-size",
    "hang_seconds": "--hang-seconds",
    "stats_dialect": "--stats-dialect",
    "slowdown_after": "--slowdown-after",
    "slowdown_factor": "--slowdown-factor",
    "jitter": "--jitter",
    "CostModel.draft_ms": "--draft-ms",
    "CostModel.verify_base_ms": "--verify-base-ms",
    "CostModel.verify_free_nodes": "--verify-free-nodes",
    "CostModel.verify_per_node_ms": "--verify-per-node-ms",
    "CostModel.verify_quadratic_ms": "--verify-quadratic-ms",
    "CostModel.prefill_ms_per_token": "--prefill-ms-per-token",
    "CostModel.slowdown": "--slowdown",
}


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


#: The command line, in the order ``--help`` and the docs list it: each flag, where its
#: default comes from (a field of ``ServerOptions`` as ``server.NAME``, of ``CostModel`` as
#: ``cost.NAME``, or none) and the rest of its ``add_argument`` keywords.
_ARGUMENTS: tuple[tuple[str, str | None, dict[str, Any]], ...] = (
    ("--host", "server.host", {"help": "bind address (default %(default)s)"}),
    ("--port", "server.port", {"type": int, "help": "port; 0 picks a free one"}),
    (
        "--target-only",
        None,
        {
            "action": "store_true",
            "help": "plain target decoding (the baseline): no drafter, no tree; ddtree_stats "
            "reports tree_budget 0, cycles = tokens, avg_acceptance 1.0",
        },
    ),
    (
        "--fault",
        None,
        {
            "action": "append",
            "default": [],
            "metavar": "NAME",
            "choices": list(FAULTS),
            "help": "inject a fault on every request (repeatable; see below)",
        },
    ),
    (
        "--no-simulated-latency",
        None,
        {
            "action": "store_true",
            "help": "do not wait the simulated accelerator time (fast tests)",
        },
    ),
    (
        "--tree-budget",
        "server.default_tree_budget",
        {
            "type": int,
            "help": "default tree budget when a request has none (default %(default)s)",
        },
    ),
    (
        "--block-size",
        "server.block_size",
        {
            "type": int,
            "help": "drafter block size; the tree is at most block-1 deep (default %(default)s)",
        },
    ),
    ("--draft-ms", "cost.draft_ms", {"type": float, "help": "drafter cost per round"}),
    (
        "--verify-base-ms",
        "cost.verify_base_ms",
        {"type": float, "help": "fixed cost of one verification pass"},
    ),
    (
        "--verify-free-nodes",
        "cost.verify_free_nodes",
        {"type": int, "help": "tree nodes verified at no extra cost (default %(default)s)"},
    ),
    (
        "--verify-per-node-ms",
        "cost.verify_per_node_ms",
        {"type": float, "help": "verification cost per tree node"},
    ),
    (
        "--verify-quadratic-ms",
        "cost.verify_quadratic_ms",
        {"type": float, "help": "verification cost per squared tree node count"},
    ),
    (
        "--prefill-ms-per-token",
        "cost.prefill_ms_per_token",
        {"type": float, "help": "prefill cost per prompt token"},
    ),
    (
        "--slowdown",
        "cost.slowdown",
        {"type": float, "help": "multiply every simulated cost by this factor"},
    ),
    (
        "--slowdown-after",
        "server.slowdown_after",
        {
            "type": int,
            "metavar": "N",
            "help": "after N generation requests, multiply every simulated cost by "
            "--slowdown-factor (a server that degrades mid-run, to show drift)",
        },
    ),
    (
        "--slowdown-factor",
        "server.slowdown_factor",
        {
            "type": float,
            "metavar": "F",
            "help": "the factor of --slowdown-after (default %(default)s)",
        },
    ),
    (
        "--jitter",
        "server.jitter",
        {
            "type": float,
            "metavar": "CV",
            "help": "seeded multiplicative noise on each request's simulated costs: lognormal "
            "with mean 1 and this coefficient of variation, 0 to 1 (default %(default)s: none)",
        },
    ),
    (
        "--seed",
        "server.seed",
        {"type": int, "help": "server seed (sampling without a request seed)"},
    ),
    (
        "--stats-dialect",
        "server.stats_dialect",
        {
            "choices": STATS_DIALECTS,
            "help": "where speculation statistics are reported (default %(default)s)",
        },
    ),
    (
        "--hang-seconds",
        "server.hang_seconds",
        {"type": float, "help": "how long the 'hang' fault stalls (default %(default)s)"},
    ),
    ("--model-id", "server.model_id", {"help": "model id served (default %(default)s)"}),
    (
        "--stop-on-stdin-eof",
        None,
        {
            "action": "store_true",
            "help": "stop when standard input reaches end of file (a parent process that dies "
            "closes it, so the server never outlives it)",
        },
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to document the options), from ``_ARGUMENTS``."""
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
    for flag, source, kwargs in _ARGUMENTS:
        if source is not None:
            owner, _, name = source.partition(".")
            kwargs = {**kwargs, "default": getattr(defaults[owner], name)}
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
    )
    return ServerOptions(
        host=ns.host,
        port=ns.port,
        target_only=ns.target_only,
        faults=tuple(ns.fault),
        simulated_latency=not ns.no_simulated_latency,
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
        parser.error(f"{_FLAGS.get(name, name)}: {rest}")
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
