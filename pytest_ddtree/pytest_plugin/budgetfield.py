"""A sweep whose budgets would go in a field the endpoint never reads: stopped early.

The default budget mode sends each tree budget in the ``tree_budget`` field. A server
whose dialect reads its budget elsewhere, or not at all per request (llama.cpp), would
time its own budget once per budget; the budget-ignored verdict would say so only after
the whole sweep. The rule (``core.options.unread_budget_field``) is applied as soon as
the dialect is known: a configured one when the runtime starts, a detected one at the
first answer that carries statistics. The run then stops with that one line (under xdist,
each worker once its running test ends: an exit inside a worker breaks the controller).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest

from pytest_ddtree.core.options import unread_budget_field

if TYPE_CHECKING:
    from pytest_ddtree.pytest_plugin.runtime import Runtime
    from pytest_ddtree.wire.completion import Completion

#: the fixtures that send more than one budget (each budget, or every budget in turn)
BUDGET_FIXTURES = frozenset(
    {"tree_budget", "ddtree_benchmark", "ddtree_sweep", "ddtree_load", "ddtree_lossless"}
)


def sweeps_budgets(items: Sequence[pytest.Item]) -> bool:
    """Whether a collected test sends the configured budgets."""
    return any(BUDGET_FIXTURES.intersection(getattr(i, "fixturenames", ())) for i in items)


def watch(runtime: Runtime, session: pytest.Session) -> None:
    """Stop now when the configured dialect reads no budget field the run would send, else
    at the first answer whose statistics name such a dialect."""
    settings = runtime.settings
    if not sweeps_budgets(session.items):
        return
    client = runtime.client
    if client.detected_dialect is not None:  # configured: known before any request
        why = unread_budget_field(
            settings, client.detected_dialect, f"from {settings.source_of('dialect')}"
        )
        if why is not None:
            raise pytest.UsageError(f"ddtree: {why}")
        return
    before = client.on_answer

    def on_answer(completion: Completion) -> None:
        if client.detected_dialect is not None:
            client.on_answer = before  # judged once: the dialect is settled
            why = unread_budget_field(
                settings, client.detected_dialect, "detected from its first answer"
            )
            if why is not None:
                stop(session, f"ddtree: {why}")
        if before is not None:
            before(completion)

    client.on_answer = on_answer


def stop(session: pytest.Session, reason: str) -> None:
    """End the run with ``reason``: at once from the main thread of a run without workers,
    else (an xdist worker, a load generator's thread) once the running test ends."""
    session.shouldstop = reason
    worker = hasattr(session.config, "workerinput")
    if not worker and threading.current_thread() is threading.main_thread():
        pytest.exit(reason, returncode=pytest.ExitCode.USAGE_ERROR)
