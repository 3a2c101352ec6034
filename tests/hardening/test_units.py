"""Unit-level hardening: the stream reader, bad values at start-up, the diagnosis of the
client's own failures, the length bound, and the report counters."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from pytest_ddtree.checks.diagnose import Diagnoser
from pytest_ddtree.checks.invariants import check
from pytest_ddtree.core.options import resolve
from pytest_ddtree.core.settings import MAX_BUDGET, MAX_MAX_TOKENS, SettingsError, Timeout
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.core.wording import Note
from pytest_ddtree.pytest_plugin import _guard
from pytest_ddtree.wire import _net
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import RequestSpec
from pytest_ddtree.wire.protocol import KEEP_ALL_CHUNKS, StreamDecoder

from ._hostile import HostileServer


def _sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\r\n\r\n"


def _content(text: str, **extra: object) -> bytes:
    return _sse({"choices": [{"index": 0, "delta": {"content": text}}], **extra})


# ------------------------------------------------------------ the stream reader


def test_a_long_stream_keeps_first_last_and_every_stats_chunk() -> None:
    reader = StreamDecoder("chat")
    n = KEEP_ALL_CHUNKS * 4
    for i in range(n):
        extra: dict[str, object] = {}
        if i == n // 2:
            extra["usage"] = {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}
        if i == n - 20:
            extra["timings"] = {"draft_n": 10, "draft_n_accepted": 7}
        reader.feed(_content(f"w{i} ", **extra))
    reader.feed(b"data: [DONE]\n\n")
    reader.close()
    kept = reader.kept()
    assert len(kept) < KEEP_ALL_CHUNKS + 20
    texts = [c["choices"][0]["delta"]["content"] for c in kept]
    assert texts[0] == "w0 " and texts[-1] == f"w{n - 1} "
    assert any("usage" in c for c in kept) and any("timings" in c for c in kept)
    assert texts == sorted(texts, key=lambda t: int(t[1:]))  # stream order
    info = reader.info("text/event-stream")
    assert info.events == n + 1 and info.done_seen
    assert info.chunks_dropped == n - len(kept)
    assert "".join(reader.text_parts) == "".join(f"w{i} " for i in range(n))


def test_invalid_utf8_is_found_at_its_byte_offset_whatever_the_chunking() -> None:
    bad = b'data: {"choices": [{"index": 0, "delta": {"content": "\xff!"}}]}\n\n'
    body = _content("caf") + bad + b"data: [DONE]\n\n"
    at = body.index(b"\xff")
    for size in (1, 2, 3, 7, len(body)):
        reader = StreamDecoder("chat")
        for i in range(0, len(body), size):
            reader.feed(body[i : i + size])
        reader.close()
        assert reader.bad_utf8 is not None and f"at byte {at} " in reader.bad_utf8, size
        assert "".join(reader.text_parts) == "caf\ufffd!"


def test_a_multibyte_character_split_across_reads_is_not_an_error() -> None:
    body = _content("café ☕ 𝄞") + b"data: [DONE]\n\n"
    reader = StreamDecoder("chat")
    for i in range(len(body)):
        reader.feed(body[i : i + 1])
    reader.close()
    assert reader.bad_utf8 is None
    assert "".join(reader.text_parts) == "café ☕ 𝄞"


# ------------------------------------------------------------ bad values at start-up


@pytest.mark.parametrize(
    ("cli", "needle"),
    [
        ({"ddtree_endpoint": "http://[::1/v1"}, "invalid endpoint 'http://[::1/v1' (from option"),
        ({"ddtree_endpoint": "http://u:p@[::1/v1"}, "invalid endpoint '<redacted URL>'"),
        ({"ddtree_endpoint": "http://127.0.0.1:99999/v1"}, "not a valid URL (Port out of range"),
        ({"ddtree_endpoint": "http://127.0.0.1:0/v1"}, "port 0"),
        ({"ddtree_baseline_endpoint": "http://[::1/v1"}, "invalid baseline-endpoint"),
        ({"ddtree_budgets": "99999999999"}, f"beyond any sane tree budget (at most {MAX_BUDGET})"),
        (
            {"ddtree_max_tokens": "99999999999999999999"},
            f"expected an integer between 1 and {MAX_MAX_TOKENS}",
        ),
        ({"ddtree_max_tokens": "9" * 400}, "invalid max-tokens"),
        ({"ddtree_max_response_bytes": "lots"}, "expected a byte count"),
        ({"ddtree_max_response_bytes": "12"}, "between 1KiB and 16GiB"),
        ({"ddtree_retry_429": "11"}, "expected an integer between 0 and 10"),
    ],
)
def test_bad_values_stop_the_run_in_one_line(cli: dict[str, object], needle: str) -> None:
    with pytest.raises(SettingsError) as info:
        resolve(cli, {}, {})
    message = str(info.value)
    assert needle in message, message
    assert "\n" not in message and len(message) < 300
    assert "u:p" not in message


def test_sizes_and_retries_parse() -> None:
    s = resolve({"ddtree_max_response_bytes": "512KiB", "ddtree_retry_429": "3"}, {}, {})
    assert (s.max_response_bytes, s.retry_429) == (512 * 1024, 3)
    d = resolve({}, {}, {})
    assert (d.max_response_bytes, d.retry_429) == (8 * 1024 * 1024, 0)


def test_keepalive_expiry_is_below_common_server_idle_timeouts() -> None:
    # llama.cpp's server and uvicorn close idle connections after 5 s
    assert _net.KEEPALIVE_EXPIRY < 5
    with DDTreeClient("http://127.0.0.1:1/v1") as client:
        assert client.socket_deadlines  # every socket read honours the total deadline


# ------------------------------------------------------------ length bound, diagnosis


def test_a_huge_answer_under_the_cap_is_an_overrun_by_length(
    hostile: Callable[..., HostileServer],
) -> None:
    server = hostile("huge")
    with DDTreeClient(
        server.base_url, model="hostile-model", max_response_bytes=16 * 1024 * 1024
    ) as client:
        comp = client.chat("Rivers?", max_tokens=96, stream=False)
    assert comp.ok and comp.usage is not None and comp.usage.completion_tokens == 96
    found = check(comp)
    # the repeated filler is also (rightly) degenerate; the overrun is what matters here
    assert found[0].code == "overrun", [v.format() for v in found]
    assert "more than max_tokens=96 tokens can decode to" in found[0].message
    assert "usage-mismatch" not in {v.code for v in found}


def _spec() -> RequestSpec:
    return RequestSpec("chat", "http://h/v1/chat/completions", {}, 16, True, 96, 0.0)


def test_the_clients_own_failure_is_never_a_verdict(hostile: Callable[..., HostileServer]) -> None:
    server = hostile("trickle", interval=0.1, trickle_for=10)
    with DDTreeClient(
        server.base_url, model="hostile-model", timeout=Timeout(connect=1, read=5, total=0.5)
    ) as client:
        comp = client.chat("Rivers?", max_tokens=96, headers={"X-Hostile-Mode": "reset-before"})
        late = client.chat("Rivers?", max_tokens=96)
    replays: list[object] = []

    class Baseline:
        base_url = "http://baseline/v1"

        def replay(self, spec: RequestSpec) -> object:
            replays.append(spec)
            raise AssertionError("must not be replayed")

    diagnoser = Diagnoser(Baseline())  # type: ignore[arg-type]
    for c in (comp, late):
        assert c.client_side_failure, (c.error_kind, c.error)
        found = check(c)
        diagnosis = diagnoser.diagnose(c, found, check)
        assert diagnosis.blame == "undetermined", diagnosis
        assert "client's side" in diagnosis.reason
    assert comp.error_kind == "transport" and late.error_kind == "deadline"
    assert not replays


def test_no_claim_about_the_target_alone_without_a_baseline() -> None:
    from pytest_ddtree.wire.completion import Completion, Timings

    c = Completion(_spec(), 200, "x", "", "stop", None, None, Timings(0, 0, 0, 1), None)
    v = Violation("not-lossless", "differs")
    diagnosis = Diagnoser(None).diagnose(c, [v], lambda _: [])
    assert diagnosis.blame == "speculation"
    assert "target model alone" not in diagnosis.render()
    assert "no baseline" in diagnosis.render()


# ------------------------------------------------------------ counters in the report


def test_retries_and_counter_failures_reach_the_report_metadata() -> None:
    class Client:
        def transport_notes(self, *, benign: bool = True) -> list[Note]:
            return [Note("1 request(s) sent again on a fresh connection")]

        def transport_counts(self) -> dict[str, int]:
            return {"reuse_retries": 1}

    class Runtime:
        client = Client()
        baseline = None

    from pytest_ddtree.measure.sweep import RunMetadata

    meta = RunMetadata(notes=["Weakened run"])
    _guard.transport_metadata(meta, Runtime())
    assert meta.to_json()["transport"] == {"endpoint": {"reuse_retries": 1}}
    assert meta.notes == ["Weakened run", "1 request(s) sent again on a fresh connection"]
