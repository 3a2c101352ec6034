"""The plugin's own hooks: what a ``conftest.py`` (or another plugin) can add.

``pytest_ddtree_check`` adds your checks to the built-in invariants. It runs on every
completion the plugin validates (``ddtree_check``, each round of ``ddtree_benchmark``,
the sweep, the distribution test and every request under load), after the built-in checks;
its violations fail the test with their evidence, and a timing whose answer broke one is
never recorded, exactly as for a built-in code. As pytest-benchmark's hooks do, it is
declared here and implemented by name::

    # conftest.py
    from pytest_ddtree import Violation

    def pytest_ddtree_check(completion):
        if "Source:" not in completion.text:
            return [Violation("no-source", "the answer cites no source")]
        return []
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_ddtree.core.settings import Settings
    from pytest_ddtree.core.violation import Violation
    from pytest_ddtree.wire.completion import Completion


@pytest.hookspec
def pytest_ddtree_check(completion: Completion, settings: Settings) -> Iterable[Violation] | None:
    """Your own checks of one completion: the violations found (``Violation`` values with
    a code of your own, a one-line message and the evidence), or an empty list or None.

    ``completion`` is the answer (its ``text``, ``finish_reason``, ``usage``, and the
    ``request`` that was sent, ``completion.request.body``); ``settings`` the test's
    resolved settings. It runs on the thread that validates the answer, so keep it quick
    and free of shared state. A hook that raises fails the test with its error.
    """
