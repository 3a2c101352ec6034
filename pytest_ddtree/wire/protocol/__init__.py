"""The wire protocol without I/O: what both clients (sync and load) share.

Everything that does not touch a socket lives here, once, one topic a module:

- ``endpoint``: the endpoint's configuration (``EndpointConfig``) and request building;
- ``exchange``: what one attempt did on the wire (``Exchange``) and the classification
  of a transport exception (``classify_transport``);
- ``sse``: the incremental event decoder over raw bytes (``StreamDecoder``: exact byte
  offsets of invalid UTF-8, the byte cap counted in bytes);
- ``parse``: reading an answer's body (its choice, text, JSON, error);
- ``assembly``: the ``Completion`` an exchange amounts to (``assemble``), with every
  failure classified into an ``ErrorKind``;
- ``retry``: the retry rules (``Attempts``);
- ``stall``: the stall guard (``StallGuard``).

The sync ``DDTreeClient`` and the async load runner are thin shells that move bytes and
stamp times; they make no decision of their own, so the same bytes give the same
``Completion`` on both paths. Every name is importable from ``wire.protocol`` itself.

No pytest here, and no socket: httpx appears only to classify its exceptions.
"""

from __future__ import annotations

from pytest_ddtree.wire.completion import ErrorKind
from pytest_ddtree.wire.protocol.assembly import assemble, failed
from pytest_ddtree.wire.protocol.endpoint import (
    EVENT_STREAM,
    KEEPALIVE_EXPIRY,
    EndpointConfig,
    Messages,
)
from pytest_ddtree.wire.protocol.exchange import Exchange, classify_transport
from pytest_ddtree.wire.protocol.parse import (
    chunk_choice,
    decode_text,
    http_error,
    one_line,
    parse_json,
    plain_choice,
)
from pytest_ddtree.wire.protocol.retry import RETRY_AFTER_MAX, Attempts, Retry, retry_after
from pytest_ddtree.wire.protocol.sse import (
    KEEP_ALL_CHUNKS,
    KEEP_LAST_CHUNKS,
    KEEP_STATS_CHUNKS,
    MAX_NOTES,
    STATS_KEYS,
    StreamDecoder,
)
from pytest_ddtree.wire.protocol.stall import StallGuard

__all__ = [
    "EVENT_STREAM",
    "KEEPALIVE_EXPIRY",
    "KEEP_ALL_CHUNKS",
    "KEEP_LAST_CHUNKS",
    "KEEP_STATS_CHUNKS",
    "MAX_NOTES",
    "RETRY_AFTER_MAX",
    "STATS_KEYS",
    "Attempts",
    "EndpointConfig",
    "ErrorKind",
    "Exchange",
    "Messages",
    "Retry",
    "StallGuard",
    "StreamDecoder",
    "assemble",
    "chunk_choice",
    "classify_transport",
    "decode_text",
    "failed",
    "http_error",
    "one_line",
    "parse_json",
    "plain_choice",
    "retry_after",
]
