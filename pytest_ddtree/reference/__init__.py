"""Embedded reference DDTree server.

A small but real tree-speculative OpenAI-compatible server: a byte-level BPE tokenizer and
n-gram target/drafter models trained on a corpus the project generates itself, best-first
draft trees verified against the target (lossless at temperature 0), a simulated accelerator
cost so that a budget sweep shows a real trade-off, and injectable faults covering every way
a speculative-decoding endpoint is known to deceive a benchmark.

This package imports only itself and ``pytest_ddtree.core`` (the settings, the dialect registry).
"""

from __future__ import annotations

from .cost import CostModel, optimal_budget
from .faults import FAULTS, SPECULATION_FAULTS, TEMPLATE_FAULTS
from .model import MODEL_ID, tokenizer_path
from .server import (
    ReferenceServer,
    ServerOptions,
    spawn_reference_server,
    start_reference_server,
)

__all__ = [
    "FAULTS",
    "MODEL_ID",
    "SPECULATION_FAULTS",
    "TEMPLATE_FAULTS",
    "CostModel",
    "ReferenceServer",
    "ServerOptions",
    "optimal_budget",
    "spawn_reference_server",
    "start_reference_server",
    "tokenizer_path",
]
