"""Each engine's statistics and stop fields, as its code sends them, read once by the
protocol core: through the sync client and through the load runner, streamed and not.

The bodies follow the engines' own response shapes (vLLM's per-request
``metrics.speculative_decoding`` in summary and detailed mode, SGLang's ``sglext``
for n=1 and n>1, llama.cpp's ``timings``): nothing on this machine runs vLLM or
SGLang, so these go over ``httpx.MockTransport``. The reference server and
llama.cpp are driven for real elsewhere (``tests/reference``, ``tests/engines``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tokenizers import Tokenizer

from pytest_ddtree.checks.diagnose import Diagnoser
from pytest_ddtree.checks.invariants import Expectation, check
from pytest_ddtree.core.dialects.sglang import DETAILS_FIELD
from pytest_ddtree.measure.load import LoadPoint
from pytest_ddtree.measure.load.runner import completion_of, run_point
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion, SpecStats
from pytest_ddtree.wire.protocol import EndpointConfig
from pytest_ddtree.wire.tokens import TokenizerCounter

TOKENIZER = Path(__file__).parents[2] / "pytest_ddtree" / "reference" / "tokenizer.json"
TEXT = "Rivers carve valleys over many thousands of years, and the water keeps moving."

# vLLM, k=3: 10 steps accepting 0,0,0,1,1,2,2,2,3,3 drafts -> histogram [3, 2, 3, 2],
# 14 accepted of 30 drafted; the prefill's token plus 10 bonus tokens plus 14 = 25 tokens
VLLM_SUMMARY = {
    "num_spec_steps": 10,
    "num_draft_tokens": 30,
    "num_accepted_draft_tokens": 14,
    "draft_acceptance_rate": 14 / 30,
    "mean_acceptance_length": 2.4,
    "num_spec_tokens": 3,
    "acceptance_histogram": [3, 2, 3, 2],
}
VLLM_DETAILED = {
    **{k: v for k, v in VLLM_SUMMARY.items() if k != "acceptance_histogram"},
    "per_step_accepted": [0, 0, 0, 1, 1, 2, 2, 2, 3, 3],
    "per_step_drafted": [3] * 10,
}
# SGLang: 8 verify steps, [1, 2, 3, 2] steps with 0..3 correct drafts: 14 correct, 22 tokens
SGLANG_DETAILS = {
    "spec_verify_ct": 8,
    "spec_accept_length": 2.75,
    "spec_accept_rate": 14 / 24,
    "spec_num_correct_drafts": 14,
    "spec_num_proposed_drafts": 24,
    "spec_correct_drafts_histogram": [1, 2, 3, 2],
}
LLAMACPP_TIMINGS = {
    "prompt_n": 12,
    "prompt_ms": 20.0,
    "predicted_n": 25,
    "predicted_ms": 250.0,
    "predicted_per_second": 100.0,
    "draft_n": 30,
    "draft_n_accepted": 14,
}


def _usage(n: int) -> dict[str, int]:
    return {"prompt_tokens": 12, "completion_tokens": n, "total_tokens": 12 + n}


def _choice(index: int = 0, **stop: Any) -> dict[str, Any]:
    msg = {"role": "assistant", "content": TEXT}
    return {"index": index, "message": msg, "finish_reason": "stop", **stop}


def vllm_plain(spec: dict[str, Any], stop: Any = 2) -> dict[str, Any]:
    return {
        "id": "chatcmpl-v",
        "object": "chat.completion",
        "model": "m",
        "choices": [_choice(stop_reason=stop)],
        "usage": _usage(25),
        "metrics": {"speculative_decoding": spec},
    }


def vllm_stream(spec: dict[str, Any], stop: Any = 2) -> list[dict[str, Any]]:
    # the stop rides on the chunk carrying finish_reason; the statistics on the final
    # usage chunk (choices: [])
    head = {"id": "chatcmpl-v", "object": "chat.completion.chunk", "model": "m"}
    return [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {**head, "choices": [{"index": 0, "delta": {"content": TEXT[:30]}}]},
        {**head, "choices": [{"index": 0, "delta": {"content": TEXT[30:]}}]},
        {
            **head,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": stop}],
        },
        {
            **head,
            "choices": [],
            "usage": _usage(25),
            "metrics": {"speculative_decoding": spec},
        },
    ]


def sglang_plain(details: Any, n: int = 1, stop: Any = 2) -> dict[str, Any]:
    return {
        "id": "s",
        "object": "chat.completion",
        "model": "m",
        "choices": [_choice(i, matched_stop=stop) for i in range(n)],
        "usage": _usage(22 * n),
        "sglext": {"spec_tokens_details": details},
    }


def sglang_stream(details: Any, stop: Any = 2) -> list[dict[str, Any]]:
    # SGLang sends sglext in a chunk of its own (choices: []), whether or not usage is asked
    head = {"id": "s", "object": "chat.completion.chunk", "model": "m"}
    return [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": TEXT}}]},
        {
            **head,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "matched_stop": stop}],
        },
        {**head, "choices": [], "sglext": {"spec_tokens_details": details}},
        {**head, "choices": [], "usage": _usage(22)},
    ]


def llamacpp_plain() -> dict[str, Any]:
    return {
        "id": "l",
        "object": "chat.completion",
        "model": "m",
        "choices": [_choice()],
        "usage": _usage(25),
        "timings": LLAMACPP_TIMINGS,
    }


def llamacpp_stream() -> list[dict[str, Any]]:
    head = {"id": "l", "object": "chat.completion.chunk", "model": "m"}
    return [
        {**head, "choices": [{"index": 0, "delta": {"content": TEXT}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**head, "choices": [], "usage": _usage(25), "timings": LLAMACPP_TIMINGS},
    ]


def _sse(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + (
        b"data: [DONE]\n\n"
    )


class Recorder:
    """A mock engine: answers every POST with ``answer`` and keeps the bodies sent."""

    def __init__(self, plain: dict[str, Any], stream: list[dict[str, Any]]) -> None:
        self.plain, self.stream = plain, stream
        self.bodies: list[dict[str, Any]] = []

    def _response(self, request: httpx.Request, async_body: bool) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "m"}]})
        body = json.loads(request.content)
        self.bodies.append(body)
        if not body.get("stream"):
            return httpx.Response(200, json=self.plain)
        data = _sse(self.stream)
        headers = {"content-type": "text/event-stream"}
        if async_body:

            async def chunks() -> AsyncIterator[bytes]:
                yield data

            return httpx.Response(200, content=chunks(), headers=headers)

        def sync_chunks() -> Iterator[bytes]:
            yield data

        return httpx.Response(200, content=sync_chunks(), headers=headers)

    def sync(self) -> httpx.MockTransport:
        return httpx.MockTransport(lambda r: self._response(r, False))

    def async_(self) -> httpx.MockTransport:
        return httpx.MockTransport(lambda r: self._response(r, True))


def _config(dialect: str = "auto") -> EndpointConfig:
    return EndpointConfig("http://engine.invalid/v1", model="m", dialect=dialect)


def both(engine: Recorder, stream: bool, dialect: str = "auto") -> list[Completion]:
    """The answer through the sync client and (streamed) through the load runner."""
    config = _config(dialect)
    with DDTreeClient(config, transport=engine.sync()) as client:
        out = [client.chat("hi", max_tokens=64, stream=stream)]
    if stream:
        spec = config.spec("hi", tree_budget=None, max_tokens=64, dialect=dialect)
        raws, *_ = asyncio.run(
            run_point(config, [spec], LoadPoint("concurrency", 1), transport=engine.async_())
        )
        out.append(completion_of(raws[0], dialect=dialect))
    return out


STREAMING = pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])


@STREAMING
def test_vllm_summary(stream: bool) -> None:
    engine = Recorder(vllm_plain(VLLM_SUMMARY), vllm_stream(VLLM_SUMMARY))
    for c in both(engine, stream):
        s = c.stats
        assert s is not None and s.dialect == "vllm"
        assert s.acceptance_histogram == (3, 2, 3, 2)
        assert s.depth_source == "metrics.speculative_decoding.acceptance_histogram"
        assert s.num_spec_tokens == 3
        assert s.rounds_reaching == (10, 7, 5, 2)
        assert s.acceptance_by_depth == pytest.approx((0.7, 5 / 7, 0.4))
        assert s.histogram_acceptance_length == pytest.approx(2.4)
        assert (c.stop_reason, c.stop_field) == (2, "choices[0].stop_reason")
        assert [v.code for v in check(c) if v.code == "stats-inconsistent"] == []


@STREAMING
def test_vllm_detailed_builds_the_histogram_from_per_step_counts(stream: bool) -> None:
    engine = Recorder(vllm_plain(VLLM_DETAILED), vllm_stream(VLLM_DETAILED))
    for c in both(engine, stream):
        s = c.stats
        assert s is not None
        assert s.acceptance_histogram == (3, 2, 3, 2)
        assert s.depth_source == "metrics.speculative_decoding.per_step_accepted"
        assert [v.code for v in check(c) if v.code == "stats-inconsistent"] == []


@STREAMING
def test_vllm_stop_string_and_null_stop(stream: bool) -> None:
    engine = Recorder(vllm_plain(VLLM_SUMMARY, "\n\n"), vllm_stream(VLLM_SUMMARY, "\n\n"))
    for c in both(engine, stream):
        assert (c.stop_reason, c.stop_field) == ("\n\n", "choices[0].stop_reason")
    engine = Recorder(vllm_plain(VLLM_SUMMARY, None), vllm_stream(VLLM_SUMMARY, None))
    for c in both(engine, stream):
        # null: the model's own end-of-sequence; the field is still named
        assert (c.stop_reason, c.stop_field) == (None, "choices[0].stop_reason")


@STREAMING
def test_sglang_sglext_n1(stream: bool) -> None:
    engine = Recorder(sglang_plain(SGLANG_DETAILS), sglang_stream(SGLANG_DETAILS))
    for c in both(engine, stream, dialect="sglang"):
        s = c.stats
        assert s is not None and s.dialect == "sglang"
        assert s.decode_rounds == 8 and s.mean_acceptance_length == 2.75
        assert (s.num_draft_tokens, s.num_accepted_draft_tokens) == (24, 14)
        assert s.acceptance_histogram == (1, 2, 3, 2)
        assert s.depth_source == "sglext.spec_tokens_details.spec_correct_drafts_histogram"
        assert s.histogram_acceptance_length == pytest.approx(2.75)
        assert (c.stop_reason, c.stop_field) == (2, "choices[0].matched_stop")
        assert [v.code for v in check(c) if v.code.startswith("stats")] == []
    # the sglang dialect asks for the statistics, on every path
    assert engine.bodies and all(b[DETAILS_FIELD] is True for b in engine.bodies)


def test_sglang_sglext_n2_reads_the_first_choice() -> None:
    other = {**SGLANG_DETAILS, "spec_verify_ct": 11, "spec_correct_drafts_histogram": [11]}
    engine = Recorder(sglang_plain([SGLANG_DETAILS, other], n=2), [])
    (c,) = both(engine, stream=False, dialect="sglang")
    assert c.stats is not None and c.stats.decode_rounds == 8
    assert c.stats.acceptance_histogram == (1, 2, 3, 2)


def test_sglang_list_for_one_streamed_choice() -> None:
    engine = Recorder({}, sglang_stream([SGLANG_DETAILS]))
    for c in both(engine, stream=True, dialect="sglang"):
        assert c.stats is not None and c.stats.acceptance_histogram == (1, 2, 3, 2)


def test_auto_asks_sglang_only_once_identified() -> None:
    engine = Recorder(sglang_plain(None), [])
    engine.plain.pop("sglext")
    with DDTreeClient(_config(), transport=engine.sync()) as client:
        first = client.chat("hi", max_tokens=64, stream=False)
        assert client.detected_dialect == "sglang"  # told by matched_stop
        client.chat("hi", max_tokens=64, stream=False)
    assert first.stats is None
    assert DETAILS_FIELD not in engine.bodies[0]
    assert engine.bodies[1][DETAILS_FIELD] is True


@pytest.mark.parametrize("dialect", ["auto", "vllm", "ddtree", "llamacpp", "none"])
def test_no_other_dialect_sends_the_sglang_field(dialect: str) -> None:
    engine = Recorder(vllm_plain(VLLM_SUMMARY), vllm_stream(VLLM_SUMMARY))
    both(engine, stream=True, dialect=dialect)
    both(engine, stream=False, dialect=dialect)
    assert len(engine.bodies) == 3
    assert not any(DETAILS_FIELD in b for b in engine.bodies)


def test_a_baseline_replay_drops_the_sglang_field() -> None:
    sent = _config("sglang").request("hi", tree_budget=None)
    assert sent.body[DETAILS_FIELD] is True
    assert DETAILS_FIELD not in _config("auto").replay(sent).body


@STREAMING
def test_llamacpp_timings_and_no_stop(stream: bool) -> None:
    engine = Recorder(llamacpp_plain(), llamacpp_stream())
    for c in both(engine, stream):
        s = c.stats
        assert s is not None and s.dialect == "llamacpp"
        assert (s.num_draft_tokens, s.num_accepted_draft_tokens) == (30, 14)
        # no histogram per response, no stop field on the OpenAI routes
        assert s.acceptance_histogram is None and s.depth_source is None
        assert (c.stop_reason, c.stop_field) == (None, None)


# ---------------------------------------------------------------- violations


def _stats_violations(spec: dict[str, Any]) -> list[Any]:
    engine = Recorder(vllm_plain(spec), [])
    (c,) = both(engine, stream=False)
    return [v for v in check(c) if v.code == "stats-inconsistent"]


@pytest.mark.parametrize(
    "value", [[3, -1, 3, 2], [3, "2", 3, 2], "3,2,3,2", [], [3, 2.5, 3, 2], {"0": 3}]
)
def test_malformed_histogram_names_the_field(value: Any) -> None:
    found = _stats_violations({**VLLM_SUMMARY, "acceptance_histogram": value})
    assert [v.evidence["field"] for v in found] == [
        "metrics.speculative_decoding.acceptance_histogram"
    ]
    assert "is not a non-empty list of integers" in found[0].message


def test_histogram_disagreeing_with_the_step_count() -> None:
    found = _stats_violations({**VLLM_SUMMARY, "acceptance_histogram": [3, 2, 3, 3]})
    messages = " | ".join(v.message for v in found)
    assert "counts 11 steps, the server reports 10 decode rounds" in messages
    assert "accounts for 17 accepted drafts, the server reports 14" in messages
    assert all(v.evidence["field"].endswith("acceptance_histogram") for v in found)


def test_histogram_claiming_more_tokens_than_came_back() -> None:
    spec = {
        "num_spec_steps": 10,
        "num_spec_tokens": 3,
        "acceptance_histogram": [0, 0, 0, 10],  # 40 tokens claimed, 25 came back
    }
    engine = Recorder(vllm_plain(spec), [])
    (c,) = both(engine, stream=False)
    found = [v for v in check(c) if v.code == "stats-inflated"]
    # vLLM's steps hold at most 25 - 1 tokens (the first is the prefill's), and the last
    # step may have lost up to num_spec_tokens=3 after the stop
    assert [v.evidence["spec_step_tokens"] for v in found] == [40]
    assert "more than 25 completion tokens allow: 24 after the prefill's first token, plus " in (
        found[0].message
    )
    assert found[0].evidence["last_step_cut"] == 3


def test_histogram_longer_than_k_plus_one() -> None:
    spec = {**VLLM_SUMMARY, "acceptance_histogram": [3, 2, 3, 2, 0]}
    found = _stats_violations(spec)
    assert any("has 5 entries, num_spec_tokens=3 makes 4" in v.message for v in found)


def test_per_step_accepted_more_than_drafted() -> None:
    spec = {**VLLM_DETAILED, "per_step_drafted": [3] * 8 + [2, 2]}
    found = _stats_violations(spec)
    assert any(
        v.evidence["field"] == "metrics.speculative_decoding.per_step_drafted"
        and "step 8 accepted 3 drafts of 2 drafted" in v.message
        for v in found
    )


def test_sglang_histogram_against_verify_count() -> None:
    details = {**SGLANG_DETAILS, "spec_correct_drafts_histogram": [1, 2, 3]}
    engine = Recorder(sglang_plain(details), [])
    (c,) = both(engine, stream=False, dialect="sglang")
    found = [v for v in check(c) if v.code == "stats-inconsistent"]
    assert any(
        v.evidence["field"] == "sglext.spec_tokens_details.spec_correct_drafts_histogram"
        and "counts 6 steps, the server reports 8 decode rounds" in v.message
        for v in found
    )


# ---------------------------------------------------------------- the stop in evidence

SHORT = "Paris."


def _short(engine_plain: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(engine_plain))
    out["choices"][0]["message"]["content"] = SHORT
    out["usage"] = _usage(2)
    out.pop("metrics", None)
    out.pop("sglext", None)
    return out


def _early(plain: dict[str, Any], counter: Any = None) -> Any:
    engine = Recorder(_short(plain), [])
    (c,) = both(engine, stream=False)
    found = [v for v in check(c, counter=counter) if v.code == "early-stop"]
    assert len(found) == 1
    return found[0]


def test_early_stop_names_the_template_token_vllm_stopped_on() -> None:
    counter = TokenizerCounter(TOKENIZER)
    eos = counter.encode("<|im_end|>")
    assert len(eos) == 1
    v = _early(vllm_plain(VLLM_SUMMARY, eos[0]), counter)
    assert v.evidence["stop"] == f"token {eos[0]} '<|im_end|>' (choices[0].stop_reason)"
    assert v.evidence["stop_kind"] == "template-token"


def test_early_stop_without_a_tokenizer_shows_the_id() -> None:
    v = _early(vllm_plain(VLLM_SUMMARY, 151645))
    assert v.evidence["stop"] == "token 151645 (choices[0].stop_reason)"
    assert v.evidence["stop_kind"] == "stop-token"


def test_sglang_eos_is_the_model_choosing_to_stop() -> None:
    counter = TokenizerCounter(TOKENIZER)
    (eos,) = counter.encode("<|im_end|>")
    v = _early(sglang_plain(None, stop=eos), counter)
    assert v.evidence["stop_kind"] == "end-of-sequence"
    assert "(choices[0].matched_stop)" in v.evidence["stop"]


def test_vllm_null_stop_reason_is_the_model_choosing_to_stop() -> None:
    v = _early(vllm_plain(VLLM_SUMMARY, None))
    assert v.evidence["stop"] == "the model's own end-of-sequence (choices[0].stop_reason is null)"


def test_stop_string_in_evidence() -> None:
    v = _early(vllm_plain(VLLM_SUMMARY, "."))
    assert v.evidence == {**v.evidence, "stop": "stop string '.' (choices[0].stop_reason)"}
    assert v.evidence["stop_kind"] == "stop-string"


def test_finish_lie_shows_the_stop() -> None:
    counter = TokenizerCounter(TOKENIZER)
    (eos,) = counter.encode("<|im_end|>")
    body = vllm_plain(VLLM_SUMMARY, eos)
    body["usage"] = _usage(64)
    body.pop("metrics")
    (c,) = both(Recorder(body, []), stream=False)
    # a stop token named on the last allowed token: a true stop
    assert [v for v in check(c, counter=counter) if v.code == "finish-lie"] == []
    # past the limit no stop explains it, and the lie shows the stop named
    body["usage"] = _usage(65)
    (c,) = both(Recorder(body, []), stream=False)
    (lie,) = [v for v in check(c, counter=counter) if v.code == "finish-lie"]
    assert lie.evidence["stop"].startswith(f"token {eos} '<|im_end|>'")


def test_role_leak_and_finish_reason_show_the_stop() -> None:
    body = vllm_plain(VLLM_SUMMARY, "\nuser")
    body["choices"][0]["message"]["content"] = TEXT + "\n<|im_start|>user\nmore"
    body.pop("metrics")
    (c,) = both(Recorder(body, []), stream=False)
    (leak,) = [v for v in check(c) if v.code == "role-leak"]
    assert leak.evidence["stop"] == "stop string '\\nuser' (choices[0].stop_reason)"
    found = check(c, Expectation(allowed_finish_reasons=frozenset({"length"})))
    (wrong,) = [v for v in found if v.code == "finish-reason"]
    assert wrong.evidence["stop_kind"] == "stop-string"


def test_diagnosis_blames_the_stop_list_without_a_baseline() -> None:
    counter = TokenizerCounter(TOKENIZER)
    (eos,) = counter.encode("<|im_end|>")
    engine = Recorder(_short(vllm_plain(VLLM_SUMMARY, eos)), [])
    (c,) = both(engine, stream=False)
    found = check(c, counter=counter)
    d = Diagnoser(None).diagnose(c, found, lambda x: check(x, counter=counter))
    assert d.blame == "template"
    assert d.reason.startswith(
        f"token {eos} '<|im_end|>' (choices[0].stop_reason) ended the answer: "
        "the stop list holds a template token"
    )
    assert "stop list" in d.advice


def test_diagnosis_says_the_model_chose_to_stop() -> None:
    engine = Recorder(_short(vllm_plain(VLLM_SUMMARY, None)), [])
    (c,) = both(engine, stream=False)
    found = check(c)
    d = Diagnoser(None).diagnose(c, found, check)
    assert d.blame == "undetermined"
    assert d.reason.endswith("ended the answer: the model chose to stop")


def test_histogram_properties_without_a_histogram() -> None:
    s = SpecStats(dialect="x")
    assert s.rounds_reaching == () and s.acceptance_by_depth == ()
    assert s.histogram_acceptance_length is None
    assert SpecStats(dialect="x", acceptance_histogram=(5, 0, 0)).acceptance_by_depth == (0.0,)


def test_finish_lie_does_not_read_a_null_stop_as_the_models_end() -> None:
    body = vllm_plain(VLLM_SUMMARY, None)
    body["usage"] = _usage(64)
    body.pop("metrics")
    # without an exact count, a null stop at the limit may be vLLM's counted end-of-sequence
    (c,) = both(Recorder(body, []), stream=False)
    assert [v for v in check(c) if v.code == "finish-lie"] == []
    # a text that alone counts 64 tokens leaves no room for it: the null names no stop
    counter = TokenizerCounter(TOKENIZER)
    ids = counter.encode(" ".join([TEXT] * 8))[:64]
    body["choices"][0]["message"]["content"] = Tokenizer.from_file(str(TOKENIZER)).decode(ids)
    (c,) = both(Recorder(body, []), stream=False)
    (lie,) = [v for v in check(c, counter=counter) if v.code == "finish-lie"]
    assert lie.evidence["stop"] == "none named (choices[0].stop_reason is null)"
    assert lie.evidence["text_tokens"].endswith("(exact count)")
    assert "stop_kind" not in lie.evidence


def test_an_absurd_per_step_count_is_malformed_not_a_huge_histogram() -> None:
    spec = {**VLLM_DETAILED, "per_step_accepted": [0] * 9 + [10**12]}
    found = _stats_violations(spec)
    assert [v.evidence["field"] for v in found] == [
        "metrics.speculative_decoding.per_step_accepted"
    ]


PLUGIN_TEST = """
def test_essay(ddtree_client, ddtree_check):
    c = ddtree_client.chat("Write a detailed essay about rivers.", max_tokens=64,
                           tree_budget=256, headers={"X-DDTree-Fault": "early-eos"})
    ddtree_check(c)
"""


def test_a_plugin_failure_names_the_stop_and_its_meaning(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PLUGIN_TEST)
    result = pytester.runpytest("--ddtree-budgets=256", "--ddtree-reference-latency=off")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "stop: token 2 '<|im_end|>' (choices[0].stop_reason)" in out
    assert "ended the answer: the stop list holds a template token" in out
