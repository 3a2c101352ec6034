"""One decode rate: the sweep's and the load's figures come from one formula.

A hand-built stream where the two former formulas disagreed: the first content event
carries several tokens, and the server's usage counts a stop token no event carries
(decoded after the last content event, before the last byte).
"""

from __future__ import annotations

import json

import pytest

from pytest_ddtree.measure.load import LoadPoint
from pytest_ddtree.measure.load.runner import RawRequest, completion_of, validate
from pytest_ddtree.measure.sample import SERIAL, Sample
from pytest_ddtree.reference import tokenizer_path
from pytest_ddtree.wire.completion import RequestSpec, decode_rate
from pytest_ddtree.wire.tokens import load_counter

FIRST = "The quick brown"


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _delta(content: str) -> dict[str, object]:
    return {"id": "x", "model": "m", "choices": [{"index": 0, "delta": {"content": content}}]}


def _raw(tokens: int) -> RawRequest:
    """Sent at 10.0; content events at 10.5, 10.6 and 10.7; the stop and usage at 10.8."""
    spec = RequestSpec(
        api="chat",
        url="http://127.0.0.1:1/v1/chat/completions",
        body={"model": "m"},
        tree_budget=16,
        stream=True,
        max_tokens=64,
        temperature=0.0,
        prompt_id="p",
    )
    last = {
        "id": "x",
        "model": "m",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": tokens + 5},
    }
    chunks = [_event(_delta(FIRST)), _event(_delta(" fox")), _event(_delta(" jumps"))]
    chunks += [_event(last) + b"data: [DONE]\n\n"]
    return RawRequest(
        spec=spec,
        sent=10.0,
        headers_at=10.1,
        done=10.8,
        status=200,
        content_type="text/event-stream",
        chunks=chunks,
        stamps=[10.5, 10.6, 10.7, 10.8],
        complete=True,
    )


def test_the_decode_rate_counts_the_first_events_tokens_and_the_stop_tokens_time() -> None:
    counter = load_counter(str(tokenizer_path()))
    first = counter.count(FIRST)
    assert first > 1  # the case the load's former "- 1" got wrong
    # the first event's tokens, " fox", " jumps" and a stop token no event carries
    raw = _raw(first + 3)
    completion = completion_of(raw, dialect="none", counter=counter)
    assert completion.timings.first_chunk_tokens == first
    # three tokens after the first event, over the 0.3 s from it to the last byte (the
    # former sweep figure, 3 / 0.2 s = 15, left the stop token's time out; the former
    # load figure, (first + 2) / 0.3 s, counted the first event's tokens but one)
    assert completion.decode_tokens_per_second == pytest.approx(10.0)
    sweep = Sample.from_completion(completion, [], round=0)
    (load,) = validate([raw], LoadPoint("concurrency", 1), 0.0, 0.0, judge=None, counter=counter)
    assert sweep.decode_tokens_per_second == pytest.approx(10.0)
    assert load.tpot == pytest.approx(0.1)


def test_the_sweep_and_the_load_record_one_request_as_the_same_sample() -> None:
    counter = load_counter(str(tokenizer_path()))
    raw = _raw(counter.count(FIRST) + 3)
    completion = completion_of(raw, dialect="none", counter=counter)
    sweep = Sample.from_completion(completion, [], round=0)
    c1 = LoadPoint("concurrency", 1)
    (load,) = validate([raw], c1, 0.0, 0.0, judge=None, counter=counter, dialect="none")
    # the load's own figures apart, one request is one sample, under one set of names
    own = {"point", "start", "gaps", "error", "evidence", "server_ttft", "withheld", "worker"}
    assert {k: v for k, v in vars(load).items() if k not in own} == {
        k: v for k, v in vars(sweep).items() if k not in own
    }
    assert load.load_point == c1 == sweep.load_point == SERIAL
    assert load.end_to_end == pytest.approx(0.8) and load.point is not None


def test_a_stream_of_one_content_event_has_no_decode_rate() -> None:
    # nothing was seen decoding: the whole answer came at once
    assert decode_rate(40, 1, None) is None
    assert decode_rate(3, 3, 0.5) is None
    assert decode_rate(None, 1, 0.5) is None
    assert decode_rate(7, None, 0.5) == pytest.approx(12.0)
