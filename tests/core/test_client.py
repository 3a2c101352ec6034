"""The streaming client against a real reference server on loopback."""

from __future__ import annotations

import http.server
from collections.abc import Callable, Iterator
from socketserver import BaseServer

import pytest

from pytest_ddtree.core.settings import Timeout
from pytest_ddtree.reference import MODEL_ID, start_reference_server
from pytest_ddtree.wire.client import DDTreeClient, EndpointError, root_url
from pytest_ddtree.wire.completion import ErrorKind
from pytest_ddtree.wire.protocol import EndpointConfig

LONG = "Write a detailed essay about rivers and the towns along them."
SHORT = "What is the capital of France?"


@pytest.fixture
def client(reference_server, reference_counter) -> Iterator[DDTreeClient]:
    with DDTreeClient(reference_server.base_url, model=MODEL_ID, counter=reference_counter) as c:
        yield c


def test_streamed_request_timings_and_stats(client: DDTreeClient) -> None:
    c = client.chat(LONG, max_tokens=96, tree_budget=32, prompt_id="essay")
    assert c.ok, c.error
    assert c.finish_reason == "length"
    assert c.completion_tokens == 96
    # usage is there, so the client does not count (the invariants do, with the same counter)
    assert c.local_completion_tokens is None
    assert c.token_count_source == "usage"
    assert c.ttft is not None and 0 < c.ttft < c.end_to_end
    assert c.timings.headers is not None and c.timings.sent < c.timings.headers
    assert len(c.timings.chunk_times) >= 2
    assert c.timings.chunk_tokens == ()  # per-chunk counts only on request
    assert c.timings.first_chunk_tokens is not None and c.timings.first_chunk_tokens >= 1
    assert "".join(c.chunk_texts) == c.text
    assert len(c.chunk_texts) == len(c.timings.chunk_times)
    assert all(g >= 0 for g in c.timings.inter_chunk)
    assert c.decode_tokens_per_second is not None and c.decode_tokens_per_second > 0
    assert c.stats is not None and c.stats.dialect == "ddtree"
    assert c.stats.tree_budget == 32
    assert c.stats.decode_rounds is not None and c.stats.decode_rounds >= 1
    assert c.stats.mean_acceptance_length is not None and c.stats.mean_acceptance_length >= 1
    assert c.stream is not None and c.stream.done_seen and c.stream.finish_chunks == 1
    assert c.stream.usage_seen and not c.stream.parse_errors
    assert isinstance(c.raw, list) and c.raw[0]["object"] == "chat.completion.chunk"
    assert c.request.body["tree_budget"] == 32
    assert c.request.prompt_id == "essay"
    assert client.detected_dialect == "ddtree"


def test_plain_request_matches_stream_at_temperature_zero(client: DDTreeClient) -> None:
    streamed = client.chat(LONG, max_tokens=64, tree_budget=64)
    plain = client.chat(LONG, max_tokens=64, tree_budget=64, stream=False)
    assert plain.ok, plain.error
    assert plain.text == streamed.text
    assert plain.finish_reason == streamed.finish_reason
    assert plain.ttft is None and plain.end_to_end > 0
    assert plain.stream is None
    assert plain.raw["object"] == "chat.completion"
    assert plain.usage is not None and plain.usage.completion_tokens == 64


def test_short_answer_stops_and_completions_api(client: DDTreeClient) -> None:
    c = client.chat(SHORT, max_tokens=128)
    assert c.ok and c.finish_reason == "stop"
    assert 0 < (c.completion_tokens or 0) < 128
    raw = client.complete("The river", max_tokens=32, stream=True)
    assert raw.ok, raw.error
    assert raw.request.url.endswith("/v1/completions")
    assert raw.text and raw.completion_tokens == 32


def test_http_error_is_recorded_not_raised(client: DDTreeClient) -> None:
    c = client.chat(LONG, max_tokens=16, tree_budget=999999)
    assert not c.ok
    assert c.status_code == 400
    assert c.error is not None and c.error.startswith("HTTP 400")
    plain = client.chat(LONG, max_tokens=16, tree_budget=999999, stream=False)
    assert plain.status_code == 400 and plain.error is not None
    # the server's own message is kept apart from the words that say it with the status
    for answer in (c, plain):
        assert answer.server_message and "tree_budget" in answer.server_message
        assert answer.error == f"HTTP 400: {answer.server_message}"


def test_misuse_raises(client: DDTreeClient) -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        client.chat(LONG, max_tokens=0)
    with pytest.raises(TypeError):
        client.request([{"role": "user", "content": "x"}], api="completions")


def test_budget_field_dotted_path_and_none_mode(reference_server) -> None:
    with DDTreeClient(reference_server.base_url, budget_field="extra.ddtree.budget") as c:
        comp = c.chat(LONG, max_tokens=8, tree_budget=16)
        assert comp.request.body["extra"] == {"ddtree": {"budget": 16}}
        assert "tree_budget" not in comp.request.body
    with DDTreeClient(reference_server.base_url, budget_mode="none") as c:
        comp = c.chat(LONG, max_tokens=8, tree_budget=16)
        assert "tree_budget" not in comp.request.body


def test_budget_endpoints_mode_routes_by_budget() -> None:
    with (
        start_reference_server(simulated_latency=False, default_tree_budget=16) as s16,
        start_reference_server(simulated_latency=False, default_tree_budget=128) as s128,
        DDTreeClient(
            s16.base_url,
            budget_mode="endpoints",
            budget_endpoints={16: s16.base_url, 128: s128.base_url},
        ) as c,
    ):
        a = c.chat(LONG, max_tokens=32, tree_budget=16)
        b = c.chat(LONG, max_tokens=32, tree_budget=128)
        assert a.request.url.startswith(s16.base_url)
        assert b.request.url.startswith(s128.base_url)
        assert "tree_budget" not in b.request.body
        assert a.stats is not None and a.stats.tree_budget == 16
        assert b.stats is not None and b.stats.tree_budget == 128
        with pytest.raises(ValueError, match="no endpoint for tree_budget 64"):
            c.chat(LONG, max_tokens=8, tree_budget=64)


@pytest.mark.parametrize(("dialect", "has_budget"), [("vllm", False), ("omlx", True)])
def test_other_dialects_end_to_end(dialect: str, has_budget: bool) -> None:
    with (
        start_reference_server(simulated_latency=False, stats_dialect=dialect) as server,
        DDTreeClient(server.base_url) as c,
    ):
        for stream in (True, False):
            comp = c.chat(LONG, max_tokens=48, tree_budget=32, stream=stream)
            assert comp.ok, comp.error
            assert comp.stats is not None and comp.stats.dialect == dialect
            assert comp.stats.decode_rounds is not None and comp.stats.decode_rounds > 0
            assert comp.stats.mean_acceptance_length is not None
            assert (comp.stats.tree_budget == 32) is has_budget
        assert c.detected_dialect == dialect


def test_list_models_and_root(client: DDTreeClient) -> None:
    assert client.list_models() == [MODEL_ID]
    assert root_url("http://h:1/v1/") == "http://h:1"
    assert root_url("http://h:1/api") == "http://h:1/api"


def test_unreachable_endpoint_is_one_line() -> None:
    timeout = Timeout(connect=1, read=1, total=2)
    with DDTreeClient("http://127.0.0.1:9/v1", timeout=timeout) as c:
        with pytest.raises(EndpointError) as info:
            c.list_models()
        assert "cannot connect" in str(info.value) and "\n" not in str(info.value)
        comp = c.chat(LONG, max_tokens=8)
        assert not comp.ok and comp.status_code == 0 and comp.error


class _Unauthorized(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"error": {"message": "bad key", "type": "auth", "code": 401}}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_unauthorized_says_which_option(loopback: Callable[[BaseServer], str]) -> None:
    url = loopback(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unauthorized)) + "/v1"
    with (
        DDTreeClient(url, api_key="sk-do-not-print") as c,
        pytest.raises(EndpointError) as info,
    ):
        c.list_models()
    assert "401" in str(info.value) and "--ddtree-api-key" in str(info.value)
    assert "sk-do-not-print" not in str(info.value)


def test_read_timeout_on_a_hanging_stream(reference_server) -> None:
    timeout = Timeout(connect=2, read=0.5, total=5)
    with DDTreeClient(reference_server.base_url, timeout=timeout) as c:
        comp = c.chat(LONG, max_tokens=64, headers={"X-DDTree-Fault": "hang"})
    assert not comp.ok
    assert comp.error is not None and "read timeout" in comp.error
    assert comp.end_to_end < 4
    assert comp.request.headers == {"X-DDTree-Fault": "hang"}


def test_api_key_is_sent_but_not_recorded(reference_server) -> None:
    with DDTreeClient(reference_server.base_url, api_key="sk-secret-xyz") as c:
        comp = c.chat(LONG, max_tokens=8)
        assert c.http.headers["Authorization"] == "Bearer sk-secret-xyz"
    assert "sk-secret-xyz" not in repr(comp.request)


def test_a_stalling_endpoint_trips_the_breaker(reference_server) -> None:
    timeout = Timeout(connect=2, read=0.3, total=5)
    hang = {"X-DDTree-Fault": "hang"}
    with DDTreeClient(reference_server.base_url, timeout=timeout) as c:
        first = c.chat(LONG, max_tokens=64, headers=hang)
        second = c.chat(LONG, max_tokens=64, headers=hang)
        third = c.chat(LONG, max_tokens=8)
    assert first.error is not None and first.error.startswith("read timeout")
    assert second.error is not None and second.error.startswith("read timeout")
    assert third.error is not None
    host = c.base_url.split("//", 1)[1].split("/", 1)[0]
    assert third.error.startswith(
        f"not sent: the endpoint at {host} stalled on 2 requests in a row"
    )
    assert third.end_to_end < 0.01


def test_a_healthy_answer_resets_the_breaker(reference_server) -> None:
    timeout = Timeout(connect=2, read=0.3, total=5)
    with DDTreeClient(reference_server.base_url, timeout=timeout) as c:
        assert c.chat(LONG, max_tokens=64, headers={"X-DDTree-Fault": "hang"}).error
        assert c.chat(LONG, max_tokens=8).ok
        assert c.chat(LONG, max_tokens=64, headers={"X-DDTree-Fault": "hang"}).error
        assert c.chat(LONG, max_tokens=8).ok


def test_total_deadline_is_named_as_such(reference_server) -> None:
    timeout = Timeout(connect=2, read=10, total=0.4)
    with DDTreeClient(reference_server.base_url, timeout=timeout) as c:
        comp = c.chat(LONG, max_tokens=64, headers={"X-DDTree-Fault": "hang"})
    assert (comp.error or "").startswith(
        "deadline: no complete response within the total deadline of 0.4s"
    )


def test_per_chunk_counts_on_request(reference_server, reference_counter) -> None:
    with DDTreeClient(reference_server.base_url, counter=reference_counter, count_chunks=True) as c:
        comp = c.chat(LONG, max_tokens=96, tree_budget=64)
    counts = comp.timings.chunk_tokens
    assert len(counts) == len(comp.timings.chunk_times)
    assert counts[0] == comp.timings.first_chunk_tokens
    assert 90 <= sum(counts) <= 110  # re-tokenised pieces, near the true count
    assert max(counts) > 1  # speculation commits several tokens per round


def test_local_count_when_the_server_sends_no_usage(reference_server, reference_counter) -> None:
    with DDTreeClient(reference_server.base_url, counter=reference_counter) as c:
        comp = c.chat(LONG, max_tokens=40, tree_budget=64, stream_options={"include_usage": False})
    assert comp.usage is None
    assert comp.local_completion_tokens == 40
    assert comp.completion_tokens == 40
    assert comp.token_count_source.startswith("tokenizer.json")


def test_runaway_answers_trip_the_guard_and_later_requests_say_why() -> None:
    """Two answers in a row cut at the byte cap: later requests are not sent, instead of
    each one reading the whole cap again."""
    from hardening._hostile import HostileServer

    with (
        HostileServer("endless", trickle_for=30) as server,
        DDTreeClient(server.base_url, max_response_bytes=64 * 1024) as c,
    ):
        first, second, third = (c.chat(LONG, max_tokens=8) for _ in range(3))
    assert first.error_kind == second.error_kind == ErrorKind.TOO_LARGE
    assert third.error_kind == ErrorKind.NOT_SENT and third.status_code == 0
    assert third.error is not None and "2 answers in a row past the byte cap" in third.error
    assert server.served == 2


def test_the_endpoint_configuration_keeps_the_key_out_of_its_repr() -> None:
    config = EndpointConfig("http://h/v1", api_key="sk-config-secret")
    assert "sk-config-secret" not in repr(config)
    assert config.headers()["Authorization"] == "Bearer sk-config-secret"
    spec = config.spec("hi", tree_budget=16, max_tokens=8)
    assert "sk-config-secret" not in repr(spec)


def test_a_model_list_that_never_comes_names_the_read_timeout(
    loopback: Callable[[BaseServer], str],
) -> None:
    import threading

    release = threading.Event()

    class Hung(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            release.wait(10)  # took the request; never answers

    url = loopback(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hung))
    host = url.split("//", 1)[1]
    try:
        timeout = Timeout(connect=5, read=0.5, total=10)
        with DDTreeClient(f"{url}/v1", timeout=timeout) as c, pytest.raises(EndpointError) as info:
            c.list_models()
    finally:
        release.set()
    # the connection was taken: not the connect timeout's 5 s, the read timeout's 0.5 s
    assert f"{host} accepted the connection but sent no byte in 0.5s (the read timeout)" in str(
        info.value
    )
