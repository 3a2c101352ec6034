"""The cold/warm/batched comparison: equal, a near-tie, a real difference, not comparable."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import BaseServer
from typing import Any

import pytest

from pytest_ddtree.checks.coldwarm import (
    BATCHED,
    WARM,
    Batch,
    ColdWarmBatched,
    cold_warm_batched_header,
    cold_warm_batched_violations,
    diagnose_cold_warm_batched,
    judge_cold_warm_batched,
    near_tie_warnings,
    with_nonce,
)
from pytest_ddtree.core.settings import Lossless
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion, ErrorKind, StreamInfo, TokenLogprob
from pytest_ddtree.wire.protocol import EndpointConfig
from tests.invariants.factories import completion

NEAR_TIE = Lossless()
BATCH = Batch(others=3, streaming_before=3, throughout=3)
TARGET = "woven from the threads of the river"
FLIPPED = "woven with the threads of the river"


def _tok(token: str, lp: float, top: list[tuple[str, float]]) -> TokenLogprob:
    return TokenLogprob(token, lp, token.encode(), tuple((t, v, t.encode()) for t, v in top))


def _probe(second: str, gap: float) -> Completion:
    """The target's answer with log-probabilities: ``second`` at token 1, ``gap`` nats over
    the other of ' from' / ' with'."""
    other = " with" if second == " from" else " from"
    entries = [
        _tok("woven", -0.1, [("woven", -0.1)]),
        _tok(second, -0.7, [(second, -0.7), (other, -0.7 - gap), (" of", -9.0)]),
        *(_tok(t, -0.1, [(t, -0.1)]) for t in (" the", " threads", " of", " the", " river")),
    ]
    text = "".join(e.token for e in entries)
    return replace(completion(text), logprobs=tuple(entries))


def _judge(
    cold: str,
    warm: str,
    batched: str,
    *,
    probe: Completion | None = None,
    mode: Lossless = NEAR_TIE,
    batch: Batch = BATCH,
    **answer: object,
) -> ColdWarmBatched:
    comps = [completion(t, **answer) for t in (cold, warm, batched)]  # type: ignore[arg-type]
    return judge_cold_warm_batched(
        "abc123", *comps, batch, mode, probe=None if probe is None else (lambda: probe)
    )


def test_equal_answers_pass() -> None:
    found = _judge(TARGET, TARGET, TARGET)
    assert found.ok
    assert cold_warm_batched_violations(found) == []


def test_a_near_tie_is_numerics_a_warning_in_near_tie_mode() -> None:
    found = _judge(TARGET, FLIPPED, TARGET, probe=_probe(" from", 0.02))
    assert cold_warm_batched_violations(found) == []
    assert list(found.comparison.near_ties) == [WARM]
    (warning,) = near_tie_warnings(found)
    assert "the warm answer differs from the cold answer at character 6" in warning
    assert "0.02 nats apart" in warning and "a numerical near-tie" in warning


def test_a_near_tie_is_read_on_the_side_the_probe_follows() -> None:
    # the target itself goes ' with', as the warm answer does: the cold one flipped the tie
    found = _judge(TARGET, FLIPPED, FLIPPED, probe=_probe(" with", 0.02))
    assert cold_warm_batched_violations(found) == []
    assert sorted(found.comparison.near_ties) == [WARM, BATCHED]


def test_exact_mode_fails_a_near_tie_and_blames_no_layer() -> None:
    found = _judge(TARGET, FLIPPED, TARGET, probe=_probe(" from", 0.02), mode=Lossless("exact"))
    (v,) = cold_warm_batched_violations(found)
    assert v.code == "cold-warm-batched"
    assert v.evidence["divergence"] == "near-tie"
    diagnosis = diagnose_cold_warm_batched(found, None)
    assert diagnosis.blame == "undetermined"
    assert diagnosis.reason.startswith("numerical near-tie: the warm answer differs")


def test_a_real_difference_fails_with_the_margin() -> None:
    found = _judge(TARGET, TARGET, FLIPPED, probe=_probe(" from", 4.0))
    (v,) = cold_warm_batched_violations(found)
    assert v.code == "cold-warm-batched"
    assert v.message.startswith("the batched answer differs from the cold answer at character 6")
    assert "the target was sure (margin 4 nats" in v.message
    assert v.evidence["batch"] == BATCH.describe()
    assert cold_warm_batched_header(found).endswith("the batched answer differs from the cold one")


def test_the_cold_answer_alone_differs() -> None:
    found = _judge(FLIPPED, TARGET, TARGET, probe=_probe(" from", 4.0))
    assert sorted(found.comparison.divergences) == [WARM, BATCHED]
    # the probe follows the warm answers: the margin is read from their side
    assert all(
        d.margin and d.margin.kind == "confident" for d in found.comparison.divergences.values()
    )
    assert "the cold answer differs from the warm and the batched one" in (
        cold_warm_batched_header(found)
    )


def test_the_baseline_run_names_the_layer() -> None:
    found = _judge(TARGET, TARGET, FLIPPED, probe=_probe(" from", 4.0))
    clean = _judge(TARGET, TARGET, TARGET)
    assert diagnose_cold_warm_batched(found, clean).blame == "speculation"
    assert diagnose_cold_warm_batched(found, found).blame == "server"
    assert diagnose_cold_warm_batched(found, None).blame == "undetermined"


def test_an_answer_cut_short_is_not_comparable() -> None:
    cold = completion(TARGET)
    broken = completion(FLIPPED, status=500, error="HTTP 500")
    found = judge_cold_warm_batched("n", cold, broken, cold, BATCH, Lossless())
    (v,) = cold_warm_batched_violations(found)
    assert v.code == "not-comparable"
    assert "the warm answer did not arrive whole (http" in v.message
    assert diagnose_cold_warm_batched(found, None).blame == "undetermined"
    assert cold_warm_batched_header(found).startswith("not comparable:")


def test_a_difference_past_the_end_of_an_answer_cut_by_max_tokens_is_not_judged() -> None:
    cold = completion("woven from the", finish="length", tokens=3)
    longer = completion(TARGET, finish="stop")
    found = judge_cold_warm_batched("n", cold, cold, longer, BATCH, Lossless())
    (v,) = cold_warm_batched_violations(found)
    assert v.code == "not-comparable"
    assert "the cold answer was cut by max_tokens at 3 tokens where the other goes on" in v.message


@pytest.mark.parametrize("throughout", [0])
def test_a_batched_answer_nothing_was_decoded_beside_is_not_comparable(throughout: int) -> None:
    lonely = Batch(others=3, streaming_before=1, throughout=throughout)
    found = _judge(TARGET, TARGET, FLIPPED, batch=lonely)
    (v,) = cold_warm_batched_violations(found)
    assert v.code == "not-comparable"
    assert "no other request was decoded beside the batched one (3 other request(s): 1" in (
        v.message
    )
    # that alone is left out (the warm answer was compared): the batch was not made
    reason = found.not_batched()
    assert reason is not None and reason.startswith("no other request was decoded beside")
    # beside a real difference, or another answer set aside, it is not all there is to say
    assert _judge(TARGET, FLIPPED, FLIPPED, batch=lonely).not_batched() is None
    assert _judge(TARGET, TARGET, TARGET).not_batched() is None
    # the others failed beside it (HTTP 500, a dropped connection): no skip, a failure
    failing = Batch(others=3, streaming_before=0, throughout=0, errors=("other 1: HTTP 500",))
    assert _judge(TARGET, TARGET, TARGET, batch=failing).not_batched() is None


def test_the_session_line_opens_the_prompt_without_changing_the_question() -> None:
    assert with_nonce("Why?", "ab") == "Session ab.\n\nWhy?"
    user = [{"role": "user", "content": "Why?"}]
    assert with_nonce(user, "ab") == [{"role": "system", "content": "Session ab."}, *user]
    system = [{"role": "system", "content": "Be brief."}, *user]
    assert with_nonce(system, "ab") == [
        {"role": "system", "content": "Session ab.\n\nBe brief."},
        *user,
    ]
    assert system[0]["content"] == "Be brief."  # the caller's messages are left alone


def test_a_probe_that_parts_from_both_answers_gives_way_to_the_next() -> None:
    # the baseline's own answer leaves both before the divergence: the server's is read
    astray = replace(completion("spun of other yarn"), logprobs=())
    found = judge_cold_warm_batched(
        "n",
        *(completion(t) for t in (TARGET, TARGET, FLIPPED)),
        BATCH,
        Lossless(),
        probe=[lambda: astray, lambda: _probe(" from", 4.0)],
    )
    (div,) = found.comparison.divergences.values()
    assert div.margin is not None and div.margin.kind == "confident"


def _timed_out() -> Completion:
    """A batched request the client gave up on before any event came (its read timeout)."""
    empty = completion("", status=0, error="read timeout: no data for 15s", finish=None)
    timings = replace(empty.timings, first_content=None, chunk_times=())
    stream = StreamInfo(events=0, done_seen=False, finish_chunks=0)
    return replace(empty, error_kind=ErrorKind.READ_TIMEOUT, timings=timings, stream=stream)


def test_a_batched_request_queued_past_the_timeout_is_not_batched_not_broken() -> None:
    """A one-slot server serves the others while the batched request waits past the read
    timeout: its answer was never decoded, beside them or at all; a server whose others went
    silent too is not queueing, and that stays a failure."""
    cold, warm = completion(TARGET), completion(TARGET)
    queued = Batch(others=1, streaming_before=1, throughout=1, served_late=1)
    found = judge_cold_warm_batched("n", cold, warm, _timed_out(), queued, NEAR_TIE)
    assert found.queued
    reason = found.not_batched()
    assert reason is not None and reason.startswith(
        "the server queued the batched request: no event of it came before the client's "
        "read-timeout while 1 other request(s) went on streaming (1 other request(s)"
    )
    silent = replace(queued, served_late=0)
    found = judge_cold_warm_batched("n", cold, warm, _timed_out(), silent, NEAR_TIE)
    assert not found.queued and found.not_batched() is None
    (v,) = cold_warm_batched_violations(found)
    assert "the batched answer did not arrive whole (read-timeout" in v.message
    # an answer whose stream had begun (a role, text or a tool call) is no queue: it was cut
    begun = replace(_timed_out(), stream=StreamInfo(events=1, done_seen=False, finish_chunks=0))
    assert not judge_cold_warm_batched("n", cold, warm, begun, queued, NEAR_TIE).queued


# ------------------------------------ an other served up to the end of the measured wait


@pytest.mark.parametrize(
    ("event", "late"),
    [
        (6.0, True),  # the last quarter of an 8 s wait starts at 6 s: included
        (5.99, False),  # just before it
        (8.0, True),  # the moment the wait ended: included
        (8.01, False),  # past its end: the others are cut only after it
        (7.0, True),
    ],
)
def test_an_event_in_the_last_quarter_of_the_wait_is_served_late(event: float, late: bool) -> None:
    from pytest_ddtree.checks.coldwarm import served_late

    assert served_late([1.0, event], sent=0.0, done=8.0) is late


@pytest.mark.parametrize(("event", "late"), [(0.5, True), (0.6, True), (0.49, False)])
def test_a_short_wait_looks_back_half_a_second(event: float, late: bool) -> None:
    from pytest_ddtree.checks.coldwarm import served_late

    # a quarter of a 1 s wait is 0.25 s: the last half second counts instead
    assert served_late([event], sent=0.0, done=1.0) is late


def test_no_event_is_not_served_late() -> None:
    from pytest_ddtree.checks.coldwarm import served_late

    assert served_late([], sent=0.0, done=8.0) is False


# ----------------------------- a batched attempt the others ended before is sent again


class _EndsEarlyTwice(BaseHTTPRequestHandler):
    """The measured prompt (MEASURED) answered at once; the others of the first two batched
    attempts end right after their first word (before the measured answer, held 0.3 s), the
    third attempt's other streams until the client cuts it."""

    protocol_version = "HTTP/1.0"  # each body ends when its connection closes
    measured: list[int]
    others: list[int]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _events(self, *objs: dict[str, Any]) -> bytes:
        return b"".join(b"data: " + json.dumps(o).encode() + b"\n\n" for o in objs)

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            if "MEASURED" in json.dumps(body["messages"]):
                self._measured()
            else:
                self._other()
        except OSError:
            pass  # the client cut the stream

    def _measured(self) -> None:
        self.measured.append(1)
        if len(self.measured) in (3, 4):  # the batched attempts whose others ended early
            time.sleep(0.3)
        start = self._chunk({"role": "assistant", "content": "Rivers flow to the sea."})
        end = self._chunk({}, "stop")
        self.wfile.write(self._events(start, end) + b"data: [DONE]\n\n")

    def _other(self) -> None:
        self.others.append(1)
        role, word = self._chunk({"role": "assistant"}), self._chunk({"content": " lakes"})
        if len(self.others) <= 2:
            self.wfile.write(
                self._events(role, word, self._chunk({}, "stop")) + b"data: [DONE]\n\n"
            )
            return
        self.wfile.write(self._events(role))
        for _ in range(250):  # 5 s at most
            self.wfile.write(self._events(word))
            self.wfile.flush()
            time.sleep(0.02)


def test_a_batched_attempt_the_others_ended_before_is_sent_again(
    loopback: Callable[[BaseServer], str],
) -> None:
    from pytest_ddtree.checks.coldwarm import BATCH_ATTEMPTS, run_cold_warm_batched

    attrs: dict[str, Any] = {"measured": [], "others": []}
    handler = type("H", (_EndsEarlyTwice,), attrs)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    config = EndpointConfig(f"{loopback(server)}/v1", model="m", budget_mode="none", dialect="none")
    with DDTreeClient(config, stall_limit=0) as client:
        found = run_cold_warm_batched(
            client,
            "MEASURED: tell me about rivers.",
            Lossless("exact"),
            concurrency=2,
            max_tokens=16,
            others=["Other: tell me about lakes."],
        )
    # two attempts no other request overlapped, then the third, decoded beside one
    assert BATCH_ATTEMPTS == 3
    assert len(attrs["others"]) == 3, attrs
    assert found.batch.batched, found.batch
    assert found.not_batched() is None
    assert cold_warm_batched_violations(found) == []
