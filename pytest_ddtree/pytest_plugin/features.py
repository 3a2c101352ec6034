"""Features the deployment does not serve: their tests skipped, one summary line each.

An HTTP 400 that refuses a feature the request asked for by naming it
(``core.features.refused_feature``) skips the test that sent it, at the request, unless
``--ddtree-require`` names the feature: then the answer is judged, and fails, as before.
The skip reason says the feature, the server and its message, and the skip keeps them as
data (``skips``): the closing summary makes one line per feature of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_ddtree.core.features import refused_feature
from pytest_ddtree.pytest_plugin import skips
from pytest_ddtree.wire.protocol import one_line

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pytest_ddtree.pytest_plugin.runtime import Runtime
    from pytest_ddtree.wire.client import DDTreeClient
    from pytest_ddtree.wire.completion import Completion

_PREFIX = "ddtree: not run, "


def watch(runtime: Runtime) -> None:
    """Skip at the request a test whose feature the endpoint (or its baseline) refuses."""
    _watch(runtime.client, "this deployment", runtime.settings.require)
    if runtime.baseline is not None:
        _watch(runtime.baseline, "the baseline", runtime.settings.require)


def _watch(client: DDTreeClient, where: str, required: tuple[str, ...]) -> None:
    def on_answer(completion: Completion) -> None:
        message = completion.server_message or ""
        found = refused_feature(completion.status_code, completion.request.body, message)
        if found is not None and found[0] not in required:
            skips.skip(
                skip_reason(found[0], where, found[1]),
                skips.FEATURE,
                (found[0], where, one_line(found[1], 200)),
            )

    client.on_answer = on_answer


def skip_reason(feature: str, where: str, message: str) -> str:
    """The reason of a test skipped for a feature ``where`` refused with ``message``."""
    return f"{_PREFIX}{feature}: not served by {where} (HTTP 400: {one_line(message, 200)})"


def skip_key(kind: tuple[str, ...]) -> str:
    """The summary's short name of a feature skip (``kind``: the skip's kind and details)."""
    return f"{kind[1]} not served by {kind[2]}"


def summary_lines(kinds: Iterable[tuple[str, ...]]) -> list[str]:
    """One line per refused feature: what the server said, how many tests were skipped, and
    the option that makes it a failure (none when nothing was refused)."""
    seen: dict[tuple[str, str], list[str]] = {}
    for kind in kinds:
        if kind[0] == skips.FEATURE:
            seen.setdefault((kind[1], kind[2]), []).append(kind[3])
    return [
        f"{feature}: not served by {where} (HTTP 400: {messages[0]}); {len(messages)} test(s) "
        f"skipped; --ddtree-require {feature} makes this a failure"
        for (feature, where), messages in seen.items()
    ]
