"""``stop-sequence``: a request's stop sequences end the answer where one first matches.

No stop sequence inside the content and nothing after one, ``finish_reason`` ``stop`` when
the engine names the stop that matched; tokens counted past the stop are ``usage-mismatch``
(the matched sequence's own tokens may count, as vLLM's do). A stop that never matched
promises nothing.
"""

from __future__ import annotations

from typing import Any

from pytest_ddtree.checks.invariants import check
from pytest_ddtree.core.expectation import Expectation
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.wire.completion import Completion, Usage

from .factories import (
    FakeCounter,
    assembled,
    chunk,
    completion,
    fake_count,
    replace,
    request,
    usage_chunk,
)

LIST = (
    "1. Choose a sunny spot.\n2. Test the soil.\n3. Add compost.\n4. Plan the rows.\n"
    "5. Sow the seeds.\n"
)
AFTER = "6. Water them every morning.\n7. Pull the weeds."
VLLM = "choices[0].stop_reason"


def _asked(c: Completion, stop: Any, **extra: Any) -> Completion:
    body = {"model": "m", "max_tokens": c.request.max_tokens, "stop": stop, **extra}
    spec = request(stream=c.request.stream, max_tokens=c.request.max_tokens or 256, body=body)
    return replace(c, request=spec)


def _found(c: Completion, code: str = "stop-sequence") -> list[Violation]:
    return [v for v in check(c, counter=FakeCounter(), min_tokens=1) if v.code == code]


def test_text_past_a_stop_that_matched_is_caught() -> None:
    c = _asked(completion(LIST + AFTER, finish="length", max_tokens=40), ["6."])
    (v,) = _found(c)
    assert v.message == (
        f"the content holds the stop sequence '6.' at character {len(LIST)} and "
        f"{len(AFTER) - 2} character(s) after it: the answer went on past the stop "
        "(finish_reason 'length')"
    )
    assert "\\n»6.« Water them every morning.\\n7." in v.evidence["excerpt"]


def test_a_stop_left_at_the_end_is_caught_unless_asked_for() -> None:
    c = _asked(completion(LIST + "6."), "6.")
    (v,) = _found(c)
    assert "at its end: the matched stop sequence was not trimmed" in v.message
    assert _found(_asked(completion(LIST + "6."), "6.", include_stop_str_in_output=True)) == []
    # asked to keep it, the answer still ends there
    kept = _asked(completion(LIST + AFTER), "6.", include_stop_str_in_output=True)
    assert [v.code for v in _found(kept)] == ["stop-sequence"]


def _stream(pieces: list[str], stop: list[str]) -> Completion:
    """``pieces`` streamed one a chunk to a request with ``stop``, assembled by the client's
    own stream decoder (the bytes read in slices that cut the events too)."""
    n = fake_count("".join(pieces))
    chunks = [chunk({"role": "assistant"}), *(chunk({"content": p}) for p in pieces)]
    chunks += [chunk({}, finish="stop"), usage_chunk(n)]
    return assembled(chunks, {"model": "m", "max_tokens": 256, "stop": stop}, reads=7)


def test_a_stop_split_across_stream_chunks_is_judged_on_the_assembled_text() -> None:
    # "6" ends one chunk and "." starts the next: no chunk holds the stop, the text does
    pieces = [LIST, "6", AFTER[1:]]
    c = _stream(pieces, ["6."])
    assert c.chunk_texts == tuple(pieces) and not any("6." in p for p in c.chunk_texts)
    assert c.text == LIST + AFTER
    (v,) = _found(c)
    assert v.evidence["at"] == len(LIST)


def test_a_chunk_ending_in_the_start_of_a_stop_is_no_alarm() -> None:
    # a chunk ends in "6", the start of the stop "6.", and the next one rules the stop out:
    # the text holds no stop (only a whole match is one)
    text = "Plant 6 rows of beans and 6 rows of peas.\n"
    held = _stream(["Plant 6", " rows of beans and 6", " rows of peas.\n"], ["6."])
    assert held.text == text and held.chunk_texts[0].endswith("6")
    assert _found(held) == []
    # the same chunks with the stop completed by the next one are caught
    done = _stream(["Plant 6", ". rows of beans"], ["6."])
    assert [v.evidence["at"] for v in _found(done)] == [6]


def test_a_stop_that_never_matched_promises_nothing() -> None:
    # cut by max_tokens before the list reached its sixth item
    c = _asked(completion(LIST, finish="length", max_tokens=fake_count(LIST)), ["6."])
    assert _found(c) == []
    assert check(c, counter=FakeCounter(), min_tokens=1) == []


def test_the_models_own_end_before_the_stop_is_no_alarm() -> None:
    # vLLM: finish 'stop' with a null stop_reason is its end-of-sequence; nothing matched
    c = _asked(completion(LIST), ["6."])
    c = replace(c, stop_reason=None, stop_field=VLLM)
    assert check(c, counter=FakeCounter(), min_tokens=1) == []


def test_a_stop_inside_the_reasoning_is_not_the_answers_text() -> None:
    c = _asked(completion(LIST, reasoning="Step 6. comes later; I stop at 5."), ["6."])
    assert _found(c) == []


def test_a_named_stop_with_finish_length_is_caught() -> None:
    c = _asked(completion(LIST, finish="length"), ["6."])
    c = replace(c, stop_reason="6.", stop_field=VLLM)
    (v,) = _found(c)
    assert v.message == (
        "choices[0].stop_reason names the stop sequence '6.' that matched, but finish_reason "
        "is 'length', not 'stop'"
    )
    assert _found(replace(c, finish_reason="stop")) == []


def test_without_stop_in_the_request_the_text_is_free() -> None:
    assert _found(completion(LIST + AFTER)) == []


STOP = "and that is the end of the list"  # 11 tokens by the fake count
STOP_TOKENS = fake_count(STOP)


def _usage(text: str, completion_tokens: int, stop: Any) -> Completion:
    c = completion(text, usage=Usage(20, completion_tokens, 20 + completion_tokens))
    c = replace(c, local_completion_tokens=fake_count(text))
    return _asked(c, stop) if stop is not None else c


def test_usage_may_count_the_matched_stops_own_tokens() -> None:
    # vLLM counts the stop string it trimmed: the text's tokens plus the stop's
    n = fake_count(LIST)
    assert STOP_TOKENS > 4  # more than the count's own tolerance
    assert _found(_usage(LIST, n + STOP_TOKENS, [STOP, "6."]), "usage-mismatch") == []
    # the same count without a stop in the request is tokens the text does not hold
    assert _found(_usage(LIST, n + STOP_TOKENS, None), "usage-mismatch") != []


def test_usage_past_the_stop_is_a_usage_mismatch() -> None:
    n = fake_count(LIST)
    c = replace(_usage(LIST, n + STOP_TOKENS + 12, [STOP]), stop_reason=STOP, stop_field=VLLM)
    (v,) = _found(c, "usage-mismatch")
    assert v.message == (
        f"usage.completion_tokens {n + STOP_TOKENS + 12} but the content counts {n} tokens "
        f"(expected ±3, plus {STOP_TOKENS} for the stop {STOP!r}; 12 token(s) counted past "
        "the stop)"
    )
    assert _found(c) == []


def test_a_stop_before_the_requests_min_tokens_is_no_alarm() -> None:
    # vLLM looks for no stop before min_tokens (SGLang: min_new_tokens): "2." comes too soon
    early = _asked(completion(LIST), ["2."], min_tokens=40)
    assert fake_count(LIST[: LIST.index("2.") + 2]) < 40
    assert _found(early) == []
    # past min_tokens the first stop after it must have ended the answer
    late = _asked(completion(LIST), ["2.", "5."], min_tokens=4)
    (v,) = _found(late)
    assert v.evidence["stop"] == "2."
    # without an exact count nothing shows where min_tokens ended: no alarm
    approx = "approximation (max(words*4/3, chars/4))"
    c = completion(LIST, local=None, token_count_source=approx)
    loose = [x for x in check(_asked(c, ["5."], min_tokens=4)) if x.code == "stop-sequence"]
    assert loose == []


def test_every_stop_of_a_list_is_honoured() -> None:
    # the stop that matched is the second of the list
    (v,) = _found(_asked(completion(LIST + AFTER), ["9.", "6."]))
    assert v.evidence["stop"] == "6." and v.evidence["at"] == len(LIST)


def test_usage_may_count_a_stops_tokens_only_when_it_ended_the_answer() -> None:
    # cut by max_tokens, no stop fired: tokens beyond the text are no stop's
    n = fake_count(LIST)
    c = replace(_usage(LIST, n + STOP_TOKENS, [STOP]), finish_reason="length")
    c = replace(c, request=replace(c.request, max_tokens=n + STOP_TOKENS))
    assert [v.code for v in _found(c, "usage-mismatch")] == ["usage-mismatch"]


def test_min_tokens_is_passed_at_the_count_plus_its_slack() -> None:
    # "2." ends at token n: past min_tokens once n reaches min_tokens + the count's slack
    n = fake_count(LIST[: LIST.index("2.") + 2])
    slack = Expectation().usage_tolerance_abs
    at = _asked(completion(LIST), ["2."], min_tokens=n - slack)
    assert [v.evidence["stop"] for v in _found(at)] == ["2."]
    short = _asked(completion(LIST), ["2."], min_tokens=n - slack + 1)
    assert _found(short) == []


def test_an_echoed_prompt_is_not_judged() -> None:
    c = _asked(completion(LIST + AFTER), ["6."], echo=True)
    found = check(c, counter=FakeCounter(), min_tokens=1)
    assert "stop-sequence" not in [v.code for v in found]
    assert any(str(w).startswith("[stop-sequence] withheld: ") for w in found.withheld)
