"""One clock, two shells: ``sent`` is the request's first byte on the wire in the sync client
and in the load runner, and a new connection's setup is reported apart, never inside TTFT.

The same request goes through both shells against a real reference server on 127.0.0.1,
once on a new connection and once on a kept-alive one. Only the order of the stamps is
asserted (no durations): a shell that stamped ``sent`` when the call began would put it
before the connection's setup.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pytest_ddtree.measure.load import LoadPoint
from pytest_ddtree.measure.load.runner import RawRequest, _client, _one, completion_of, run_point
from pytest_ddtree.reference import MODEL_ID, ReferenceServer
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.clock import WireClock
from pytest_ddtree.wire.completion import Completion
from pytest_ddtree.wire.protocol import EndpointConfig

PROMPT = "Say something about rivers."


def _config(server: ReferenceServer) -> EndpointConfig:
    return EndpointConfig(server.base_url, model=MODEL_ID, max_tokens=16)


def _sync_pair(server: ReferenceServer) -> tuple[Completion, Completion]:
    """The request on a new client (a new connection), then again (the connection reused)."""
    with DDTreeClient(_config(server)) as client:
        return client.chat(PROMPT), client.chat(PROMPT)


def _load_pair(server: ReferenceServer) -> tuple[Completion, Completion]:
    """The same through the load runner's async path: one of its pool's single-connection
    clients, new, then kept alive."""
    config = _config(server)

    async def twice() -> list[RawRequest]:
        http = _client(config, None)
        raws = [RawRequest(config.request(PROMPT)) for _ in range(2)]
        try:
            for raw in raws:
                await _one(http, raw, config, [])
        finally:
            await http.aclose()
        return raws

    first, second = asyncio.run(twice())
    return completion_of(first), completion_of(second)


def _on_the_wire(c: Completion) -> None:
    """``sent`` is when the headers went out: after any connection's setup, before the
    answer; TTFT and end to end run from it."""
    t = c.timings
    assert c.ok, c.error
    assert t.first_content is not None and t.headers is not None
    assert t.sent <= t.headers <= t.first_content <= t.done
    assert c.ttft == t.first_content - t.sent
    assert c.end_to_end == t.done - t.sent


@pytest.mark.parametrize("shell", [_sync_pair, _load_pair], ids=["sync-client", "load-runner"])
def test_sent_is_the_first_byte_on_the_wire_in_both_shells(
    reference_server: ReferenceServer, shell: Any
) -> None:
    new, reused = shell(reference_server)
    for c in (new, reused):
        _on_the_wire(c)
    # a new connection: its setup is reported, and it ended before the request went out
    t = new.timings
    assert t.connect_start is not None and t.connect_end is not None
    assert t.connect_start <= t.connect_end <= t.sent
    assert new.connect == t.connect_end - t.connect_start
    # a reused one: nothing to report
    assert reused.connect is None
    assert reused.timings.connect_start is None and reused.timings.connect_end is None


def test_both_shells_give_the_same_answer_and_the_same_connection_figures(
    reference_server: ReferenceServer,
) -> None:
    sync, load = _sync_pair(reference_server), _load_pair(reference_server)
    assert [c.text for c in sync] == [c.text for c in load]
    assert [c.connect is None for c in sync] == [c.connect is None for c in load] == [False, True]


def test_a_warmed_load_point_reports_no_connection_setup(
    reference_server: ReferenceServer,
) -> None:
    # the runner opens its connections before the clock starts: no request pays for one
    config = _config(reference_server)
    specs = [config.request(PROMPT) for _ in range(3)]
    raws, *_ = asyncio.run(run_point(config, specs, LoadPoint("concurrency", 1)))
    for raw in raws:
        c = completion_of(raw)
        _on_the_wire(c)
        assert c.connect is None and raw.issued <= raw.sent


def test_the_clock_reads_http11_http2_and_tls_events() -> None:
    clock = WireClock(began=0.0)
    assert clock.sent_at == 0.0 and clock.connected is None  # no event: the call's start
    clock.event("connection.connect_tcp.started")
    assert clock.connected is None  # not connected yet
    clock.event("connection.connect_tcp.complete")
    clock.event("connection.start_tls.started")
    clock.event("connection.start_tls.complete")
    clock.event("http2.send_connection_init.started")
    clock.event("http2.send_request_headers.started")
    assert clock.connected is not None and clock.sent is not None
    start, end = clock.connected
    assert 0.0 < start <= end <= clock.sent == clock.sent_at
    # a second connection within the attempt: the one that carried the request counts
    clock.event("connection.connect_tcp.started")
    assert clock.connected is None
    clock.event("connection.connect_tcp.complete")
    clock.event("http11.send_request_headers.started")
    assert clock.connected is not None and clock.connected[0] > start
