"""``finish-lie`` is judged on evidence: a stop on the last allowed token is no lie.

A ``stop`` with exactly ``max_tokens`` tokens is true when the engine names the stop that
fired on the last token, or when an exact count shows the text one token short (the engine
counted its end-of-sequence, as vLLM does, or a stop string it trimmed). The two false
alarms of the issue run here as a user's test would: the embedded server's answer that
completes a stop string exactly at ``max_tokens``, and vLLM's bytes for an answer whose
end-of-sequence is its ``max_tokens``-th token, served by a real loopback HTTP server.
The reference fault ``finish-always-stop`` is still caught
(``test_reference_server.py::test_fault_is_named`` and the example suite).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pytest_ddtree.checks.invariants import check
from pytest_ddtree.reference import ReferenceServer

from .factories import completion, replace, request

RECORDED = Path(__file__).parents[1] / "recorded" / "vllm" / "summary"
VLLM_NULL = "choices[0].stop_reason"


def _lie(c: Any, **kw: Any) -> list[Any]:
    return [v for v in check(c, **kw) if v.code == "finish-lie"]


# ------------------------------------------------------------------ the rule, unit by unit


def test_no_stop_named_and_the_text_at_the_limit_is_a_lie() -> None:
    (lie,) = _lie(completion(tokens=96, max_tokens=96))
    assert lie.evidence["text_tokens"] == "96 (exact count)"
    assert lie.evidence["stop"] == "none named"
    assert "the text alone counts 96 tokens" in lie.message


def test_a_named_stop_string_on_the_last_token_is_no_lie() -> None:
    c = replace(completion(tokens=96, max_tokens=96), stop_reason="river", stop_field=VLLM_NULL)
    assert _lie(c) == []


def test_a_named_stop_token_on_the_last_token_is_no_lie() -> None:
    c = replace(completion(tokens=96, max_tokens=96), stop_reason=2, stop_field=VLLM_NULL)
    assert _lie(c) == []


def test_vllm_counting_its_end_of_sequence_is_no_lie() -> None:
    # finish 'stop', stop_reason null, completion_tokens == max_tokens, the text one short
    c = completion(tokens=96, max_tokens=96, local=95)
    c = replace(c, stop_reason=None, stop_field=VLLM_NULL)
    assert _lie(c) == []


def test_vllm_null_stop_with_the_text_at_the_limit_is_a_lie() -> None:
    c = replace(completion(tokens=96, max_tokens=96), stop_reason=None, stop_field=VLLM_NULL)
    (lie,) = _lie(c)
    assert lie.evidence["stop"] == "none named (choices[0].stop_reason is null)"
    assert "stop_kind" not in lie.evidence
    assert lie.evidence["text_tokens"] == "96 (exact count)"
    assert lie.evidence["text_counted_by"] == "tokenizer.json (test)"


def test_without_an_exact_count_a_stop_at_the_limit_is_withheld_not_a_lie() -> None:
    approx = "approximation (max(words*4/3, chars/4))"
    c = completion(tokens=96, max_tokens=96, local=None, token_count_source=approx)
    found = check(c)
    assert "finish-lie" not in [v.code for v in found]
    (line,) = [w for w in found.withheld if w.code == "finish-lie"]
    assert "an end-of-sequence counted within the limit cannot be ruled out" in line.reason
    assert str(line) == f"[finish-lie] withheld: {line.reason}"
    # vLLM's null stop with finish 'stop' is its model's own end: judged true, not withheld
    vllm = check(replace(c, stop_reason=None, stop_field=VLLM_NULL))
    assert "finish-lie" not in [v.code for v in vllm] and vllm.withheld == ()


def test_a_sampled_answer_at_the_limit_is_judged_with_its_drift() -> None:
    # a sampled text re-tokenizes a few tokens off the tokens generated: 97 is no proof
    c = completion(tokens=96, max_tokens=96, local=97, temperature=0.7)
    assert _lie(c) == []
    assert _lie(completion(tokens=96, max_tokens=96, local=120, temperature=0.7))


def test_past_the_limit_a_named_stop_is_still_a_lie() -> None:
    c = replace(completion(tokens=100, max_tokens=96), stop_reason="river", stop_field=VLLM_NULL)
    found = [v.code for v in check(c)]
    assert "finish-lie" in found and "overrun" in found


# the SmolLM2 tokenizer (the reference server's): " river" is one token, and the text the
# stop string was trimmed from ends in a space that is a token of its own, so the trimmed
# text counts as many tokens as the answer with its stop: 17
BEND = "Rivers carve their valleys over time, shaping every bend of a "


def _stopped_found(text: str, stops: list[str], counter: Any, limit: int = 17) -> list[Any]:
    """The violations of a llama.cpp- or OpenAI-style answer (no stop field) of ``limit``
    tokens to a request with ``stops``, finish 'stop'."""
    c = completion(text, tokens=limit, max_tokens=limit, local=None)
    body = {"model": "m", "max_tokens": limit, "stop": stops}
    c = replace(c, request=request(max_tokens=limit, body=body))
    return list(check(c, counter=counter, min_tokens=1))


def _stopped(text: str, stops: list[str], counter: Any, limit: int = 17) -> list[str]:
    return [v.code for v in _stopped_found(text, stops, counter, limit)]


def test_a_trimmed_stop_string_completing_on_the_last_token_is_no_lie(
    reference_counter: Any,
) -> None:
    assert reference_counter.count(BEND) == reference_counter.count(BEND + "river") == 17
    assert _stopped(BEND, ["river"], reference_counter) == []
    # the stop that fits need not be the first of the list
    assert _stopped(BEND, ["ocean", "river"], reference_counter) == []


def test_a_stop_string_that_cannot_have_fitted_leaves_the_lie(reference_counter: Any) -> None:
    # "ocean" added back to the text is past max_tokens: no stop fired within it
    assert reference_counter.count(BEND + "ocean") > 17
    (lie,) = _stopped_found(BEND, ["ocean"], reference_counter)
    assert lie.code == "finish-lie"
    assert lie.message.endswith(
        "the text alone counts 17 tokens, so no end-of-sequence fits within it, nor a stop "
        "string of the request ('ocean')"
    )


def test_an_untrimmed_stop_at_the_limit_is_one_stop_sequence_not_a_lie(
    reference_counter: Any,
) -> None:
    # the stop fired on the last token, so 'stop' is true; what is wrong is the text it left
    kept = BEND + "river"
    assert _stopped(kept, ["river"], reference_counter) == ["stop-sequence"]


# ------------------------------------------------- false alarm 1: the embedded server, 'river'

RIVER_TEST = """
import pytest

PROMPT = {prompt!r}

@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
@pytest.mark.parametrize("budget", [16, 256])
def test_stop_on_the_last_token(ddtree_client, ddtree_check, stream, budget):
    c = ddtree_client.chat(PROMPT, max_tokens={limit}, stop=[{stop!r}], stream=stream,
                           tree_budget=budget)
    # the stop string completes exactly at the limit: a true stop at max_tokens
    assert c.finish_reason == "stop" and c.stop_reason == {stop!r}
    assert c.usage.completion_tokens == {limit}
    ddtree_check(c)
"""

# the embedded server's answer to this prompt (the bundled suite's essay-rivers) completes
# "river" at its 96th token, " river"; the text keeps the space: it counts 96 tokens too
RIVER_PROMPT = "Write a long essay about rivers and the valleys they shape."
RIVER_LIMIT = 96


def test_a_stop_string_on_the_last_allowed_token_passes(
    pytester: pytest.Pytester, reference_server: ReferenceServer, baseline_server: ReferenceServer
) -> None:
    pytester.makepyfile(RIVER_TEST.format(prompt=RIVER_PROMPT, limit=RIVER_LIMIT, stop="river"))
    result = pytester.runpytest(
        f"--ddtree-endpoint={reference_server.base_url}",
        f"--ddtree-baseline-endpoint={baseline_server.base_url}",
    )
    result.assert_outcomes(passed=4)
    assert "finish-lie" not in result.stdout.str()


# ------------------------------------- false alarm 2: vLLM counts its end-of-sequence, replayed


class _VLLMReplay(BaseHTTPRequestHandler):
    """vLLM's recorded bytes for "What is 2+2?": 11 tokens of text and the end-of-sequence,
    ``completion_tokens`` 12, finish ``stop``, ``stop_reason`` null. No ``/tokenize``."""

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            models = {"object": "list", "data": [{"id": "smollm2", "object": "model"}]}
            self._send(200, "application/json", json.dumps(models).encode())
        else:
            self._send(404, "application/json", b'{"detail":"Not Found"}')

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if not self.path.endswith("/chat/completions"):
            self._send(404, "application/json", b'{"detail":"Not Found"}')
            return
        name = "chat_stream_eos" if body.get("stream") else "chat_plain_eos"
        record = json.loads((RECORDED / f"{name}.json").read_text())
        self._send(record["status"], record["content_type"], record["body"].encode())


@pytest.fixture
def vllm_replay(loopback: Callable[[ThreadingHTTPServer], str]) -> str:
    return loopback(ThreadingHTTPServer(("127.0.0.1", 0), _VLLMReplay)) + "/v1"


def test_the_recorded_answer_ends_with_a_counted_end_of_sequence() -> None:
    for name in ("chat_plain_eos", "chat_stream_eos"):
        record = json.loads((RECORDED / f"{name}.json").read_text())
        assert '"stop_reason":null' in record["body"]
        assert '"completion_tokens":12' in record["body"]


VLLM_TEST = """
import pytest

@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
def test_end_of_sequence_on_the_last_token(ddtree_client, ddtree_check, stream):
    # vLLM's answer: 11 tokens of text, then its end-of-sequence as token 12
    c = ddtree_client.chat("What is 2+2?", max_tokens=12, stream=stream, tree_budget=None)
    assert c.finish_reason == "stop" and c.stop_reason is None
    assert c.usage.completion_tokens == 12
    ddtree_check(c)
"""


def test_vllm_counting_its_end_of_sequence_at_max_tokens_passes(
    pytester: pytest.Pytester, vllm_replay: str
) -> None:
    pytester.makepyfile(VLLM_TEST)
    result = pytester.runpytest(
        f"--ddtree-endpoint={vllm_replay}", "--ddtree-model=smollm2", "--ddtree-budgets=16"
    )
    result.assert_outcomes(passed=2)
    assert "finish-lie" not in result.stdout.str()
