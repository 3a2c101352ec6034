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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to document the options)."""
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
    d = ServerOptions()
    c = CostModel()
    p.add_argument("--host", default=d.host, help="bind address (default %(default)s)")
    p.add_argument("--port", type=int, default=d.port, help="port; 0 picks a free one")
    p.add_argument(
        "--target-only",
        action="store_true",
        help="plain target decoding (the baseline): no drafter, no tree; ddtree_stats "
        "reports tree_budget 0, cycles = tokens, avg_acceptance 1.0",
    )
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME",
        choices=list(FAULTS),
        help="inject a fault on every request (repeatable; see below)",
    )
    p.add_argument(
        "--no-simulated-latency",
        action="store_true",
        help="do not wait the simulated accelerator time (fast tests)",
    )
    p.add_argument(
        "--tree-budget",
        type=int,
        default=d.default_tree_budget,
        help="default tree budget when a request has none (default %(default)s)",
    )
    p.add_argument(
        "--block-size",
        type=int,
        default=d.block_size,
        help="drafter block size; the tree is at most block-1 deep (default %(default)s)",
    )
    p.add_argument("--draft-ms", type=float, default=c.draft_ms, help="drafter cost per round")
    p.add_argument(
        "--verify-base-ms",
        type=float,
        default=c.verify_base_ms,
        help="fixed cost of one verification pass",
    )
    p.add_argument(
        "--verify-free-nodes",
        type=int,
        default=c.verify_free_nodes,
        help="tree nodes verified at no extra cost (default %(default)s)",
    )
    p.add_argument(
        "--verify-per-node-ms",
        type=float,
        default=c.verify_per_node_ms,
        help="verification cost per tree node",
    )
    p.add_argument(
        "--verify-quadratic-ms",
        type=float,
        default=c.verify_quadratic_ms,
        help="verification cost per squared tree node count",
    )
    p.add_argument(
        "--prefill-ms-per-token",
        type=float,
        default=c.prefill_ms_per_token,
        help="prefill cost per prompt token",
    )
    p.add_argument(
        "--slowdown",
        type=float,
        default=c.slowdown,
        help="multiply every simulated cost by this factor",
    )
    p.add_argument(
        "--slowdown-after",
        type=int,
        default=d.slowdown_after,
        metavar="N",
        help="after N generation requests, multiply every simulated cost by "
        "--slowdown-factor (a server that degrades mid-run, to show drift)",
    )
    p.add_argument(
        "--slowdown-factor",
        type=float,
        default=d.slowdown_factor,
        metavar="F",
        help="the factor of --slowdown-after (default %(default)s)",
    )
    p.add_argument(
        "--jitter",
        type=float,
        default=d.jitter,
        metavar="CV",
        help="seeded multiplicative noise on each request's simulated costs: lognormal with "
        "mean 1 and this coefficient of variation, 0 to 1 (default %(default)s: none)",
    )
    p.add_argument(
        "--seed", type=int, default=d.seed, help="server seed (sampling without a request seed)"
    )
    p.add_argument(
        "--stats-dialect",
        default=d.stats_dialect,
        choices=STATS_DIALECTS,
        help="where speculation statistics are reported (default %(default)s)",
    )
    p.add_argument(
        "--hang-seconds",
        type=float,
        default=d.hang_seconds,
        help="how long the 'hang' fault stalls (default %(default)s)",
    )
    p.add_argument("--model-id", default=d.model_id, help="model id served (default %(default)s)")
    p.add_argument(
        "--stop-on-stdin-eof",
        action="store_true",
        help="stop when standard input reaches end of file (a parent process that dies "
        "closes it, so the server never outlives it)",
    )
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
    with contextlib.suppress(OSError, ValueError):
        while sys.stdin.buffer.read(65536):
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
    if ns.stop_on_stdin_eof:
        threading.Thread(target=_stop_at_stdin_eof, daemon=True).start()
    print(announce(httpd), flush=True)
    try:
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
