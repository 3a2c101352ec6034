"""Features the deployment does not serve: their tests skipped, one summary line each.

An HTTP 400 that refuses a feature the request asked for by naming it
(``core.features.refused_feature``) skips the test that sent it, at the request, unless
``--ddtree-require`` names the feature: then the answer is judged, and fails, as before.
The skip reason carries the feature, the server and its message; the closing summary
reads them back into one line per feature.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from pytest_ddtree.core.features import refused_feature
from pytest_ddtree.wire.protocol import one_line

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pytest_ddtree.pytest_plugin.runtime import Runtime
    from pytest_ddtree.wire.client import DDTreeClient
    from pytest_ddtree.wire.completion import Completion

_PREFIX = "ddtree: not run, "
_REASON = re.compile(r"ddtree: not run, (\w+): not served by (.+?) \(HTTP 400: (.*)\)\Z")


def watch(runtime: Runtime) -> None:
    """Skip at the request a test whose feature the endpoint (or its baseline) refuses."""
    _watch(runtime.client, "this deployment", runtime.settings.require)
    if runtime.baseline is not None:
        _watch(runtime.baseline, "the baseline", runtime.settings.require)


def _watch(client: DDTreeClient, where: str, required: tuple[str, ...]) -> None:
    def on_answer(completion: Completion) -> None:
        status = completion.status_code
        message = (completion.error or "").removeprefix(f"HTTP {status}: ")
        found = refused_feature(status, completion.request.body, message)
        if found is not None and found[0] not in required:
            pytest.skip(skip_reason(found[0], where, found[1]))

    client.on_answer = on_answer


def skip_reason(feature: str, where: str, message: str) -> str:
    """The reason of a test skipped for a feature ``where`` refused with ``message``."""
    return f"{_PREFIX}{feature}: not served by {where} (HTTP 400: {one_line(message, 200)})"


def skip_key(reason: str) -> str | None:
    """The summary's short name of a feature skip (None: another reason)."""
    found = _REASON.match(reason)
    return None if found is None else f"{found[1]} not served by {found[2]}"


def summary_lines(reasons: Iterable[str]) -> list[str]:
    """One line per refused feature: what the server said, how many tests were skipped, and
    the option that makes it a failure (none when nothing was refused)."""
    seen: dict[tuple[str, str], list[str]] = {}
    for reason in reasons:
        found = _REASON.match(reason)
        if found is not None:
            seen.setdefault((found[1], found[2]), []).append(found[3])
    return [
        f"{feature}: not served by {where} (HTTP 400: {messages[0]}); {len(messages)} test(s) "
        f"skipped; --ddtree-require {feature} makes this a failure"
        for (feature, where), messages in seen.items()
    ]
