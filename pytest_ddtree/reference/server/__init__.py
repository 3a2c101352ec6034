"""OpenAI-compatible HTTP front end of the reference DDTree server (standard library only).

One topic a module:

- ``options``: ``ServerOptions`` (checked) and ``options_to_argv``;
- ``engine``: the generation engine (plans, rounds, simulated cost, model faults) and the
  ``/metrics`` counters;
- ``text_stream``: tokens into text (reasoning apart, stop strings held back), the
  acceptance histogram;
- ``handler``: the threading HTTP server and the request handler (routes, plain and
  streamed answers, statistics dialects, wire faults);
- ``launcher``: ``ReferenceServer``, ``start_reference_server`` (in this process),
  ``spawn_reference_server`` (a child process), ``serve`` and ``announce``.

Every name is importable from ``reference.server`` itself.
"""

from __future__ import annotations

from .handler import MAX_BODY_BYTES
from .launcher import (
    ReferenceServer,
    announce,
    serve,
    spawn_reference_server,
    start_reference_server,
)
from .options import STATS_DIALECTS, ServerOptions, options_to_argv
from .text_stream import acceptance_histogram

__all__ = [
    "MAX_BODY_BYTES",
    "STATS_DIALECTS",
    "ReferenceServer",
    "ServerOptions",
    "acceptance_histogram",
    "announce",
    "options_to_argv",
    "serve",
    "spawn_reference_server",
    "start_reference_server",
]
