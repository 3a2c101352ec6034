"""The reference server's command line as one table: ``__main__`` builds its parser from it,
and ``options_to_argv`` the arguments that launch a server with given options."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .faults import FAULTS

if TYPE_CHECKING:  # the server reads this table: this module never imports it
    from .server import ServerOptions

__all__ = ["ARGUMENTS", "FLAG_OF", "options_to_argv"]

#: The command line, in the order ``--help`` and the docs list it: each flag, the option it
#: sets, which gives its default (a field of ``ServerOptions`` as ``server.NAME``, of
#: ``CostModel`` as ``cost.NAME``, or none), and the rest of its ``add_argument`` keywords.
ARGUMENTS: tuple[tuple[str, str | None, dict[str, Any]], ...] = (
    ("--host", "server.host", {"help": "bind address (default %(default)s)"}),
    ("--port", "server.port", {"type": int, "help": "port; 0 picks a free one"}),
    (
        "--target-only",
        "server.target_only",
        {
            "action": "store_true",
            "help": "plain target decoding (the baseline): no drafter, no tree; ddtree_stats "
            "reports tree_budget 0, cycles = tokens, avg_acceptance 1.0",
        },
    ),
    (
        "--fault",
        "server.faults",
        {
            "action": "append",
            "metavar": "NAME",
            "choices": list(FAULTS),
            "help": "inject a fault on every request (repeatable; see below)",
        },
    ),
    (
        "--no-simulated-latency",
        "server.simulated_latency",
        {
            "action": "store_false",
            "dest": "simulated_latency",
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
        "--verify-context-ms",
        "cost.verify_context_ms",
        {
            "type": float,
            "help": "verification cost per verified position (tree node or the target's own "
            "token) per 1000 prompt tokens past --context-free-tokens: a long prompt makes a "
            "big tree dear (0: prompts cost nothing past prefill)",
        },
    ),
    (
        "--context-free-tokens",
        "cost.context_free_tokens",
        {
            "type": int,
            "help": "prompt tokens whose attention costs nothing during decoding "
            "(default %(default)s)",
        },
    ),
    (
        "--draft-context",
        "server.draft_context",
        {
            "type": int,
            "metavar": "TOKENS",
            "help": "prompt tokens the drafter handles as well as a short prompt "
            "(default %(default)s); past them it loses track of the context",
        },
    ),
    (
        "--draft-halflife",
        "server.draft_halflife",
        {
            "type": int,
            "metavar": "TOKENS",
            "help": "past --draft-context, each drafted token the target would accept is "
            "kept with probability 0.5^(tokens past / this), so acceptance falls with the "
            "prompt's length (default %(default)s; 0: never)",
        },
    ),
    (
        "--max-model-len",
        "server.max_model_len",
        {
            "type": int,
            "metavar": "TOKENS",
            "help": "the context: a request whose prompt tokens and max_tokens exceed it is "
            "refused with HTTP 400, in vLLM's words (default %(default)s)",
        },
    ),
    (
        "--unstated-context",
        "server.state_context",
        {
            "action": "store_false",
            "dest": "state_context",
            "help": "GET /models states no context length (max_model_len), as some servers' "
            "do not: --ddtree-context auto then probes it",
        },
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
            # its choices are the server's STATS_DIALECTS, added by ``__main__.build_parser``
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

#: The option's name in a validation error (``port``, ``CostModel.draft_ms``) -> its flag.
FLAG_OF: dict[str, str] = {
    ("CostModel." if source.startswith("cost.") else "") + source.partition(".")[2]: flag
    for flag, source, _ in ARGUMENTS
    if source is not None
}


def _value(options: ServerOptions, source: str) -> Any:
    owner, _, name = source.partition(".")
    return getattr(options.cost if owner == "cost" else options, name)


def options_to_argv(options: ServerOptions) -> list[str]:
    """Command-line arguments reproducing ``options``: each flag whose option differs from
    its default (the server's parser gives the rest), in the table's order."""
    default = type(options)()
    argv: list[str] = []
    for flag, source, kwargs in ARGUMENTS:
        if source is None or _value(options, source) == _value(default, source):
            continue
        value = _value(options, source)
        if kwargs.get("action") in ("store_true", "store_false"):
            argv.append(flag)
        elif kwargs.get("action") == "append":
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    return argv
