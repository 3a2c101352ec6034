"""SGLang's REAL HTTP server, without speculation: its own bytes, read by the plugin.

The server is SGLang started on this machine's CPU (no speculative algorithm: its
n-gram speculation needs CPU-built kernels PyPI does not have). Its speculative
fields are tested on recorded answers from SGLang's own serializer in
``tests/core/test_sglang_recorded.py``; here everything is live:

- the ``sglang`` dialect told by ``matched_stop`` (SGLang sends no statistics
  without speculation, even when asked), then asked for statistics;
- ``matched_stop`` as SGLang sends it: the end-of-sequence id, a stop string, a
  ``stop_token_ids`` id, null at the length limit, named in early-stop evidence;
- ``/tokenize`` and ``/v1/tokenize`` (``tokens``, ``count``, ``max_model_len``) and
  ``/detokenize`` (``text``): exact counts, equal to ``usage.completion_tokens``;
- streams with and without ``include_usage``, through both shells;
- ``/metrics``: the request and token counters grow by what was sent, the
  speculative gauges are read as gauges.

The server comes from ``engines.start_sglang`` (``DDTREE_SGLANG_PYTHON``: the
interpreter of SGLang's virtualenv); without it every test here skips, naming what
is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pytest_ddtree import engines
from pytest_ddtree.checks.invariants import check
from pytest_ddtree.core.dialects.sglang import DETAILS_FIELD
from pytest_ddtree.core.settings import Timeout
from pytest_ddtree.measure.load import LoadPoint
from pytest_ddtree.measure.load.runner import completion_of, run_point
from pytest_ddtree.wire import servermetrics
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.protocol import EndpointConfig
from pytest_ddtree.wire.tokens import ServerCounter, detect_tokenize_shape

FRANCE = "What is the capital of France?"
ESSAY = "Write a long essay about rivers and the valleys they shape."
FOX = "Repeat this sentence three times: the quick brown fox jumps over the lazy dog."
EOS_ID = 2  # SmolLM2's <|im_end|>
Server = engines.EngineProcess
# one thread on a shared 2-core machine: a token may take seconds
PATIENT = Timeout(connect=30.0, read=300.0, total=900.0)


@pytest.fixture(scope="module")
def sglang_server() -> Iterator[engines.EngineProcess]:
    """SGLang's real server, target only (``engines.start_sglang``); or one already
    running target only at ``DDTREE_SGLANG_URL`` (its root), left running afterwards."""
    url = os.environ.get("DDTREE_SGLANG_URL")
    if url:
        yield engines.EngineProcess("sglang", url.rstrip("/"), "smollm2", "none", Path(), [])
        return
    why = engines.sglang_missing()
    if why is not None:
        pytest.skip(why)
    server = engines.start_sglang(port=random.randint(20000, 29999), timeout=600.0)
    try:
        yield server
    finally:
        server.stop()


def _config(server: Server, dialect: str = "auto") -> EndpointConfig:
    return EndpointConfig(
        server.base_url, model="smollm2", dialect=dialect, max_tokens=48, timeout=PATIENT
    )


def test_real_sglang_dialect_told_by_matched_stop_then_asked(
    sglang_server: Server,
) -> None:
    with DDTreeClient(_config(sglang_server)) as client:
        first = client.chat(FRANCE, stream=False)
        assert client.detected_dialect == "sglang"
        second = client.chat(FRANCE, stream=False)
    assert first.error is None and second.error is None
    assert DETAILS_FIELD not in first.request.body
    assert second.request.body[DETAILS_FIELD] is True
    # asked, a server without speculation sends no statistics at all
    assert isinstance(second.raw, dict) and "sglext" not in second.raw
    assert second.stats is None
    assert second.usage is not None and second.usage.reasoning_tokens == 0


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_real_sglang_matched_stop(sglang_server: Server, stream: bool) -> None:
    config = _config(sglang_server, "sglang")
    with DDTreeClient(config) as client:
        eos = client.chat(FRANCE, stream=stream)
        string = client.chat(FOX, stream=stream, stop=["dog."])
        token = client.chat(FOX, stream=stream, stop_token_ids=[16438])  # " fox"
        length = client.chat(FOX, stream=stream, max_tokens=5)
    assert (eos.finish_reason, eos.stop_reason, eos.stop_field) == (
        "stop",
        EOS_ID,
        "choices[0].matched_stop",
    )
    assert (string.stop_reason, string.stop_field) == ("dog.", "choices[0].matched_stop")
    assert "dog." not in string.text  # SGLang cuts the stop string from the text
    assert (token.stop_reason, token.stop_field) == (16438, "choices[0].matched_stop")
    assert length.finish_reason == "length"
    assert (length.stop_reason, length.stop_field) == (None, "choices[0].matched_stop")


def test_real_sglang_matched_stop_in_early_stop_evidence(
    sglang_server: Server,
) -> None:
    config = _config(sglang_server, "sglang")
    root = sglang_server.root_url
    with DDTreeClient(config) as client:
        eos = client.chat(FRANCE, stream=False)
        string = client.chat(FOX, stream=False, stop=["dog."])
    with httpx.Client(timeout=120) as http:
        counter = ServerCounter(root, http, shape="sglang", model="smollm2")
        (v,) = [v for v in check(eos, counter=counter, min_tokens=40) if v.code == "early-stop"]
        assert v.evidence["stop"] == "token 2 '<|im_end|>' (choices[0].matched_stop)"
        assert v.evidence["stop_kind"] == "end-of-sequence"
        (w,) = [w for w in check(string, counter=counter, min_tokens=40) if w.code == "early-stop"]
        assert w.evidence["stop"] == "stop string 'dog.' (choices[0].matched_stop)"


def test_real_sglang_tokenize_shapes_and_exact_counts(sglang_server: Server) -> None:
    root = sglang_server.root_url
    with httpx.Client(timeout=120) as http:
        for path in ("/tokenize", "/v1/tokenize"):
            body = {"model": "smollm2", "prompt": "1, 2, 3", "add_special_tokens": False}
            answer = http.post(root + path, json=body).json()
            assert set(answer) == {"tokens", "count", "max_model_len"}
            assert answer["count"] == len(answer["tokens"]) == 7
            assert answer["max_model_len"] == 2048
        detok = http.post(root + "/detokenize", json={"tokens": answer["tokens"]}).json()
        assert detok == {"text": "1, 2, 3"}
        probe = detect_tokenize_shape(root, http, model="smollm2")
        assert probe.shape is not None and probe.warning is None
        counter = ServerCounter(root, http, shape=probe.shape, model="smollm2")
        sglang_shape = ServerCounter(root, http, shape="sglang", model="smollm2")
        with DDTreeClient(_config(sglang_server, "sglang")) as client:
            # cut at the length limit: every completion token is in the text
            answer_c = client.chat(ESSAY, stream=False, max_tokens=24)
        assert answer_c.finish_reason == "length" and answer_c.usage is not None
        assert counter.count(answer_c.text) == answer_c.usage.completion_tokens == 24
        assert sglang_shape.count(answer_c.text) == 24
        assert sglang_shape.decode_token(EOS_ID) == "<|im_end|>"


def test_real_sglang_streams_with_and_without_usage_on_both_shells(
    sglang_server: Server,
) -> None:
    config = _config(sglang_server, "sglang")
    with DDTreeClient(config) as client:
        sync = client.chat(FOX, stream=True, stop=["dog."])
        bare = client.chat(FOX, stream=True, stop=["dog."], stream_options=None)
    spec = config.spec(FOX, tree_budget=None, max_tokens=48, extra={"stop": ["dog."]})
    raws, *_ = asyncio.run(run_point(config, [spec], LoadPoint("concurrency", 1)))
    loaded = completion_of(raws[0], dialect="sglang")
    for c in (sync, loaded):
        assert c.error is None and c.stream is not None and c.stream.usage_seen
        assert (c.stop_reason, c.stop_field) == ("dog.", "choices[0].matched_stop")
        assert c.stats is None  # no speculation: no sglext chunk, though asked
    assert (sync.text, sync.usage) == (loaded.text, loaded.usage)
    verdicts = [sorted(v.code for v in check(c)) for c in (sync, loaded)]
    assert verdicts[0] == verdicts[1] == []
    # without include_usage SGLang sends no usage at all
    assert bare.error is None and bare.usage is None
    assert bare.stream is not None and not bare.stream.usage_seen
    chunks = bare.raw if isinstance(bare.raw, list) else []
    assert not any("sglext" in c for c in chunks)


def test_real_sglang_metrics_counters_and_gauges(sglang_server: Server) -> None:
    log = servermetrics.open_log(None, sglang_server.base_url)
    assert log.reader.active, log.reader.status
    assert "gauges, read as gauges, never differenced" in log.reader.status
    before = log.before()
    assert before is not None
    with DDTreeClient(_config(sglang_server, "sglang")) as client:
        sent = [client.chat(FOX, stream=s, max_tokens=10) for s in (False, True)]
    record = log.after(
        before, scope="sweep", test="t", tree_budget=None, label="r", stats=[c.stats for c in sent]
    )
    assert record is not None and record.settled and record.shared is None
    d = record.delta
    assert d.prefix == "sglang" and d.requests == 2
    assert d.generation_tokens == sum(c.usage.completion_tokens for c in sent if c.usage)
    assert d.prompt_tokens == sum(c.usage.prompt_tokens for c in sent if c.usage)
    # no speculation: no verify-step counter; the gauges stand at 0 and are said to be gauges
    assert d.drafts is None and d.acceptance_length is None
    assert d.gauges.get("spec_accept_length") == 0.0
    assert "never differenced" in json.dumps(d.to_json())
    lines = servermetrics.gauge_lines({None: d})
    assert lines and "gauges" in lines[0]
    log.reader.close()
