"""Every injected fault produces exactly its symptom (and only in the modes it belongs to)."""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from typing import Any

import httpx
import pytest

from pytest_ddtree.reference import (
    FAULTS,
    SPECULATION_FAULTS,
    TEMPLATE_FAULTS,
    CostModel,
    start_reference_server,
)

from ._helpers import LONG, SHORT, chat_body, counts, post, stream

ROLE_LEAK = re.compile(r"<\|im_start\|>user|\nuser:")


def _count(client: httpx.Client, text: str) -> int:
    root = str(client.base_url).removesuffix("/v1").removesuffix("/v1/")
    r = httpx.post(root.rstrip("/") + "/tokenize", json={"prompt": text})
    return int(r.json()["count"])


def _content(r: httpx.Response) -> str:
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["message"]["content"])


def test_catalogue_is_consistent() -> None:
    assert set(FAULTS) >= TEMPLATE_FAULTS
    assert set(FAULTS) >= SPECULATION_FAULTS
    assert not TEMPLATE_FAULTS & SPECULATION_FAULTS
    assert all(desc and "\n" not in desc for desc in FAULTS.values())


@pytest.fixture(params=["speculative", "target-only"])
def any_client(
    request: pytest.FixtureRequest, client: httpx.Client, target_client: httpx.Client
) -> httpx.Client:
    return client if request.param == "speculative" else target_client


def test_early_eos(any_client: httpx.Client) -> None:
    healthy = post(any_client, LONG).json()
    assert healthy["choices"][0]["finish_reason"] == "length"
    r = post(any_client, LONG, fault="early-eos").json()
    assert r["choices"][0]["finish_reason"] == "stop"
    assert 4 <= r["usage"]["completion_tokens"] <= 6
    assert 4 <= _count(any_client, r["choices"][0]["message"]["content"]) <= 6


@pytest.mark.parametrize("prompt", [LONG, SHORT, "Tell me about bees.", "List 5 facts about rain."])
def test_role_leak(any_client: httpx.Client, prompt: str) -> None:
    assert not ROLE_LEAK.search(_content(post(any_client, prompt, max_tokens=128)))
    leaked = _content(post(any_client, prompt, fault="role-leak", max_tokens=128))
    assert ROLE_LEAK.search(leaked), leaked


@pytest.mark.parametrize("prompt", [LONG, SHORT, "Tell me about bees.", "Describe the stars."])
def test_think_leak(any_client: httpx.Client, prompt: str) -> None:
    healthy = post(any_client, prompt, max_tokens=128).json()["choices"][0]["message"]
    assert "<think>" not in healthy["content"] and "Thinking Process" not in healthy["content"]
    msg = post(any_client, prompt, fault="think-leak", max_tokens=128).json()["choices"][0]
    content = msg["message"]["content"]
    assert re.search(r"<think>.*</think>|^Thinking Process:", content, re.S), content
    assert not msg["message"].get("reasoning_content")


def test_reasoning_only(client: httpx.Client) -> None:
    msg = post(client, LONG, fault="reasoning-only").json()["choices"][0]["message"]
    assert msg["content"] == ""
    assert len(msg["reasoning_content"]) > 50
    s = stream(client, LONG, fault="reasoning-only")
    assert s.content == "" and len(s.reasoning) > 50


def test_finish_always_stop(client: httpx.Client) -> None:
    r = post(client, LONG, fault="finish-always-stop", max_tokens=32).json()
    assert r["usage"]["completion_tokens"] == 32
    assert r["choices"][0]["finish_reason"] == "stop"
    s = stream(client, LONG, fault="finish-always-stop", max_tokens=32)
    assert s.finish_reasons == ["stop"]


def test_overrun_past_max_tokens(client: httpx.Client) -> None:
    r = post(client, LONG, fault="overrun", max_tokens=32).json()
    assert r["usage"]["completion_tokens"] > 32
    assert _count(client, r["choices"][0]["message"]["content"]) >= 32 + 8
    s = stream(client, LONG, fault="overrun", max_tokens=32)
    assert _count(client, s.content) >= 32 + 8


def test_overrun_past_end_of_turn(client: httpx.Client) -> None:
    healthy = post(client, SHORT, max_tokens=200).json()
    assert healthy["choices"][0]["finish_reason"] == "stop"
    content = _content(post(client, SHORT, fault="overrun", max_tokens=200))
    head, sep, tail = content.partition("<|im_end|>")
    assert sep and head == healthy["choices"][0]["message"]["content"] and tail.strip()


def test_speculation_faults_ignored_in_target_only(target_client: httpx.Client) -> None:
    healthy = post(target_client, LONG, max_tokens=48, tree_budget=256).json()
    for fault in sorted(SPECULATION_FAULTS):
        r = post(target_client, LONG, fault=fault, max_tokens=48, tree_budget=256).json()
        assert r["choices"] == healthy["choices"], fault
        assert counts(r["usage"]) == counts(healthy["usage"]), fault
        assert r["ddtree_stats"]["avg_acceptance"] == 1.0, fault
        assert r["ddtree_stats"]["cycles"] == 48, fault


def test_usage_mismatch(client: httpx.Client) -> None:
    r = post(client, LONG, fault="usage-mismatch").json()
    usage = r["usage"]
    real = _count(client, r["choices"][0]["message"]["content"])
    assert abs(usage["completion_tokens"] - real) >= 24
    assert usage["total_tokens"] != usage["prompt_tokens"] + usage["completion_tokens"]
    s = stream(client, LONG, fault="usage-mismatch", stream_options={"include_usage": True})
    assert (
        s.usage is not None and abs(s.usage["completion_tokens"] - _count(client, s.content)) >= 24
    )


def test_lossy_diverges_above_64(client: httpx.Client, target_client: httpx.Client) -> None:
    prompts = [LONG, "Explain in detail how trains cross the mountains.", "Write an essay on bees."]
    diverged = 0
    for prompt in prompts:
        base = _content(post(target_client, prompt, max_tokens=96))
        assert _content(post(client, prompt, fault="lossy", max_tokens=96, tree_budget=64)) == base
        assert _content(post(client, prompt, max_tokens=96, tree_budget=256)) == base
        lossy = _content(post(client, prompt, fault="lossy", max_tokens=96, tree_budget=256))
        diverged += lossy != base
    assert diverged == len(prompts)


SAMPLED_PROMPTS = (LONG, "Explain in detail how trains cross the mountains.", "List 12 steps.")


@pytest.mark.parametrize("budget", [16, 64, 1024])
def test_draft_confidence_changes_nothing_at_temperature_0(
    client: httpx.Client, target_client: httpx.Client, budget: int
) -> None:
    # only a test of the output's distribution above 0 can find this fault
    for prompt in SAMPLED_PROMPTS:
        base = _content(post(target_client, prompt, max_tokens=96))
        faulty = post(client, prompt, fault="draft-confidence", max_tokens=96, tree_budget=budget)
        assert _content(faulty) == base


def test_draft_confidence_leans_towards_the_drafter_above_0(
    client: httpx.Client, target_client: httpx.Client
) -> None:
    changed = 0
    for seed in range(10):
        kw: dict[str, Any] = {"max_tokens": 96, "temperature": 0.7, "seed": seed}
        base = _content(post(target_client, LONG, **kw))
        # healthy speculation samples exactly what the target samples at the same seed
        assert _content(post(client, LONG, tree_budget=64, **kw)) == base
        faulty = _content(post(client, LONG, fault="draft-confidence", tree_budget=64, **kw))
        changed += faulty != base
    assert changed >= 8


def test_seed_dropped_gives_one_answer_whatever_the_seed(
    client: httpx.Client, target_client: httpx.Client
) -> None:
    kw: dict[str, Any] = {"max_tokens": 32, "temperature": 0.7}
    dropped = {_content(post(client, LONG, fault="seed-dropped", seed=s, **kw)) for s in range(4)}
    assert len(dropped) == 1
    assert len({_content(post(client, LONG, seed=s, **kw)) for s in range(4)}) == 4
    # speculation only: the target-only twin keeps honouring the seed
    twin = {
        _content(post(target_client, LONG, fault="seed-dropped", seed=s, **kw)) for s in range(4)
    }
    assert len(twin) == 4


def test_nondeterministic(client: httpx.Client) -> None:
    assert _content(post(client, LONG)) == _content(post(client, LONG))
    outs = {_content(post(client, LONG, fault="nondeterministic")) for _ in range(3)}
    assert len(outs) == 3


def test_state_leak() -> None:
    prompt_a, prompt_b = LONG, "Explain in detail how bread is baked."
    with (
        start_reference_server(simulated_latency=False) as srv,
        httpx.Client(base_url=srv.base_url) as c,
    ):
        healthy_b = _content(post(c, prompt_b))
        _content(post(c, prompt_a, fault="state-leak"))
        after_other = _content(post(c, prompt_b, fault="state-leak"))
        repeat = _content(post(c, prompt_b, fault="state-leak"))
    assert after_other != healthy_b
    assert repeat == healthy_b


def test_degenerate(client: httpx.Client) -> None:
    healthy = post(client, SHORT, max_tokens=96).json()
    assert healthy["choices"][0]["finish_reason"] == "stop"
    r = post(client, SHORT, fault="degenerate", max_tokens=96).json()
    assert r["choices"][0]["finish_reason"] == "length"
    sentences = [s.strip() for s in re.split(r"(?<=\.)\s", r["choices"][0]["message"]["content"])]
    complete = [s for s in sentences if s.endswith(".")]
    assert len(complete) >= 3 and len(set(complete)) == 1, sentences


def test_budget_ignored(client: httpx.Client) -> None:
    stats = {b: post(client, LONG, tree_budget=b).json()["ddtree_stats"] for b in (4, 512)}
    assert stats[4]["tree_budget"] == 4 and stats[512]["tree_budget"] == 512
    assert stats[4]["cycles"] != stats[512]["cycles"]
    faulty = {
        b: post(client, LONG, fault="budget-ignored", tree_budget=b).json()["ddtree_stats"]
        for b in (4, 512)
    }
    assert all("tree_budget" not in s for s in faulty.values())
    assert faulty[4]["cycles"] == faulty[512]["cycles"]


def _client_rate(c: httpx.Client, fault: str | None) -> tuple[float, dict[str, Any]]:
    headers = {"X-DDTree-Fault": fault} if fault else {}
    body = {
        "messages": [{"role": "user", "content": LONG}],
        "max_tokens": 96,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    stamps: list[tuple[float, str]] = []
    stats: dict[str, Any] = {}
    usage: dict[str, Any] = {}
    with c.stream("POST", "/chat/completions", json=body, headers=headers) as r:
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            obj = json.loads(line[6:])
            if obj.get("usage"):
                usage = obj["usage"]
            if "ddtree_stats" in obj:
                stats = obj["ddtree_stats"]
            if obj.get("choices") and obj["choices"][0]["delta"].get("content"):
                stamps.append((time.perf_counter(), obj["choices"][0]["delta"]["content"]))
    first_text = stamps[0][1]
    first_tokens = _count(c, first_text)
    rate = (usage["completion_tokens"] - first_tokens) / (stamps[-1][0] - stamps[0][0])
    stats["completion_tokens"] = usage["completion_tokens"]
    return rate, stats


def test_stats_inflated() -> None:
    cost = CostModel(draft_ms=1.0, verify_base_ms=3.0)
    with start_reference_server(cost=cost) as srv, httpx.Client(base_url=srv.base_url) as c:
        rate, stats = _client_rate(c, None)
        assert 0.7 < stats["tok_per_sec"] / rate < 1.4
        assert stats["avg_acceptance"] == pytest.approx(
            stats["completion_tokens"] / stats["cycles"], abs=0.01
        )
        rate, stats = _client_rate(c, "stats-inflated")
        assert stats["tok_per_sec"] / rate > 2.2
        assert stats["avg_acceptance"] > 1.3 * stats["completion_tokens"] / stats["cycles"]


def test_empty_200(client: httpx.Client) -> None:
    r = post(client, LONG, fault="empty-200")
    assert r.status_code == 200 and _content(r) == ""
    s = stream(client, LONG, fault="empty-200")
    assert s.status == 200 and s.done and s.content == ""


def test_stream_error_event(client: httpx.Client) -> None:
    s = stream(client, LONG, fault="stream-error-event")
    assert s.status == 200
    errors = [e for e in s.chunks if "error" in e]
    assert len(errors) == 1 and errors[0]["error"]["message"]
    assert s.content  # some content came before the error
    r = post(client, LONG, fault="stream-error-event")
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"


def test_stream_no_done(client: httpx.Client) -> None:
    s = stream(client, LONG, fault="stream-no-done")
    assert not s.done
    assert isinstance(s.events[-1], str) and s.events[-1].startswith("{")
    r = post(client, LONG, fault="stream-no-done")
    with pytest.raises(ValueError):
        r.json()
    # the connection was not poisoned: the next request is fine
    assert post(client, LONG).status_code == 200


def test_intermittent_5xx() -> None:
    with (
        start_reference_server(simulated_latency=False) as srv,
        httpx.Client(base_url=srv.base_url) as c,
    ):
        codes = [post(c, SHORT, fault="intermittent-5xx").status_code for _ in range(6)]
        assert post(c, SHORT).status_code == 200
    assert codes == [200, 503] * 3


@pytest.mark.serial  # a read timeout of 0.5 s: wall-clock sensitive
def test_hang_until_client_disconnects() -> None:
    with start_reference_server(simulated_latency=False, hang_seconds=30) as srv:
        with httpx.Client(base_url=srv.base_url, timeout=httpx.Timeout(5, read=0.5)) as c:
            t0 = time.perf_counter()
            with pytest.raises(httpx.ReadTimeout):
                stream(c, LONG, fault="hang")
            # the client's read timeout ends it, not the 30 s hang (a third of it: generous
            # on a busy machine, and far from the hang)
            assert time.perf_counter() - t0 < 10
            with pytest.raises(httpx.ReadTimeout):
                post(c, LONG, fault="hang")
        # the server still serves, and the stalled handlers noticed their clients left
        with httpx.Client(base_url=srv.base_url, timeout=5) as c:
            assert post(c, LONG).status_code == 200
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and _request_threads(srv.port):
            time.sleep(0.05)
        assert not _request_threads(srv.port)


def _request_threads(port: int) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"ddtree-reference-request-{port}"]


def test_hang_does_not_block_shutdown() -> None:
    srv = start_reference_server(simulated_latency=False, hang_seconds=30)
    result: list[Any] = []

    def hang() -> None:
        try:
            with httpx.Client(base_url=srv.base_url, timeout=20) as c:
                result.append(stream(c, LONG, fault="hang"))
        except httpx.HTTPError as e:
            result.append(e)

    t = threading.Thread(target=hang)
    t.start()
    time.sleep(0.3)
    t0 = time.perf_counter()
    srv.stop()
    assert time.perf_counter() - t0 < 10  # a third of the 30 s hang: shutdown did not wait
    t.join(10)
    assert not t.is_alive() and result


def test_unknown_fault_header_is_rejected(client: httpx.Client) -> None:
    r = post(client, LONG, fault="early-eos,no-such-fault")
    assert r.status_code == 400
    assert "no-such-fault" in r.json()["error"]["message"]


def test_mid_stream_faults_strike_short_answers_too(client: httpx.Client) -> None:
    s = stream(client, SHORT, fault="early-eos,stream-error-event")
    assert [e for e in s.chunks if "error" in e] and not s.finish_reasons


def test_finish_length_when_end_token_falls_just_past_max_tokens(client: httpx.Client) -> None:
    full = post(client, SHORT, max_tokens=200).json()
    n = full["usage"]["completion_tokens"]
    assert full["choices"][0]["finish_reason"] == "stop"
    cut = post(client, SHORT, max_tokens=n).json()
    assert cut["choices"][0]["finish_reason"] == "length"
    assert cut["choices"][0]["message"]["content"] == full["choices"][0]["message"]["content"]


def test_state_leak_needs_a_drafter() -> None:
    prompt_a, prompt_b = LONG, "Explain in detail how bread is baked."
    with (
        start_reference_server(simulated_latency=False, target_only=True) as srv,
        httpx.Client(base_url=srv.base_url) as c,
    ):
        healthy_b = _content(post(c, prompt_b))
        _content(post(c, prompt_a, fault="state-leak"))
        assert _content(post(c, prompt_b, fault="state-leak")) == healthy_b


# ---------------------------------------------------------------- structured output and tools

_WEATHER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
_RF = {"type": "json_schema", "json_schema": {"name": "weather", "schema": _WEATHER}}
_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": _WEATHER}}]
_JSON_PROMPTS = ("What is the weather in Venkabel?", LONG, SHORT)


def _valid(text: str) -> bool:
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), _WEATHER)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def test_grammar_skip_breaks_the_json_above_64(
    client: httpx.Client, target_client: httpx.Client
) -> None:
    for prompt in _JSON_PROMPTS:
        kw: dict[str, Any] = {"response_format": _RF, "max_tokens": 96}
        assert _valid(_content(post(client, prompt, fault="grammar-skip", tree_budget=64, **kw)))
        assert _valid(_content(post(client, prompt, tree_budget=256, **kw)))
        assert not _valid(
            _content(post(client, prompt, fault="grammar-skip", tree_budget=256, **kw))
        )
        assert _valid(_content(post(target_client, prompt, fault="grammar-skip", **kw)))
        s = stream(client, prompt, fault="grammar-skip", tree_budget=256, **kw)
        assert s.done and not _valid(s.content)
    # tool arguments are held to the same grammar
    r = post(client, _JSON_PROMPTS[0], fault="grammar-skip", tree_budget=256, tools=_TOOLS)
    assert not _valid(r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])


def test_schema_ignored_answers_prose(any_client: httpx.Client) -> None:
    for prompt in _JSON_PROMPTS:
        assert _valid(_content(post(any_client, prompt, response_format=_RF)))
        prose = _content(post(any_client, prompt, fault="schema-ignored", response_format=_RF))
        assert prose == _content(post(any_client, prompt))
        with pytest.raises(ValueError):
            json.loads(prose)


def _streamed_arguments(s: Any) -> str:
    return "".join(
        d["function"].get("arguments", "")
        for c in s.chunks
        if c.get("choices")
        for d in c["choices"][0]["delta"].get("tool_calls") or []
    )


def test_tool_args_dropped_in_streams_only(
    client: httpx.Client, target_client: httpx.Client
) -> None:
    kw: dict[str, Any] = {"tools": _TOOLS, "tool_choice": "required", "tree_budget": 64}
    plain = post(client, _JSON_PROMPTS[0], fault="tool-args-dropped", **kw).json()
    args = plain["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert _valid(args)
    assert _streamed_arguments(stream(client, _JSON_PROMPTS[0], **kw)) == args
    dropped = stream(client, _JSON_PROMPTS[0], fault="tool-args-dropped", **kw)
    assert dropped.done and dropped.finish_reasons == ["tool_calls"]
    got = _streamed_arguments(dropped)
    assert got != args and len(got) < len(args) and not _valid(got)
    # one token per chunk without a drafter: nothing to drop
    twin = stream(target_client, _JSON_PROMPTS[0], fault="tool-args-dropped", **kw)
    assert _streamed_arguments(twin) == args


def test_tool_call_no_id(any_client: httpx.Client) -> None:
    kw: dict[str, Any] = {"tools": _TOOLS, "tool_choice": "required"}
    healthy = post(any_client, _JSON_PROMPTS[0], **kw).json()
    assert healthy["choices"][0]["message"]["tool_calls"][0]["id"].startswith("call_")
    r = post(any_client, _JSON_PROMPTS[0], fault="tool-call-no-id", **kw).json()
    (call,) = r["choices"][0]["message"]["tool_calls"]
    assert "id" not in call and _valid(call["function"]["arguments"])
    s = stream(any_client, _JSON_PROMPTS[0], fault="tool-call-no-id", **kw)
    heads = [
        d
        for c in s.chunks
        if c.get("choices")
        for d in c["choices"][0]["delta"].get("tool_calls") or []
        if "type" in d
    ]
    assert len(heads) == 1 and "id" not in heads[0]


def test_logprobs_zero(client: httpx.Client, target_client: httpx.Client) -> None:
    asked = {"max_tokens": 32, "logprobs": True, "top_logprobs": 2}
    healthy = post(client, LONG, **asked).json()["choices"][0]
    zeroed = post(client, LONG, fault="logprobs-zero", **asked).json()["choices"][0]
    # the same answer, every value 0.0: the chosen tokens' and their alternatives'
    assert zeroed["message"] == healthy["message"]
    entries = zeroed["logprobs"]["content"]
    assert [e["token"] for e in entries] == [e["token"] for e in healthy["logprobs"]["content"]]
    assert {e["logprob"] for e in entries} == {0.0}
    assert {t["logprob"] for e in entries for t in e["top_logprobs"]} == {0.0}
    assert any(e["logprob"] < 0 for e in healthy["logprobs"]["content"])
    s = stream(client, LONG, fault="logprobs-zero", **asked)
    streamed = [
        e
        for ev in s.events
        if ev.get("choices")
        for e in (ev["choices"][0]["logprobs"] or {}).get("content", [])
    ]
    assert len(streamed) == len(entries) and {e["logprob"] for e in streamed} == {0.0}
    # speculative decoding only
    target = post(target_client, LONG, fault="logprobs-zero", **asked).json()["choices"][0]
    assert any(e["logprob"] < 0 for e in target["logprobs"]["content"])


def test_logprobs_draft(client: httpx.Client, target_client: httpx.Client) -> None:
    asked = {"max_tokens": 64, "tree_budget": 256, "logprobs": True, "top_logprobs": 5}
    healthy = post(client, LONG, **asked).json()["choices"][0]
    drafted = post(client, LONG, fault="logprobs-draft", **asked).json()["choices"][0]
    # the same answer and tokens; the accepted draft tokens scored by the drafter instead
    assert drafted["message"] == healthy["message"]
    entries, own = drafted["logprobs"]["content"], healthy["logprobs"]["content"]
    assert [e["token"] for e in entries] == [e["token"] for e in own]
    moved = [i for i, (a, b) in enumerate(zip(entries, own, strict=True)) if a != b]
    assert moved and len(moved) < len(own)  # the target's bonus tokens keep their values
    # values that stay finite and at most 0, but put another token first at temperature 0
    assert all(-9000 < e["logprob"] <= 0 for e in entries)
    assert any(e["top_logprobs"][0]["logprob"] - e["logprob"] > 0.5 for e in entries)
    assert all(e["top_logprobs"][0]["token"] == e["token"] for e in own)
    # speculative decoding only
    target = post(target_client, LONG, fault="logprobs-draft", **asked).json()["choices"][0]
    assert target["logprobs"] == post(target_client, LONG, **asked).json()["choices"][0]["logprobs"]


LIST = "Write a numbered list of 10 tips for staying healthy."
# the list's fourth number completes inside an accepted block, not on its last token (the
# bundled suite's 'list-stop' prompt)
STOP = {"stop": ["4."], "max_tokens": 96, "tree_budget": 16}


def test_a_stop_inside_a_block_ends_the_answer_and_its_count(
    client: httpx.Client, target_client: httpx.Client
) -> None:
    spec = post(client, LIST, **STOP).json()
    plain = post(target_client, LIST, **STOP).json()
    for r in (spec, plain):
        choice = r["choices"][0]
        assert (choice["finish_reason"], choice["stop_reason"]) == ("stop", "4.")
        assert "4." not in choice["message"]["content"]
    assert spec["choices"][0]["message"] == plain["choices"][0]["message"]
    # the tokens up to the stop, its own included (as vLLM counts): never the block's tail
    assert counts(spec["usage"]) == counts(plain["usage"])
    text = spec["choices"][0]["message"]["content"]
    assert spec["usage"]["completion_tokens"] == _count(client, text + "4.")


def test_stop_missed_in_block(client: httpx.Client, target_client: httpx.Client) -> None:
    r = post(client, LIST, fault="stop-missed-in-block", **STOP).json()
    choice = r["choices"][0]
    text = choice["message"]["content"]
    assert "\n4." in text and text.index("\n4.") < len(text) - 40, text
    # the text goes on to the model's own end, which names no stop string
    assert choice["stop_reason"] is None
    s = stream(client, LIST, fault="stop-missed-in-block", **STOP)
    assert s.content == text
    # target-only decoding commits one token a round: no block to miss it in
    plain = post(target_client, LIST, fault="stop-missed-in-block", **STOP).json()
    assert plain["choices"] == post(target_client, LIST, **STOP).json()["choices"]


def test_usage_past_stop(client: httpx.Client, target_client: httpx.Client) -> None:
    healthy = post(client, LIST, **STOP).json()
    r = post(client, LIST, fault="usage-past-stop", **STOP).json()
    # the text is trimmed at the stop as before; the count holds the block's tail
    assert r["choices"] == healthy["choices"]
    past = r["usage"]["completion_tokens"] - healthy["usage"]["completion_tokens"]
    assert past >= 8, past
    s = stream(
        client, LIST, fault="usage-past-stop", stream_options={"include_usage": True}, **STOP
    )
    assert s.usage is not None and s.usage["completion_tokens"] == r["usage"]["completion_tokens"]
    plain = post(target_client, LIST, fault="usage-past-stop", **STOP).json()
    assert counts(plain["usage"]) == counts(post(target_client, LIST, **STOP).json()["usage"])


def test_cold_garble_strikes_a_cold_prefill_only(client: httpx.Client) -> None:
    # a prompt no earlier test sent: its first request is a cold prefill, its repeat is warm
    prompt = f"Session {uuid.uuid4().hex}. {LONG}"
    cold = post(client, prompt, fault="cold-garble").json()
    warm = post(client, prompt, fault="cold-garble").json()
    healthy = post(client, prompt).json()
    assert warm["choices"] == healthy["choices"]
    assert cold["choices"][0]["message"]["content"] != healthy["choices"][0]["message"]["content"]
    # prose with wrong words: as long, and ending as the clean answer does
    assert counts(cold["usage"]) == counts(healthy["usage"])
    assert cold["choices"][0]["finish_reason"] == healthy["choices"][0]["finish_reason"]


def test_batch_garble_strikes_beside_another_request_only() -> None:
    with (
        start_reference_server() as srv,  # simulated latency: the other request lasts
        httpx.Client(base_url=srv.base_url, timeout=30) as c,
    ):
        alone = _content(post(c, SHORT, fault="batch-garble"))
        assert alone == _content(post(c, SHORT))
        streaming, stop = threading.Event(), threading.Event()

        def other() -> None:
            body = {**chat_body(LONG, stream=True), "max_tokens": 4000}
            with (
                httpx.Client(base_url=srv.base_url, timeout=30) as o,
                o.stream("POST", "/chat/completions", json=body) as r,
            ):
                for n, _ in enumerate(r.iter_lines()):
                    if n >= 4:
                        streaming.set()
                    if stop.is_set():
                        return

        thread = threading.Thread(target=other)
        thread.start()
        try:
            assert streaming.wait(30)
            batched = _content(post(c, SHORT, fault="batch-garble"))
        finally:
            stop.set()
            thread.join(30)
    assert batched != alone
