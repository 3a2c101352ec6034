"""SGLang's speculative fields, replayed from RECORDED answers of its real server.

SGLang's speculation cannot run on this CPU, so the files under
``tests/recorded/sglang/`` were recorded from SGLang's real HTTP server whose
scheduler counters were filled with invented values just before SGLang's own
``TokenizerManager`` read them (``tests/recorded/sglang/record.py`` and
``inject/sitecustomize.py`` say how). The numbers are invented; the field names,
nesting, types, the separate ``choices: []`` chunk that carries ``sglext`` and
SGLang's arithmetic on the counters are SGLang's own.

Each recording is served again, byte for byte, by a real HTTP server on loopback
and read by both shells (the sync ``DDTreeClient`` and the async load runner):
the same answer, the same statistics, the same verdicts. Nothing here needs an
engine. What SGLang's real server sends without speculation is tested against
the server itself in ``tests/engines/test_sglang_wire.py``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pytest_ddtree.checks.invariants import check
from pytest_ddtree.core.dialects.sglang import DETAILS_FIELD
from pytest_ddtree.measure.load import LoadPoint
from pytest_ddtree.measure.load.runner import completion_of, run_point
from pytest_ddtree.wire import dialects, servermetrics
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion
from pytest_ddtree.wire.protocol import EndpointConfig
from pytest_ddtree.wire.tokens import detokenize_text, parse_tokenize_answer

RECORDED = sorted((Path(__file__).parents[1] / "recorded" / "sglang").glob("sglang-*"))
DIR = RECORDED[-1] if RECORDED else Path("missing")


def recording(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DIR / f"{name}.json").read_text())
    return data


def _events(body: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[6:])
        for line in body.split("\n")
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


def recorded_details(rec: dict[str, Any]) -> dict[str, Any]:
    """The ``sglext.spec_tokens_details`` SGLang sent in a recording (plain or streamed)."""
    objects = _events(rec["body"]) if rec["request"].get("stream") else [json.loads(rec["body"])]
    found = [o["sglext"]["spec_tokens_details"] for o in objects if o.get("sglext")]
    assert len(found) == 1, "SGLang sends its statistics once per answer"
    details: dict[str, Any] = found[0]
    return details


def recorded_usage(rec: dict[str, Any]) -> dict[str, Any] | None:
    objects = _events(rec["body"]) if rec["request"].get("stream") else [json.loads(rec["body"])]
    usages = [o["usage"] for o in objects if isinstance(o.get("usage"), dict)]
    return usages[-1] if usages else None


def recorded_stop(rec: dict[str, Any]) -> Any:
    objects = _events(rec["body"]) if rec["request"].get("stream") else [json.loads(rec["body"])]
    finals = [c for o in objects for c in o.get("choices", []) if c.get("finish_reason")]
    assert len(finals) == 1
    return finals[0]["matched_stop"], finals[0]["finish_reason"]


@dataclass
class Replay:
    """A loopback HTTP server that answers every POST with one recording's bytes."""

    url: str
    current: dict[str, Any]
    bodies: list[dict[str, Any]]


@pytest.fixture
def replay() -> Iterator[Replay]:
    if not RECORDED:
        pytest.fail("no recordings under tests/recorded/sglang/")
    state = Replay("", {}, [])

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            state.bodies.append(json.loads(self.rfile.read(length)))
            rec = state.current
            body = rec["body"].encode()
            self.send_response(rec["status"])
            self.send_header("Content-Type", rec["headers"]["content-type"])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            # event by event, as the engine wrote them
            for piece in body.split(b"\n\n"):
                if piece:
                    self.wfile.write(piece + b"\n\n" if b"data: " in piece[:6] else piece)
                    self.wfile.flush()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _request_fields(rec: dict[str, Any]) -> dict[str, Any]:
    body = rec["request"]
    return {k: body[k] for k in ("stop", "stop_token_ids") if k in body}


def through_both(replay: Replay, name: str, dialect: str = "auto") -> list[Completion]:
    """The recording through the sync client and (streamed ones) through the load runner."""
    rec = recording(name)
    replay.current = rec
    stream = bool(rec["request"].get("stream"))
    body = rec["request"]
    config = EndpointConfig(replay.url, model="smollm2", dialect=dialect)
    extra = _request_fields(rec)
    with DDTreeClient(config) as client:
        out = [client.chat(body["messages"], max_tokens=body["max_tokens"], stream=stream, **extra)]
    if stream:
        spec = config.spec(
            body["messages"],
            tree_budget=None,
            max_tokens=body["max_tokens"],
            extra=extra,
            dialect=dialect,
        )
        raws, *_ = asyncio.run(run_point(config, [spec], LoadPoint("concurrency", 1)))
        out.append(completion_of(raws[0], dialect=dialect))
    return out


PLAIN = ["chat_plain_eos", "chat_plain_stop", "chat_plain_stop_token", "chat_plain_length"]
STREAMED = ["chat_stream_usage", "chat_stream_nousage", "chat_stream_eos"]


@pytest.mark.parametrize("name", PLAIN + STREAMED)
def test_recorded_sglang_statistics_read_as_sglang_sent_them(replay: Replay, name: str) -> None:
    rec = recording(name)
    details = recorded_details(rec)
    stop, finish = recorded_stop(rec)
    for c in through_both(replay, name):
        assert c.error is None, c.error
        s = c.stats
        assert s is not None and s.dialect == "sglang"
        assert s.decode_rounds == details["spec_verify_ct"]
        assert s.mean_acceptance_length == details["spec_accept_length"]
        assert s.num_draft_tokens == details["spec_num_proposed_drafts"]
        assert s.num_accepted_draft_tokens == details["spec_num_correct_drafts"]
        assert s.acceptance_histogram == tuple(details["spec_correct_drafts_histogram"])
        assert s.depth_source == "sglext.spec_tokens_details.spec_correct_drafts_histogram"
        # SGLang's proposed drafts are its verify steps times the drafts per step
        assert s.num_spec_tokens is not None
        assert s.num_spec_tokens * details["spec_verify_ct"] == details["spec_num_proposed_drafts"]
        assert c.finish_reason == finish
        if finish == "stop":
            assert (c.stop_reason, c.stop_field) == (stop, "choices[0].matched_stop")
        usage = recorded_usage(rec)
        if usage is None:
            assert c.usage is None
        else:
            assert c.usage is not None
            assert c.usage.completion_tokens == usage["completion_tokens"]
            # SGLang's reasoning count sits at the top of usage
            assert c.usage.reasoning_tokens == usage["reasoning_tokens"]


@pytest.mark.parametrize("name", PLAIN + STREAMED)
def test_recorded_sglang_same_verdicts_on_both_shells(replay: Replay, name: str) -> None:
    completions = through_both(replay, name)
    verdicts = [sorted((v.code, v.message) for v in check(c)) for c in completions]
    assert all(v == verdicts[0] for v in verdicts)
    # a healthy answer with SGLang's statistics: no statistics verdict
    assert [v for v in verdicts[0] if v[0].startswith("stats")] == []


def test_recorded_sglang_stream_sends_sglext_in_a_chunk_of_its_own() -> None:
    for name in ("chat_stream_usage", "chat_stream_nousage"):
        events = _events(recording(name)["body"])
        carriers = [e for e in events if "sglext" in e]
        assert len(carriers) == 1 and carriers[0]["choices"] == []
        usage_chunks = [e for e in events if isinstance(e.get("usage"), dict)]
        asked = "stream_options" in recording(name)["request"]
        assert asked == (name == "chat_stream_usage")  # both cases below are recorded
        # with include_usage, usage rides in a later chunk of its own; without, nowhere
        assert len(usage_chunks) == (1 if asked else 0)
        if asked:
            assert events.index(usage_chunks[0]) > events.index(carriers[0])


def test_recorded_sglang_the_sync_client_asks_for_statistics_once_identified(
    replay: Replay,
) -> None:
    replay.current = recording("chat_plain_eos")
    config = EndpointConfig(replay.url, model="smollm2")
    with DDTreeClient(config) as client:
        client.chat("hi", max_tokens=8, stream=False)
        assert client.detected_dialect == "sglang"
        client.chat("hi", max_tokens=8, stream=False)
    assert DETAILS_FIELD not in replay.bodies[0]
    assert replay.bodies[1][DETAILS_FIELD] is True


def test_recorded_sglang_generate_meta_info() -> None:
    rec = recording("generate")
    answer = json.loads(rec["body"])
    meta = answer["meta_info"]
    s = dialects.extract_stats("auto", [answer])
    assert s is not None and s.dialect == "sglang"
    assert s.decode_rounds == meta["spec_verify_ct"]
    assert s.acceptance_histogram == tuple(meta["spec_correct_drafts_histogram"])
    assert s.depth_source == "meta_info.spec_correct_drafts_histogram"
    # SGLang's accept length is its completion tokens over its verify steps
    assert s.mean_acceptance_length == pytest.approx(
        meta["completion_tokens"] / meta["spec_verify_ct"]
    )


def test_recorded_sglang_tokenize_and_detokenize() -> None:
    tok = json.loads(recording("tokenize")["body"])
    count, ids = parse_tokenize_answer(tok, "recorded /v1/tokenize")
    assert count == tok["count"] and ids == tok["tokens"]
    assert detokenize_text(json.loads(recording("detokenize")["body"])) is not None


def test_recorded_sglang_metrics_counters_and_gauges() -> None:
    before = servermetrics.parse(recording("metrics_before")["body"])
    after = servermetrics.parse(recording("metrics_after")["body"])
    assert after.prefix == "sglang"
    d = servermetrics.delta(before, after)
    answers = [n for n in PLAIN + STREAMED + ["generate"]]
    # every chat and /generate request finished between the two scrapes
    assert d.requests == len(answers)
    rounds = [recorded_details(recording(n))["spec_verify_ct"] for n in PLAIN + STREAMED]
    rounds.append(json.loads(recording("generate")["body"])["meta_info"]["spec_verify_ct"])
    # the verify-step counter grew by the per-request spec_verify_ct, summed
    assert d.drafts == sum(rounds)
    sums = servermetrics.RequestSums(None, None, sum(rounds))
    assert servermetrics.stats_disagreement(d, sums) == []
    off = servermetrics.RequestSums(None, None, sum(rounds) + 5)
    assert servermetrics.stats_disagreement(d, off)[0].startswith("verify steps:")
    # the speculative gauges are read as they stand, and said to be gauges
    assert set(d.gauges) >= {"spec_accept_length", "spec_accept_rate"}
    assert d.to_json()["gauges_note"] == servermetrics.GAUGES_NOTE
    assert d.acceptance_length is None  # no accepted-token counter to difference
    completion = sum(
        (recorded_usage(recording(n)) or {}).get("completion_tokens", 0) for n in PLAIN
    )
    assert d.generation_tokens is not None and d.generation_tokens >= completion


def _with_details(rec: dict[str, Any], **details: Any) -> dict[str, Any]:
    """``rec`` with its ``sglext.spec_tokens_details`` changed (the rest byte for byte)."""
    old = json.dumps(recorded_details(rec), separators=(",", ":"))
    new = json.dumps({**recorded_details(rec), **details}, separators=(",", ":"))
    assert rec["body"].count(old) == 1
    return {**rec, "body": rec["body"].replace(old, new)}


# the EOS answer (8 tokens) made consistent with itself but not with how SGLang counts
TOO_FEW = {
    "spec_verify_ct": 2,
    "spec_num_correct_drafts": 2,
    "spec_num_proposed_drafts": 6,
    "spec_accept_length": 4.0,
    "spec_correct_drafts_histogram": [1, 0, 1],
}
TOO_MANY = {
    "spec_verify_ct": 4,
    "spec_num_correct_drafts": 12,
    "spec_num_proposed_drafts": 12,
    "spec_accept_length": 2.0,
    "spec_correct_drafts_histogram": [0, 0, 0, 4],
}


@pytest.mark.parametrize(
    ("details", "wording"),
    [(TOO_FEW, "commit at most 5 tokens"), (TOO_MANY, "commit at least 14 tokens")],
    ids=["too-few-steps", "too-many-drafts"],
)
@pytest.mark.parametrize("name", ["chat_plain_eos", "chat_stream_eos"])
def test_recorded_sglang_bounds_catch_counts_sglang_cannot_make(
    replay: Replay, name: str, details: dict[str, Any], wording: str
) -> None:
    rec = recording(name)
    assert recorded_usage(rec) is not None and recorded_usage(rec)["completion_tokens"] == 8
    replay.current = _with_details(rec, **details)
    body = rec["request"]
    config = EndpointConfig(replay.url, model="smollm2")
    stream = bool(body.get("stream"))
    with DDTreeClient(config) as client:
        out = [client.chat(body["messages"], max_tokens=body["max_tokens"], stream=stream)]
    if stream:
        spec = config.spec(body["messages"], tree_budget=None, max_tokens=body["max_tokens"])
        raws, *_ = asyncio.run(run_point(config, [spec], LoadPoint("concurrency", 1)))
        out.append(completion_of(raws[0]))
    for c in out:
        bad = [v for v in check(c) if v.code.startswith("stats")]
        assert [v.code for v in bad] == ["stats-inconsistent"]
        assert wording in bad[0].message
        assert bad[0].evidence["completion_tokens"] == 8


def test_recorded_sglang_matched_stop_shapes(replay: Replay) -> None:
    """SGLang's ``matched_stop``: the end-of-sequence id, the stop string, the
    ``stop_token_ids`` id, null at the length limit; each read with its field named."""
    seen = {}
    for name in PLAIN:
        (c,) = through_both(replay, name)
        assert c.stop_field == "choices[0].matched_stop"
        seen[name] = (c.finish_reason, c.stop_reason)
    assert seen == {
        "chat_plain_eos": ("stop", 2),
        "chat_plain_stop": ("stop", "dog."),
        "chat_plain_stop_token": (
            "stop",
            recording("chat_plain_stop_token")["request"]["stop_token_ids"][0],
        ),
        "chat_plain_length": ("length", None),
    }


def test_sglang_detokenize_asked_again_for_a_special_token() -> None:
    """SGLang's /detokenize answers ``""`` for a special token unless
    ``skip_special_tokens`` is false (as its real server does; see the live tests):
    only then is it asked again, and a plain token is asked once."""
    import httpx

    from pytest_ddtree.wire.tokens import ServerCounter

    asked: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            asked.append(body)
            special = body["tokens"] == [2]
            text = "<|im_end|>" if special and body.get("skip_special_tokens") is False else ""
            data = json.dumps({"text": text if special else " fox"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with httpx.Client(timeout=10) as http:
            root = f"http://127.0.0.1:{server.server_address[1]}"
            counter = ServerCounter(root, http, shape="sglang", model="smollm2")
            assert counter.decode_token(16438) == " fox"
            assert len(asked) == 1 and "skip_special_tokens" not in asked[0]
            assert counter.decode_token(2) == "<|im_end|>"
            assert asked[-1]["skip_special_tokens"] is False and len(asked) == 3
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
