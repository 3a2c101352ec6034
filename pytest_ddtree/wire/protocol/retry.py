"""The retry rules of one request (``Attempts``), the same for both shells.

A stale keep-alive connection is retried once on a fresh one; HTTP 429 after
its ``Retry-After``. No I/O: the shells wait and send.
"""

from __future__ import annotations

import email.utils
import math
import time
from dataclasses import dataclass, field

from pytest_ddtree.wire.protocol.endpoint import EndpointConfig
from pytest_ddtree.wire.protocol.exchange import Exchange

RETRY_AFTER_MAX = 60.0


def retry_after(value: str | None) -> float:
    """Seconds to wait from a ``Retry-After`` header (seconds or HTTP date), 0 s to 60 s."""
    if not value:
        return 1.0
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return 1.0
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return 1.0
    return min(max(seconds, 0.0), RETRY_AFTER_MAX)


@dataclass
class Retry:
    """Send the request again: on a fresh connection, or after ``wait`` seconds."""

    fresh: bool = False
    wait: float = 0.0


@dataclass
class Attempts:
    """The retry rules of one request, the same for both shells.

    A reused keep-alive connection the server closed before sending any byte of
    the response is retried once on a fresh connection (the request never
    reached the model); HTTP 429 is retried up to ``retry_429`` times after its
    ``Retry-After``. Every retry is recorded in ``notes`` (``Completion.retries``).
    """

    config: EndpointConfig
    notes: list[str] = field(default_factory=list)
    fresh_retries: int = 0
    rate_limited: int = 0
    retried_429: int = 0

    def after(self, ex: Exchange, *, reused: bool) -> Retry | None:
        """What to do after attempt ``ex`` (``reused``: it went over a pooled connection)."""
        if (
            ex.nothing_received
            and reused
            and self.config.retry_stale
            and not self.fresh_retries
            and ex.status == 0
        ):
            self.fresh_retries += 1
            self.notes.append(
                "a reused keep-alive connection was closed before any byte of the response "
                f"({ex.error}); sent again once on a fresh connection"
            )
            return Retry(fresh=True)
        if ex.status != 429:
            return None
        self.rate_limited += 1
        if self.rate_limited > self.config.retry_429:
            return None
        wait = retry_after(ex.retry_after)
        self.retried_429 += 1
        self.notes.append(f"HTTP 429: waited {wait:g}s (Retry-After) and sent again")
        return Retry(wait=wait)
