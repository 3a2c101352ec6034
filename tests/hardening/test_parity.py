"""One wire, two shells: the same bytes give the same ``Completion`` on the sync client and
on the load runner, and the same violation codes.

Recorded byte streams go through both shells over ``httpx.MockTransport`` (the only way to
feed the same thousands of generated bodies, split into the same reads, to both): the
completions must be equal, timings aside. Every mode of the hostile server goes through both
over real sockets on 127.0.0.1: same kind of failure, same codes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_ddtree.checks.invariants import check
from pytest_ddtree.core.settings import Timeout
from pytest_ddtree.measure.load import LoadPoint
from pytest_ddtree.measure.load.runner import completion_of, run_point
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion, ErrorKind
from pytest_ddtree.wire.protocol import EndpointConfig

from ._hostile import HostileServer
from .test_fuzz import json_values, sse_pieces

PARITY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CAP = 4096


def _models() -> httpx.Response:
    return httpx.Response(200, json={"object": "list", "data": [{"id": "m"}]})


def _sync_transport(reads: Sequence[bytes], status: int, ctype: str) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return _models()

        def body() -> Iterator[bytes]:
            yield from reads

        return httpx.Response(status, content=body(), headers={"content-type": ctype})

    return httpx.MockTransport(answer)


def _async_transport(reads: Sequence[bytes], status: int, ctype: str) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return _models()

        async def body() -> AsyncIterator[bytes]:
            for read in reads:
                yield read

        return httpx.Response(status, content=body(), headers={"content-type": ctype})

    return httpx.MockTransport(answer)


def _config(**options: Any) -> EndpointConfig:
    return EndpointConfig("http://parity.invalid/v1", model="m", max_response_bytes=CAP, **options)


def _both(
    reads: Sequence[bytes], status: int = 200, ctype: str = "text/event-stream"
) -> tuple[Completion, Completion]:
    """The completion of the same answer through the sync client and through the runner."""
    config = _config()
    with DDTreeClient(config, transport=_sync_transport(reads, status, ctype)) as client:
        sync = client.chat("hi", max_tokens=16)
    spec = config.spec("hi", tree_budget=None, max_tokens=16)
    raws, *_ = asyncio.run(
        run_point(
            config,
            [spec],
            LoadPoint("concurrency", 1),
            transport=_async_transport(reads, status, ctype),
        )
    )
    return sync, completion_of(raws[0])


def _comparable(c: Completion) -> dict[str, Any]:
    """Everything but the clock readings (how many content events were stamped stays)."""
    fields = {f.name: getattr(c, f.name) for f in dataclasses.fields(c)}
    timings = fields.pop("timings")
    fields["content_events"] = len(timings.chunk_times)
    fields["stamped_first"] = timings.first_content is not None
    fields["headers_seen"] = timings.headers is not None
    # how the client watched itself differs by shell (a thread or the event loop); both watch
    stall = fields.pop("client_stall")
    fields["client_watched"] = stall is not None
    return fields


def _codes(c: Completion) -> list[str]:
    return sorted({v.code for v in check(c)})


def _split(body: bytes, cuts: Sequence[int]) -> list[bytes]:
    reads, at = [], 0
    for size in cuts:
        if at >= len(body):
            break
        reads.append(body[at : at + size])
        at += size
    if at < len(body):
        reads.append(body[at:])
    return reads


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _healthy(words: Sequence[str]) -> bytes:
    out = [_sse({"id": "x", "model": "m", "choices": [{"delta": {"role": "assistant"}}]})]
    out += [_sse({"choices": [{"index": 0, "delta": {"content": w}}]}) for w in words]
    out.append(_sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    out.append(
        _sse(
            {
                "choices": [],
                "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
            }
        )
    )
    return b"".join(out) + b"data: [DONE]\n\n"


RECORDED = {
    "healthy": (_healthy(["Rivers ", "carry ", "water ", "down."]), 200, "text/event-stream"),
    "no-done": (_healthy(["a ", "b"]).replace(b"data: [DONE]\n\n", b""), 200, "text/event-stream"),
    "bad-utf8": (
        _healthy(["caf\u00e9 ", "ok"]).replace(b"\\u00e9", b"\xff"),
        200,
        "text/event-stream",
    ),
    "deep": (
        b"data: " + b"[" * 1500 + b"]" * 1500 + b"\n\n" + _healthy(["x"]),
        200,
        "text/event-stream",
    ),
    "error-event": (
        _sse({"error": {"message": "out of memory", "type": "server_error"}}),
        200,
        "text/event-stream",
    ),
    "too-large": (_healthy(["word "] * 200), 200, "text/event-stream"),
    "http-500": (b'{"error": {"message": "boom"}}', 500, "application/json"),
    "http-429": (b'{"error": {"message": "slow down"}}', 429, "application/json"),
    "json-for-stream": (b'{"choices": [{"message": {"content": "hi"}}]}', 200, "application/json"),
    "empty": (b"", 200, "text/event-stream"),
    "crlf": (_healthy(["a ", "b"]).replace(b"\n", b"\r\n"), 200, "text/event-stream"),
}


@pytest.mark.parametrize("name", sorted(RECORDED))
@pytest.mark.parametrize("size", [1, 7, 64, 100_000])
def test_a_recorded_stream_gives_the_same_completion_on_both_paths(name: str, size: int) -> None:
    body, status, ctype = RECORDED[name]
    reads = _split(body, [size] * (len(body) // size + 1))
    sync, load = _both(reads, status, ctype)
    assert _comparable(sync) == _comparable(load), name
    assert _codes(sync) == _codes(load), name


def test_the_recorded_streams_cover_every_kind_of_answer() -> None:
    kinds = {
        name: _both([body], status, ctype)[0].error_kind
        for name, (body, status, ctype) in RECORDED.items()
    }
    assert kinds["healthy"] is None and kinds["crlf"] is None
    assert kinds["no-done"] == ErrorKind.STREAM_INTEGRITY
    assert kinds["deep"] == ErrorKind.STREAM_INTEGRITY
    assert kinds["bad-utf8"] == ErrorKind.ENCODING
    assert kinds["error-event"] == ErrorKind.STREAM_ERROR
    assert kinds["too-large"] == ErrorKind.TOO_LARGE
    assert kinds["http-500"] == ErrorKind.HTTP
    assert kinds["http-429"] == ErrorKind.RATE_LIMITED
    assert kinds["json-for-stream"] == ErrorKind.PROTOCOL
    assert kinds["empty"] == ErrorKind.STREAM_INTEGRITY


@PARITY
@given(
    st.one_of(sse_pieces, json_values.map(lambda v: json.dumps(v).encode())),
    st.lists(st.integers(min_value=1, max_value=64), max_size=8),
    st.sampled_from([200, 200, 200, 400, 429, 500]),
    st.sampled_from(["text/event-stream", "application/json", ""]),
)
def test_any_bytes_give_the_same_completion_on_both_paths(
    body: bytes, cuts: list[int], status: int, ctype: str
) -> None:
    sync, load = _both(_split(body, cuts), status, ctype)
    assert _comparable(sync) == _comparable(load)
    assert _codes(sync) == _codes(load)


# ------------------------------------------------------------ the hostile server

HOSTILE_TIMEOUT = Timeout(connect=2, read=3, total=2)
# every mode a streamed request can meet, and the kind both paths must give it
MODES: dict[str, ErrorKind | None] = {
    "healthy": None,
    "silent": ErrorKind.DEADLINE,
    "trickle": ErrorKind.DEADLINE,
    "trickle-headers": ErrorKind.DEADLINE,
    "trickle-body": ErrorKind.DEADLINE,
    "endless": ErrorKind.TOO_LARGE,
    "huge": ErrorKind.TOO_LARGE,
    "reset": ErrorKind.BROKEN,
    "reset-before": ErrorKind.TRANSPORT,
    "bad-utf8": ErrorKind.ENCODING,
    "bad-utf8-plain": ErrorKind.PROTOCOL,
    "deep": ErrorKind.STREAM_INTEGRITY,
    "deep-plain": ErrorKind.PROTOCOL,
    "json-stream": ErrorKind.PROTOCOL,
    "429": ErrorKind.RATE_LIMITED,
    "429-once": ErrorKind.RATE_LIMITED,
    "stale": ErrorKind.PROTOCOL,  # a plain answer on the first connection
    "die": None,
}


def _hostile_both(one: HostileServer, two: HostileServer) -> tuple[Completion, Completion]:
    """The first request a fresh server in one mode answers, through each shell."""
    # a cap far below what a loaded machine reads in the 2 s deadline (about 1 MB/s seen on CI)
    options: dict[str, Any] = {"timeout": HOSTILE_TIMEOUT, "max_response_bytes": 256 << 10}
    config = EndpointConfig(one.base_url, **options)
    with DDTreeClient(config, stall_limit=0) as client:
        sync = client.chat("Tell me about rivers.", max_tokens=96)
    config = EndpointConfig(two.base_url, **options)
    spec = config.spec("Tell me about rivers.", tree_budget=None, max_tokens=96)
    raws, *_ = asyncio.run(run_point(config, [spec], LoadPoint("concurrency", 1)))
    return sync, completion_of(raws[0])


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_hostile_mode_gives_the_same_kind_and_codes_on_both_paths(
    mode: str, hostile: Any
) -> None:
    # a server each: some modes change with what they served (429-once, stale, die)
    sync, load = _hostile_both(*(hostile(mode, interval=0.2, trickle_for=30) for _ in "12"))
    assert sync.error_kind == load.error_kind == MODES[mode], (sync.error, load.error)
    assert _codes(sync) == _codes(load), (sync.error, load.error)
