"""Property-based tests: no check raises on arbitrary input, and every check is deterministic."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pytest_ddtree.checks.invariants import (
    CODES,
    BudgetSample,
    check,
    check_budget_ignored,
    check_determinism,
)
from pytest_ddtree.wire.completion import Completion, SpecStats, StreamInfo, Timings, Usage

from .factories import HEALTHY_TEXT, FakeCounter, chunks_for, completion, request, split

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(
            st.sampled_from(
                [
                    "id",
                    "object",
                    "choices",
                    "usage",
                    "delta",
                    "content",
                    "error",
                    "finish_reason",
                    "message",
                    "ddtree_stats",
                    "created",
                    "model",
                ]
            )
            | st.text(max_size=8),
            children,
            max_size=6,
        )
    ),
    max_leaves=25,
)
maybe_int = st.none() | st.integers(min_value=-5, max_value=5000)
maybe_float = st.none() | st.floats(allow_nan=True, allow_infinity=True)
texts = st.text(max_size=600) | st.sampled_from(
    [
        "",
        "1user:user:",
        "Unit 1.",
        "<|im_end|>tail",
        "<think>x</think>",
        "\x00" * 50,
        "ab " * 300,
        "!" * 900,
        "\ud800 lone surrogate",
    ]
)


@st.composite
def arbitrary_completions(draw: st.DrawFn) -> Completion:
    n_chunks = draw(st.integers(min_value=0, max_value=12))
    times = tuple(
        sorted(
            draw(
                st.lists(st.floats(min_value=0, max_value=10), min_size=n_chunks, max_size=n_chunks)
            )
        )
    )
    toks = tuple(draw(st.lists(st.integers(min_value=-1, max_value=50), max_size=n_chunks)))
    stream = draw(
        st.none()
        | st.builds(
            StreamInfo,
            events=st.integers(min_value=0, max_value=400),
            done_seen=st.booleans(),
            finish_chunks=st.integers(min_value=0, max_value=3),
            parse_errors=st.lists(st.text(max_size=20), max_size=2).map(tuple),
            error_events=st.lists(
                st.dictionaries(st.text(max_size=5), json_values, max_size=3), max_size=2
            ).map(tuple),
            usage_seen=st.booleans(),
        )
    )
    return Completion(
        request=request(
            api=draw(st.sampled_from(["chat", "completions"])),
            stream=stream is not None,
            max_tokens=draw(st.integers(min_value=1, max_value=4096)),
            tree_budget=draw(st.none() | st.integers(min_value=0, max_value=2048)),
        ),
        status_code=draw(st.sampled_from([0, 200, 201, 404, 500, 503]) | st.integers()),
        text=draw(texts),
        reasoning_text=draw(texts),
        finish_reason=draw(
            st.none() | st.sampled_from(["stop", "length", "tool_calls"]) | st.text(max_size=8)
        ),
        usage=draw(st.none() | st.builds(Usage, maybe_int, maybe_int, maybe_int, maybe_int)),
        stats=draw(
            st.none()
            | st.builds(
                SpecStats,
                dialect=st.sampled_from(["ddtree", "vllm", "none"]),
                tree_budget=maybe_int,
                decode_rounds=maybe_int,
                mean_acceptance_length=maybe_float,
                server_tokens_per_second=maybe_float,
                block_size=maybe_int,
                num_draft_tokens=maybe_int,
                num_accepted_draft_tokens=maybe_int,
            )
        ),
        timings=Timings(
            sent=0.0,
            headers=None,
            first_content=times[0] if times else None,
            done=10.0,
            chunk_times=times,
            chunk_tokens=toks,
        ),
        raw=draw(json_values | st.lists(json_values, max_size=8)),
        stream=stream,
        error=draw(st.none() | st.text(max_size=30)),
        local_completion_tokens=draw(maybe_int),
        token_count_source=draw(
            st.sampled_from(["usage", "none", "tokenizer.json (x)", "approximation"])
        ),
    )


@SETTINGS
@given(arbitrary_completions(), st.booleans(), st.booleans())
def test_check_never_raises_and_is_deterministic(c, thinking, with_counter):
    counter = FakeCounter() if with_counter else None
    first = check(c, counter=counter, thinking=thinking)
    second = check(c, counter=counter, thinking=thinking)
    assert first == second
    for v in first:
        assert v.code in CODES
        assert v.message and "\n" not in v.message
        v.format()
        v.to_json()


@SETTINGS
@given(texts, texts)
def test_arbitrary_unicode_text_never_raises(text, reasoning):
    c = completion(text, reasoning=reasoning, tokens=len(text) // 3)
    assert check(c, counter=FakeCounter()) == check(c, counter=FakeCounter())
    assert check(c) == check(c)


@SETTINGS
@given(st.integers(min_value=0, max_value=60), st.booleans(), st.integers(0, 2))
def test_truncated_stream_is_reported_never_raises(cut, done, finish_chunks):
    pieces = split(HEALTHY_TEXT, 40)
    chunks = chunks_for(
        pieces, usage={"prompt_tokens": 20, "completion_tokens": 84, "total_tokens": 104}
    )[:cut]
    text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"])
    info = StreamInfo(events=len(chunks), done_seen=done, finish_chunks=finish_chunks)
    c = completion(
        text,
        stream=True,
        raw=chunks,
        stream_info=info,
        finish="stop" if finish_chunks else None,
        tokens=len(text.split()),
    )
    found = {v.code for v in check(c, counter=FakeCounter())}
    # broken exactly when an event, [DONE] or the one finish chunk is missing
    broken = not done or finish_chunks != 1 or not chunks
    assert ("stream-integrity" in found) == broken, (cut, done, finish_chunks, found)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(st.text(max_size=6), json_values, max_size=5), max_size=20))
def test_arbitrary_chunk_lists_never_raise(chunks):
    info = StreamInfo(events=len(chunks), done_seen=True, finish_chunks=1)
    c = completion(stream=True, raw=chunks, stream_info=info)
    assert check(c) == check(c)


@SETTINGS
@given(
    st.lists(
        st.builds(
            BudgetSample,
            tree_budget=st.sampled_from([1, 16, 64, 256, 1024]) | st.integers(-3, 5000),
            decode_tokens_per_second=maybe_float,
            mean_acceptance_length=maybe_float,
            prompt_id=st.none() | st.sampled_from(["a", "b", "c"]),
            echoed_tree_budget=st.none() | st.integers(0, 100),
        ),
        max_size=40,
    )
)
def test_budget_ignored_never_raises_and_is_deterministic(samples):
    assert check_budget_ignored(samples) == check_budget_ignored(samples)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arbitrary_completions(), arbitrary_completions())
def test_determinism_check_never_raises(a, b):
    assert check_determinism(a, a) == []
    assert check_determinism(a, b) == check_determinism(a, b)


@SETTINGS
@given(
    st.lists(
        st.sampled_from(
            [
                "The",
                "user",
                "user:",
                "assistant:",
                "system",
                "said",
                "a",
                "person",
                "who",
                "reads",
                "interface",
                "Each",
                "and",
                "then",
                "the",
                "assistant",
                "answers",
                "quickly",
            ]
        ),
        min_size=3,
        max_size=30,
    )
)
def test_role_words_mid_sentence_never_leak(words):
    # a sentence that starts with a capitalised non-role word keeps every
    # role word mid-line, where it is prose, whatever the order
    sentence = "Today " + " ".join(words) + "."
    text = HEALTHY_TEXT + " " + sentence + " " + HEALTHY_TEXT
    markers = ("user:", "assistant:")
    # a repeated marker is a leak by design: rejected as an example, not counted as a pass
    assume(not any(f"{a} {b}" in sentence for a in markers for b in markers))
    found = {v.code for v in check(completion(text), counter=FakeCounter())}
    assert "role-leak" not in found


def test_math_is_finite_for_edge_stats():
    c = completion(
        stats=SpecStats(dialect="ddtree", decode_rounds=0, mean_acceptance_length=math.inf)
    )
    assert {v.code for v in check(c)} >= {"stats-inconsistent"}


SENTENCES = [
    "The river carries silt to the delta.",
    "Each user of the library gets a card.",
    "The system reboots at night.",
    "An assistant librarian sorts the returns.",
    "Trains leave the station every hour.",
    "Bees collect nectar from the orchard.",
]
prose = st.lists(st.sampled_from(SENTENCES), min_size=3, max_size=6, unique=True).map(" ".join)


@SETTINGS
@given(prose, prose, st.sampled_from(["user", "assistant", "system"]))
def test_a_leaked_turn_after_the_answer_is_always_caught(answer, follow_up, role):
    text = f"{answer}\n{role}: {follow_up}"
    assert "role-leak" in {v.code for v in check(completion(text), min_tokens=1)}


@SETTINGS
@given(prose, st.data())
def test_a_special_token_anywhere_is_always_caught(answer, data):
    at = data.draw(st.integers(0, len(answer)))
    token = data.draw(st.sampled_from(["<|im_end|>", "<|endoftext|>", "<end_of_turn>"]))
    text = answer[:at] + token + answer[at:]
    found = {v.code for v in check(completion(text), min_tokens=1)}
    assert found & {"special-token-leak", "overrun"}


@SETTINGS
@given(prose)
def test_healthy_prose_passes(answer):
    assert check(completion(answer), min_tokens=1, counter=FakeCounter()) == []
