"""Recorded vLLM answers replayed through both shells: the sync ``DDTreeClient`` and the
async load runner, plain and streamed.

The bytes in ``tests/recorded/vllm/LEVEL/`` are what a real vLLM 0.32 server sent
(SmolLM2-135M-Instruct, temperature 0; n-gram speculation with
``--per-request-spec-decode-metrics detailed`` or ``summary``, or no speculation:
``none``), written by ``tests/recorded/record_vllm.py``; they are served here over
``httpx.MockTransport`` as recorded. The same checks against a live vLLM server are in
``tests/engines/test_vllm_stats.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_ddtree.checks.invariants import Expectation, check, unstated
from pytest_ddtree.measure.load import LoadPoint
from pytest_ddtree.measure.load.runner import completion_of, run_point
from pytest_ddtree.measure.sweep import Sample, summarize
from pytest_ddtree.report.arm_text import speculation_warnings
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion
from pytest_ddtree.wire.protocol import EndpointConfig

RECORDED = Path(__file__).parents[1] / "recorded" / "vllm"
LEVELS = ("detailed", "summary", "none")
SPEC = "metrics.speculative_decoding"
EOS = "the model's own end-of-sequence (choices[0].stop_reason is null)"


def recording(level: str, name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RECORDED / level / f"{name}.json").read_text())
    return data


def names(level: str) -> list[str]:
    return sorted(p.stem for p in (RECORDED / level).glob("*.json") if p.stem != "server")


class Replay:
    """A mock vLLM: answers every POST with one recorded response, byte for byte."""

    def __init__(self, record: dict[str, Any], body: str | None = None) -> None:
        self.record = record
        self.body = (record["body"] if body is None else body).encode()
        self.sent: list[dict[str, Any]] = []

    def _response(self, request: httpx.Request, async_body: bool) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "smollm2"}]})
        self.sent.append(json.loads(request.content))
        headers = {"content-type": self.record["content_type"]}
        data = self.body
        if async_body:

            async def chunks() -> AsyncIterator[bytes]:
                yield data

            return httpx.Response(self.record["status"], content=chunks(), headers=headers)

        def sync_chunks() -> Iterator[bytes]:
            yield data

        return httpx.Response(self.record["status"], content=sync_chunks(), headers=headers)

    def sync(self) -> httpx.MockTransport:
        return httpx.MockTransport(lambda r: self._response(r, False))

    def async_(self) -> httpx.MockTransport:
        return httpx.MockTransport(lambda r: self._response(r, True))


def both_shells(record: dict[str, Any], body: str | None = None) -> list[Completion]:
    """The recorded answer read by the sync client and, streamed, by the load runner too."""
    req = record["request"]
    stream = bool(req.get("stream"))
    chat = record["path"].endswith("/chat/completions")
    prompt = req["messages"][-1]["content"] if chat else req["prompt"]
    fields = {k: v for k, v in req.items() if k in ("stop", "stop_token_ids")}
    replay = Replay(record, body)
    config = EndpointConfig(
        "http://vllm.invalid/v1", model="smollm2", api="chat" if chat else "completions"
    )
    with DDTreeClient(config, transport=replay.sync()) as client:
        out = [client.request(prompt, max_tokens=req["max_tokens"], stream=stream, **fields)]
    if stream:
        spec = config.spec(prompt, tree_budget=None, max_tokens=req["max_tokens"], extra=fields)
        raws, *_ = asyncio.run(
            run_point(config, [spec], LoadPoint("concurrency", 1), transport=replay.async_())
        )
        out.append(completion_of(raws[0], dialect="auto"))
    # the plugin asks a stream for its usage, where vLLM puts its statistics
    assert all(b.get("stream_options", {}).get("include_usage") for b in replay.sent if stream)
    return out


def spec_block(record: dict[str, Any]) -> Any:
    """The recorded ``metrics`` of a plain answer or of a stream's last chunk."""
    body = record["body"]
    if not record["request"].get("stream"):
        return json.loads(body).get("metrics", "absent")
    chunks = [json.loads(ln[6:]) for ln in body.splitlines() if ln.startswith("data: {")]
    return chunks[-1].get("metrics", "absent")


def stats_codes(c: Completion) -> list[str]:
    return [v.code for v in check(c) if v.code.startswith("stats") or v.code == "budget-mismatch"]


# ---------------------------------------------------------------- shapes


@pytest.mark.parametrize("level", LEVELS)
def test_recorded_shapes_are_vllms(level: str) -> None:
    """What the recordings hold, so that the replay tests below test vLLM's real shapes."""
    for name in names(level):
        record = recording(level, name)
        metrics = spec_block(record)
        streamed = bool(record["request"].get("stream"))
        usage = bool(record["request"].get("stream_options", {}).get("include_usage"))
        if streamed and not usage:  # no usage chunk, so no statistics at all
            assert metrics == "absent", name
            continue
        if level == "none":  # no speculation: metrics null, and none on the usage chunk
            assert metrics == ("absent" if streamed else None), name
            continue
        spec = metrics["speculative_decoding"]
        if streamed:  # only on the final usage chunk, which has no choices
            chunks = [json.loads(ln[6:]) for ln in record["body"].splitlines() if "{" in ln]
            assert chunks[-1]["choices"] == [] and "usage" in chunks[-1], name
            assert all("metrics" not in c or c["metrics"] is None for c in chunks[:-1]), name
        if level == "summary":
            if streamed:
                assert "per_step_accepted" not in spec and "per_step_drafted" not in spec
            else:
                assert spec["per_step_accepted"] is None and spec["per_step_drafted"] is None
        else:
            assert len(spec["per_step_accepted"]) == spec["num_spec_steps"], name


# ---------------------------------------------------------------- statistics


@pytest.mark.parametrize("level", ["detailed", "summary"])
def test_recorded_statistics_pass_every_check_in_both_shells(level: str) -> None:
    for name in names(level):
        record = recording(level, name)
        for c in both_shells(record):
            assert c.error is None, (name, c.error)
            if spec_block(record) == "absent":  # a stream without usage: nothing to read
                assert c.stats is None and c.speculation_reported is False, name
                continue
            s = c.stats
            assert s is not None and s.dialect == "vllm", name
            assert c.speculation_reported is True
            assert s.acceptance_histogram is not None and sum(s.acceptance_histogram) == (
                s.decode_rounds
            )
            assert s.depth_source == f"{SPEC}.acceptance_histogram"
            assert stats_codes(c) == [], (name, [v.message for v in check(c)])


def test_recorded_answers_hold_tokens_no_speculative_step_made() -> None:
    """The reason the old invariant failed on vLLM: the speculative steps commit fewer
    tokens than came back (the prefill's first token, steps whose drafter found no match),
    and after a stop the last step counted more tokens than the answer kept."""
    fewer = cut = 0
    for level in ("detailed", "summary"):
        for name in names(level):
            record = recording(level, name)
            metrics = spec_block(record)
            if not isinstance(metrics, dict):
                continue
            spec = metrics["speculative_decoding"]
            (c,) = both_shells(record)[:1]
            n = c.completion_tokens
            assert n is not None
            committed = spec["num_spec_steps"] + spec["num_accepted_draft_tokens"]
            fewer += committed < n - 1
            cut += committed > n - 1
    assert fewer and cut


def test_recorded_stop_token_cut_inside_the_last_step() -> None:
    # the stop token came inside the last step: it counted its 4 tokens, the answer kept 3
    record = recording("detailed", "chat_plain_stop_token")
    spec = spec_block(record)["speculative_decoding"]
    (c,) = both_shells(record)
    assert c.completion_tokens is not None
    assert spec["num_spec_steps"] + spec["num_accepted_draft_tokens"] > c.completion_tokens - 1
    assert stats_codes(c) == []


def _tampered(record: dict[str, Any], change: dict[str, Any]) -> str:
    """The recorded body with fields of its statistics replaced (the rest byte for byte)."""
    body = record["body"]
    spec = spec_block(record)["speculative_decoding"]
    old = json.dumps(spec, separators=(",", ":"))
    assert old in body  # vLLM writes compact JSON
    return body.replace(old, json.dumps({**spec, **change}, separators=(",", ":")))


@pytest.mark.parametrize("name", ["chat_plain_length", "chat_stream_length"])
def test_recorded_answer_claiming_more_tokens_is_stats_inflated(name: str) -> None:
    record = recording("detailed", name)
    spec = spec_block(record)["speculative_decoding"]
    steps, k = spec["num_spec_steps"], spec["num_spec_tokens"]
    claim = {  # every step accepted all its drafts: consistent in itself, not with the answer
        "per_step_accepted": [k] * steps,
        "per_step_drafted": [k] * steps,
        "acceptance_histogram": [0] * k + [steps],
        "num_accepted_draft_tokens": k * steps,
        "num_draft_tokens": k * steps,
        "mean_acceptance_length": k + 1.0,
        "draft_acceptance_rate": 1.0,
    }
    for c in both_shells(record, _tampered(record, claim)):
        found = [v for v in check(c) if v.code.startswith("stats")]
        assert [v.code for v in found] == ["stats-inflated"], [v.message for v in found]
        assert found[0].evidence["spec_step_tokens"] == steps * (k + 1)
        assert found[0].evidence["completion_tokens"] == c.completion_tokens


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"mean_acceptance_length": 3.5}, "mean_acceptance_length is 3.5, but 1 + "),
        ({"draft_acceptance_rate": 0.99}, "draft_acceptance_rate is 0.99, but "),
        ({"num_spec_steps": 1000}, "counts "),
        ({"per_step_drafted": [0]}, "per_step_drafted is not a list of integers as long"),
    ],
)
def test_recorded_answer_with_inconsistent_statistics_is_caught(
    change: dict[str, Any], says: str
) -> None:
    record = recording("detailed", "chat_plain_length")
    (c,) = both_shells(record, _tampered(record, change))
    found = [v for v in check(c) if v.code == "stats-inconsistent"]
    assert any(says in v.message for v in found), [v.message for v in found]


# ---------------------------------------------------------------- no speculation


def test_recorded_target_only_server_is_named_as_sending_no_statistics() -> None:
    samples = []
    for name in names("none"):
        record = recording("none", name)
        for i, c in enumerate(both_shells(record)):
            assert c.error is None and c.stats is None, name
            # asked (the stream for its usage chunk too), and nothing came back
            assert c.speculation_reported is False, name
            assert stats_codes(c) == []
            samples.append(Sample.from_completion(c, check(c), round=i))
    budgets = summarize(samples).budgets
    assert [b.no_spec_stats for b in budgets] == [True]
    assert speculation_warnings(budgets)[0].startswith(
        "no speculative statistics came back: is speculation on?"
    )


def test_a_server_not_asked_for_statistics_is_not_warned_about() -> None:
    record = recording("none", "chat_plain_length")
    replay = Replay(record)
    config = EndpointConfig("http://vllm.invalid/v1", model="smollm2", dialect="none")
    with DDTreeClient(config, transport=replay.sync()) as client:
        c = client.chat("x", max_tokens=96)
    assert c.speculation_reported is None


# ---------------------------------------------------------------- which stop fired


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(
    ("name", "stop", "kind"),
    [
        ("chat_plain_stop_string", "stop string 'dog.' (choices[0].stop_reason)", "stop-string"),
        ("chat_stream_stop_string", "stop string 'dog.' (choices[0].stop_reason)", "stop-string"),
        ("chat_plain_stop_token", "token {id} (choices[0].stop_reason)", "stop-token"),
        ("chat_stream_stop_token", "token {id} (choices[0].stop_reason)", "stop-token"),
        ("chat_plain_eos", EOS, "end-of-sequence"),
        ("chat_stream_eos", EOS, "end-of-sequence"),
        ("completion_stream", EOS, "end-of-sequence"),
    ],
)
def test_recorded_early_stop_names_the_stop_that_fired(
    level: str, name: str, stop: str, kind: str
) -> None:
    record = recording(level, name)
    token = (record["request"].get("stop_token_ids") or [None])[0]
    for c in both_shells(record):
        assert c.finish_reason == "stop"
        found = [v for v in check(c, Expectation(min_tokens=200)) if v.code == "early-stop"]
        assert len(found) == 1, name
        assert found[0].evidence["stop"] == stop.format(id=token)
        assert found[0].evidence["stop_kind"] == kind


@pytest.mark.parametrize("level", LEVELS)
def test_recorded_length_answers_name_the_null_stop_reason(level: str) -> None:
    for c in both_shells(recording(level, "chat_stream_length")):
        assert c.finish_reason == "length"
        assert (c.stop_reason, c.stop_field) == (None, "choices[0].stop_reason")


def test_what_vllm_does_not_promise_is_said() -> None:
    note = unstated("vllm")
    assert note is not None and "num_spec_steps" in note and "prefill" in note
    assert unstated("ddtree") is None


# ---------------------------------------------------------------- stop sequences


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("name", ["chat_plain_stop_string", "chat_stream_stop_string"])
def test_recorded_stop_string_answers_keep_the_stop_promise(level: str, name: str) -> None:
    # vLLM trims "dog." from the text and counts its tokens in completion_tokens
    for c in both_shells(recording(level, name)):
        assert c.request.body["stop"] == ["dog."]
        assert (c.finish_reason, c.stop_reason) == ("stop", "dog.")
        assert "dog." not in c.text
        assert [v for v in check(c, min_tokens=1) if v.code == "stop-sequence"] == []


@pytest.mark.parametrize("level", LEVELS)
def test_a_recorded_answer_that_goes_past_its_stop_is_caught(level: str) -> None:
    record = recording(level, "chat_plain_stop_string")
    text = json.loads(record["body"])["choices"][0]["message"]["content"]
    went_on = record["body"].replace(
        json.dumps(text), json.dumps(text + "dog. The quick brown fox"), 1
    )
    assert went_on != record["body"]
    (c,) = both_shells(record, went_on)
    (v,) = [v for v in check(c, min_tokens=1) if v.code == "stop-sequence"]
    assert v.message == (
        f"the content holds the stop sequence 'dog.' at character {len(text)} and 20 "
        "character(s) after it: the answer went on past the stop (finish_reason 'stop', "
        "choices[0].stop_reason names 'dog.')"
    )
