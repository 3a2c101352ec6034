"""One violating and one healthy completion for every code of ``check``."""

from __future__ import annotations

import pytest

from pytest_ddtree.checks.invariants import CODES, Expectation, assert_valid, check
from pytest_ddtree.core.violation import InvariantError
from pytest_ddtree.wire.completion import SpecStats, StreamInfo, Usage

from .factories import HEALTHY_TEXT, FakeCounter, completion, replace


def codes(c, expectation=None, **kw):
    return [v.code for v in check(c, expectation, **kw)]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_healthy_completion_has_no_violation(stream):
    c = completion(stream=stream)
    assert check(c) == []
    assert check(c, counter=FakeCounter()) == []


def test_every_violation_names_the_request_and_a_known_code():
    c = completion("1user:user:", tokens=4)
    found = check(c)
    assert found
    for v in found:
        assert v.code in CODES
        assert "tree_budget=64" in v.request
        assert "\n" not in v.message


# --- http-error / empty -----------------------------------------------------------


def test_http_error_on_non_2xx_with_the_server_message():
    c = completion(status=503, raw={"error": {"message": "overloaded", "type": "server_error"}})
    (v,) = check(c)
    assert v.code == "http-error"
    assert "503" in v.message and "overloaded" in v.message


def test_http_error_on_transport_failure_with_200():
    c = completion(error="read timeout after 30 s", stream=True)
    found = check(c)
    assert [v.code for v in found] == ["http-error"]
    assert "read timeout" in found[0].message


def test_failed_request_content_is_not_judged():
    c = completion("Unit 1.", tokens=4, status=500, raw=None)
    assert codes(c) == ["http-error"]


def test_empty_content_with_200():
    assert "empty" in codes(completion("", tokens=0))
    assert "empty" in codes(completion("  \n ", tokens=1))
    assert "empty" not in codes(completion())


# --- early-stop ---------------------------------------------------------------


def test_early_stop_catches_the_seed_failure():
    found = check(completion("Unit 1.", tokens=4))
    v = next(v for v in found if v.code == "early-stop")
    assert v.evidence["tokens"] == 4 and v.evidence["min_tokens"] == 8
    assert "Unit 1." in v.evidence["content"]


def test_early_stop_respects_explicit_min_tokens():
    short = completion("The answer is four.", tokens=5)
    assert "early-stop" in codes(short)
    assert "early-stop" not in codes(short, min_tokens=1)
    assert "early-stop" not in codes(short, min_tokens=0)
    assert "early-stop" in codes(completion(), min_tokens=500)


def test_early_stop_ignores_length_finishes_and_small_max_tokens():
    assert "early-stop" not in codes(
        completion("Unit one is", tokens=4, max_tokens=4, finish="length")
    )
    # the default threshold never exceeds max_tokens
    assert "early-stop" not in codes(completion("Yes, it is.", tokens=4, max_tokens=4))


def test_early_stop_without_any_count_uses_the_approximation():
    c = completion("Unit 1.", usage=None, local=None, token_count_source="none")
    v = next(v for v in check(c) if v.code == "early-stop")
    assert "approximation" in v.evidence["counted_by"]


# --- finish-reason / finish-lie / overrun ---------------------------------------------


def test_finish_reason_not_allowed():
    c = completion(finish="content_filter")
    assert "finish-reason" in codes(c)
    assert "finish-reason" not in codes(
        c, allowed_finish_reasons={"stop", "length", "content_filter"}
    )


def test_finish_reason_missing_in_plain_response():
    assert "finish-reason" in codes(completion(finish=None))


def test_length_below_max_tokens_is_a_finish_reason_violation():
    assert "finish-reason" in codes(completion(finish="length", max_tokens=256))
    assert "finish-reason" not in codes(completion(finish="length", tokens=256, max_tokens=256))


def test_stop_at_max_tokens_is_a_lie():
    found = check(completion(tokens=256, max_tokens=256))
    assert [v.code for v in found if v.code.startswith("finish")] == ["finish-lie"]
    assert "finish-lie" not in codes(completion(tokens=255, max_tokens=256))


def test_finish_lie_from_local_count_when_usage_is_missing():
    text = "word " * 300
    c = completion(text, usage=None, max_tokens=256, stats=None)
    found = codes(
        c, counter=FakeCounter(), degenerate_ngram_share=1.0, degenerate_compression=0.001
    )
    assert "finish-lie" in found and "overrun" in found


def test_overrun_past_max_tokens():
    c = completion(tokens=300, max_tokens=256, finish="length")
    v = next(v for v in check(c) if v.code == "overrun")
    assert v.evidence["completion_tokens"] == 300 and v.evidence["max_tokens"] == 256


def test_overrun_boundary_exactly_max_tokens_is_no_overrun():
    def overrun(c):
        return [v.evidence["completion_tokens"] for v in check(c) if v.code == "overrun"]

    # the server's own count is exact (no slack): 256 of max_tokens=256 is within the limit
    assert overrun(completion(tokens=256, max_tokens=256, finish="length")) == []
    assert overrun(completion(tokens=257, max_tokens=256, finish="length")) == [257]
    # a local exact count (no usage) may drift by the absolute usage tolerance: max_tokens
    # plus that slack is still within the limit, one token more is an overrun
    slack = Expectation().usage_tolerance_abs
    assert slack > 0
    at = completion(usage=None, local=256 + slack, max_tokens=256, finish="length")
    assert overrun(at) == []
    past = completion(usage=None, local=257 + slack, max_tokens=256, finish="length")
    assert overrun(past) == [257 + slack]
    # the same slack for an exact local count beside a usage of exactly max_tokens
    at = completion(tokens=256, local=256 + slack, max_tokens=256, finish="length")
    assert overrun(at) == []
    past = completion(tokens=256, local=257 + slack, max_tokens=256, finish="length")
    assert overrun(past) == [257 + slack]


def test_overrun_after_eos_reports_the_tail_once():
    c = completion(HEALTHY_TEXT + "<|im_end|> and the draft block kept going")
    found = check(c)
    assert "overrun" in [v.code for v in found]
    assert "special-token-leak" not in [v.code for v in found]
    v = next(v for v in found if v.code == "overrun")
    assert "»<|im_end|>«" in v.evidence["excerpt"]


def test_trailing_eos_alone_is_a_special_token_leak_not_an_overrun():
    found = codes(completion(HEALTHY_TEXT + "<|im_end|>\n"))
    assert "special-token-leak" in found and "overrun" not in found


# --- role-leak / special-token-leak -------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "1user:user:",
        "user: what is the capital of France?",
        HEALTHY_TEXT + "\nuser: and what about the budget?",
        HEALTHY_TEXT + "\n<|im_start|>user\nmore",
        HEALTHY_TEXT + "\nuser\nWhat about the budget?",
        HEALTHY_TEXT + "\n\nHuman: thanks\n\nAssistant: you are welcome",
        "[INST] repeat the question [/INST] " + HEALTHY_TEXT,
        HEALTHY_TEXT + " <start_of_turn>user",
        HEALTHY_TEXT + " assistant: assistant: again",
    ],
)
def test_role_leak_detected(text):
    found = check(completion(text), min_tokens=1)
    v = next(v for v in found if v.code == "role-leak")
    assert "»" in v.evidence["excerpt"] and "«" in v.evidence["excerpt"]


def test_role_leak_dialogue_boundary_one_speaker_at_line_starts_is_no_dialogue():
    # a capitalised role word at a line start leaks only as a dialogue: a different role
    # at another line start; one speaker's lines ("User: ..." twice) are prose
    healthy = HEALTHY_TEXT + "\nUser: hi\nUser: again"
    assert "role-leak" not in codes(completion(healthy), min_tokens=1)
    leak = completion(HEALTHY_TEXT + "\nUser: hi\nAssistant: again")
    (v,) = [v for v in check(leak, min_tokens=1) if v.code == "role-leak"]
    assert v.message.endswith("dialogue turns 'User:' and 'Assistant:' at line starts"), v.message


def test_role_leak_evidence_marks_the_match():
    c = completion("The answer follows.\nuser: what about the next line?")
    v = next(v for v in check(c) if v.code == "role-leak")
    assert v.evidence["excerpt"] == "The answer follows.\\n»user:« what about the next line?"


def test_role_markers_can_be_narrowed_and_extended():
    leak = completion(HEALTHY_TEXT + "\nuser: more please")
    assert "role-leak" not in codes(leak, role_markers=("<|im_start|>",))
    custom = completion(HEALTHY_TEXT + " <<SYS>> hidden")
    assert "role-leak" not in codes(custom)
    assert "role-leak" in codes(custom, role_markers=("<<SYS>>",))


def test_special_token_leak_lists_tokens_and_counts():
    c = completion(HEALTHY_TEXT + "<|endoftext|><|endoftext|>")
    v = next(v for v in check(c) if v.code == "special-token-leak")
    assert v.evidence["tokens"] == {"<|endoftext|>": 2}


def test_tokenizer_special_tokens_are_merged_but_not_html_tags():
    class Counter(FakeCounter):
        special_tokens = ("<|fim_middle|>", "</s>", "<s>", "<think>")

    assert "special-token-leak" in codes(
        completion(HEALTHY_TEXT + " <|fim_middle|>"), counter=Counter()
    )
    html = completion("Use <s>strike</s> for deleted text. " + HEALTHY_TEXT)
    assert "special-token-leak" not in codes(html, counter=Counter())


def test_special_tokens_can_be_replaced():
    c = completion(HEALTHY_TEXT + " <|endoftext|>")
    assert "special-token-leak" not in codes(c, special_tokens=())


# --- reasoning ---------------------------------------------------------------


def test_think_tags_in_content_leak_when_thinking_is_off():
    c = completion("<think>the user wants a poem</think>\n" + HEALTHY_TEXT)
    assert "reasoning-leak" in codes(c)
    assert "reasoning-leak" not in codes(c, thinking=True)


def test_thinking_process_preamble_leaks():
    c = completion("**Thinking Process:**\n\n1. Analyze the request.\n" + HEALTHY_TEXT)
    assert "reasoning-leak" in codes(c)


def test_reasoning_content_while_thinking_is_off():
    c = completion(HEALTHY_TEXT, reasoning="Let me plan the answer first.")
    assert "reasoning-leak" in codes(c)
    assert check(c, thinking=True) == []


def test_reasoning_only():
    c = completion("", reasoning=HEALTHY_TEXT)
    found = check(c, thinking=True)
    assert [v.code for v in found] == ["reasoning-only"]
    assert "empty" not in codes(c)


# --- usage-mismatch ------------------------------------------------------------


def test_usage_total_must_be_prompt_plus_completion():
    usage = Usage(20, 84, 120)
    v = next(v for v in check(completion(usage=usage)) if v.code == "usage-mismatch")
    assert v.evidence == {"total_tokens": 120, "prompt_tokens": 20, "completion_tokens": 84}


def test_reasoning_tokens_above_completion_tokens():
    c = completion(usage=Usage(20, 84, 104, reasoning_tokens=90))
    assert "usage-mismatch" in codes(c)


def test_usage_against_local_count_with_tolerance():
    n = 84  # fake count of HEALTHY_TEXT
    # tolerance 2 + 2% (measured drift: the end-of-turn token, nothing else)
    assert "usage-mismatch" not in codes(
        completion(usage=Usage(20, n + 3, n + 23), tokens=n + 3), counter=FakeCounter()
    )
    assert "usage-mismatch" in codes(
        completion(usage=Usage(20, n + 5, n + 25), tokens=n + 5), counter=FakeCounter()
    )
    c = completion(usage=Usage(20, 2 * n, 20 + 2 * n), tokens=2 * n)
    v = next(v for v in check(c, counter=FakeCounter()) if v.code == "usage-mismatch")
    assert v.evidence["completion_tokens"] == 2 * n and v.evidence["local_count"] == n


def test_usage_against_approximation_only_flags_gross_errors():
    class Approx(FakeCounter):
        exact = False
        source = "approximation"

    n = 84
    assert "usage-mismatch" not in codes(
        completion(usage=Usage(20, 2 * n, 20 + 2 * n), tokens=2 * n), counter=Approx()
    )
    assert "usage-mismatch" in codes(completion(usage=Usage(20, 5, 25), tokens=5), counter=Approx())


def test_usage_uses_the_completions_own_local_count_without_counter():
    c = completion(usage=Usage(20, 30, 50), local=84)
    assert "usage-mismatch" in codes(c)


# --- degenerate / non-printable -------------------------------------------------------


def test_degenerate_phrase_loop():
    text = HEALTHY_TEXT + " and then" + " the model said the same thing" * 80
    v = next(v for v in check(completion(text, tokens=200)) if v.code == "degenerate")
    assert v.evidence["repeated_4gram_share"] > 0.6
    assert "x" in v.evidence["most_repeated"]


def test_degenerate_single_token_loop_without_spaces():
    assert "degenerate" in codes(completion("!" * 1200, tokens=300, max_tokens=512))


def test_short_repetition_is_not_degenerate():
    assert "degenerate" not in codes(completion("ha " * 20, tokens=27))


def test_non_printable():
    text = "\x00\x07\x1b" * 50 + HEALTHY_TEXT[:40]
    assert "non-printable" in codes(completion(text, tokens=60))
    assert "non-printable" not in codes(completion(HEALTHY_TEXT + "\n\tcafé 😀 \u200d"))


def test_replacement_characters_count_as_non_printable():
    assert "non-printable" in codes(completion("\ufffd" * 40 + " ok", tokens=12))


# --- stats ----------------------------------------------------------------------


def stats(**kw):
    base = {
        "dialect": "ddtree",
        "tree_budget": 64,
        "decode_rounds": 21,
        "mean_acceptance_length": 4.0,
        "block_size": 16,
    }
    base.update(kw)
    return SpecStats(**base)


def test_budget_mismatch():
    v = next(
        v for v in check(completion(stats=stats(tree_budget=16))) if v.code == "budget-mismatch"
    )
    assert v.evidence["requested"] == 64 and v.evidence["echoed"] == 16
    assert "budget-mismatch" not in codes(completion(stats=stats(tree_budget=None)))
    assert "budget-mismatch" not in codes(
        completion(stats=stats(tree_budget=16)), expected_tree_budget=16
    )


@pytest.mark.parametrize(
    "kw",
    [
        {"mean_acceptance_length": 0.5},
        {"mean_acceptance_length": 18.0, "decode_rounds": 5},
        {"mean_acceptance_length": 2.0},  # 2 x 21 = 42 tokens, 84 came back
        {"mean_acceptance_length": float("nan")},
        {"decode_rounds": 0},
        {"num_draft_tokens": 10, "num_accepted_draft_tokens": 11},
    ],
)
def test_stats_inconsistent(kw):
    assert "stats-inconsistent" in codes(completion(stats=stats(**kw)))


def test_acceptance_claiming_more_tokens_than_returned_is_inflated():
    c = completion(stats=stats(mean_acceptance_length=8.0))  # 8 x 21 = 168 > 84
    v = next(v for v in check(c) if v.code == "stats-inflated")
    assert v.evidence["acceptance_x_rounds"] == 168.0


def test_block_size_from_expectation():
    c = completion(stats=stats(mean_acceptance_length=8.4, decode_rounds=10, block_size=None))
    assert "stats-inconsistent" not in codes(c)
    assert "stats-inconsistent" in codes(c, block_size=4)


def test_server_rate_against_client_rate():
    # 84 tokens over 40 chunks in 0.5 s: the client sees ~166 tokens/s
    fast = completion(stream=True, stats=stats(server_tokens_per_second=600.0))
    v = next(v for v in check(fast) if v.code == "stats-inflated")
    assert v.evidence["ratio"] > 3
    fair = completion(stream=True, stats=stats(server_tokens_per_second=200.0))
    assert "stats-inflated" not in codes(fair)
    assert "stats-inflated" not in codes(fast, tps_tolerance=5.0)


def test_server_rate_is_compared_over_the_content_events_not_the_tail_after_them():
    # 84 tokens in 40 content events over 0.5 s (~166 tokens/s), then a 0.6 s pause before the
    # last byte (the usage and [DONE] events): the server's 300 tokens/s stopped its clock at
    # its last token, so the pause is no decode, on either side
    c = completion(stream=True, stats=stats(server_tokens_per_second=300.0))
    c = replace(c, timings=replace(c.timings, done=c.timings.chunk_times[-1] + 0.6))
    assert c.decode_tokens_per_second is not None and 300.0 / c.decode_tokens_per_second > 2
    assert "stats-inflated" not in codes(c)
    v = next(v for v in check(c, tps_tolerance=1.5) if v.code == "stats-inflated")
    assert v.evidence["content_seconds"] == 0.5 and 1.5 < v.evidence["ratio"] < 2


def test_server_rate_not_compared_when_events_arrive_faster_than_transport_overhead():
    # 40 events 0.1 ms apart, then one 60 ms hiccup: the client cannot verify a
    # compute-only server rate through HTTP at that speed
    c = completion(stream=True, stats=stats(server_tokens_per_second=100000.0))
    times = (*(1.0 + 0.0001 * i for i in range(39)), 1.0 + 0.0039 + 0.06)
    c = replace(c, timings=replace(c.timings, chunk_times=times))
    assert "stats-inflated" not in codes(c)
    assert "stats-inflated" in codes(c, tps_min_gap=0.00001)


def test_server_rate_not_compared_on_too_few_chunks_or_too_short_spans():
    few = completion(stream=True, chunk_count=4, stats=stats(server_tokens_per_second=6000.0))
    assert "stats-inflated" not in codes(few)
    short = completion(stream=True, chunk_span=0.01, stats=stats(server_tokens_per_second=1e6))
    assert "stats-inflated" not in codes(short)


# --- stream ---------------------------------------------------------------------


def test_stream_without_done():
    c = completion(stream=True, stream_info=StreamInfo(events=43, done_seen=False, finish_chunks=1))
    assert codes(c) == ["stream-integrity"]


@pytest.mark.parametrize("finish_chunks", [0, 2])
def test_stream_needs_exactly_one_finish_chunk(finish_chunks):
    c = completion(
        stream=True, stream_info=StreamInfo(events=43, done_seen=True, finish_chunks=finish_chunks)
    )
    v = next(v for v in check(c) if v.code == "stream-integrity")
    assert str(finish_chunks) in v.message


def test_stream_unparseable_chunk():
    c = completion(
        stream=True,
        stream_info=StreamInfo(
            events=43, done_seen=True, finish_chunks=1, parse_errors=('{"choices": [',)
        ),
    )
    assert "stream-integrity" in codes(c)


def test_stream_error_event_and_aborted_stream_reported_once():
    info = StreamInfo(
        events=12,
        done_seen=True,
        finish_chunks=0,
        error_events=({"error": {"message": "CUDA OOM", "type": "server_error"}},),
    )
    c = completion(stream=True, stream_info=info, error="in-band error event")
    found = check(c)
    assert [v.code for v in found] == ["stream-error"]
    assert "CUDA OOM" in found[0].message


def test_stream_without_events():
    c = completion(stream=True, stream_info=StreamInfo(events=0, done_seen=False, finish_chunks=0))
    assert codes(c) == ["stream-integrity"]


# --- skip, expectation, assert_valid -------------------------------------------------


def test_skip_removes_codes():
    c = completion("1user:user:", tokens=4)
    assert set(codes(c)) == {"early-stop", "role-leak"}
    assert codes(c, skip={"role-leak"}) == ["early-stop"]
    assert codes(c, skip={"role-leak", "early-stop"}) == []


def test_expectation_object_and_keyword_overrides():
    e = Expectation(min_tokens=100)
    c = completion()
    assert "early-stop" in codes(c, e)
    assert check(c, e, min_tokens=10) == []


def test_assert_valid_lists_every_violation():
    c = completion("1user:user:", tokens=4)
    with pytest.raises(InvariantError) as info:
        assert_valid(c)
    text = str(info.value)
    assert "early-stop" in text and "role-leak" in text
    assert "1»user:«user:" in text
    assert "tree_budget=64" in text
    assert info.value.codes == ["early-stop", "role-leak"]
    assert_valid(completion())


def test_assert_valid_hides_its_frame():
    import pytest_ddtree.checks.invariants._core as core

    assert core.assert_valid.__code__.co_varnames[0] == "completion"
    assert "__tracebackhide__" in core.assert_valid.__code__.co_varnames


def test_check_is_deterministic():
    c = completion("1user:user:" + HEALTHY_TEXT + "<|endoftext|>", tokens=300, max_tokens=256)
    assert check(c) == check(c)


def test_check_does_not_mutate_the_completion():
    c = completion(stream=True)
    before = replace(c)
    check(c, counter=FakeCounter())
    assert c == before


# --- bad input gets one clear line ----------------------------------------------------


def test_unknown_expectation_name_is_named():
    with pytest.raises(TypeError, match="unknown expectation 'min_token'"):
        check(completion(), min_token=3)


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"skip": {"role-leek"}}, "unknown check code 'role-leek'"),
        ({"min_tokens": -1}, "min_tokens=-1"),
        ({"min_tokens": True}, "min_tokens=True"),
        ({"usage_tolerance": float("nan")}, "usage_tolerance=nan"),
        ({"tps_tolerance": 0.5}, "tps_tolerance=0.5"),
        ({"degenerate_compression": 0}, "degenerate_compression=0"),
        ({"role_markers": 3}, "role_markers=3"),
    ],
)
def test_bad_expectation_values_are_named(kw, fragment):
    with pytest.raises((ValueError, TypeError)) as info:
        Expectation(**kw)
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_plain_strings_and_lists_are_accepted_for_sets():
    e = Expectation(skip=["role-leak"], allowed_finish_reasons="stop", role_markers=["user:"])
    assert e.skip == frozenset({"role-leak"})
    assert e.allowed_finish_reasons == frozenset({"stop"})
    assert e.role_markers == ("user:",)


def test_a_failing_counter_does_not_break_the_checks():
    class Broken(FakeCounter):
        def count(self, text):
            raise RuntimeError("tokenize endpoint down")

    assert check(completion(), counter=Broken()) == []
    assert "early-stop" in codes(completion("Unit 1.", tokens=4), counter=Broken())


def test_expectation_from_mapping_names_its_source():
    e = Expectation.from_mapping({"min_tokens": 64, "thinking": True}, source="prompts.json")
    assert e.min_tokens == 64 and e.thinking
    with pytest.raises(ValueError, match=r"^prompts.json, prompt 'essay': unknown expectation"):
        Expectation.from_mapping({"min_token": 1}, source="prompts.json, prompt 'essay'")
    with pytest.raises(ValueError, match=r"^p: expectation min_tokens='8'"):
        Expectation.from_mapping({"min_tokens": "8"}, source="p")
    with pytest.raises(ValueError, match="expected a mapping"):
        Expectation.from_mapping([1], source="p")  # type: ignore[arg-type]


def test_llamacpp_timings_of_the_wrong_type_name_the_field():
    raw = {"predicted_n": 84, "predicted_per_second": "fast", "draft_n": 30, "draft_n_accepted": 9}
    bad = SpecStats(dialect="llamacpp", num_draft_tokens=30, num_accepted_draft_tokens=9, raw=raw)
    found = [v for v in check(completion(stats=bad)) if v.code == "stats-inconsistent"]
    assert [v.evidence["field"] for v in found] == ["timings.predicted_per_second"]
    assert "'fast'" in found[0].message
    healthy = SpecStats(
        dialect="llamacpp",
        num_draft_tokens=30,
        num_accepted_draft_tokens=9,
        raw={**raw, "predicted_per_second": 41.5},
    )
    assert check(completion(stats=healthy)) == []


def test_hidden_overrun_with_an_exact_tokenizer():
    """A server whose usage hides a 7-token draft block past max_tokens=96 still fails."""
    text = " ".join(f"w{i}" for i in range(77))  # 103 tokens for the fake exact counter
    assert FakeCounter().count(text) == 103
    hidden = completion(text, tokens=96, max_tokens=96, finish="length", local="auto")
    found = {v.code: v for v in check(hidden, counter=FakeCounter())}
    assert "overrun" in found and "usage-mismatch" in found
    assert found["overrun"].evidence["reported_completion_tokens"] == 96
    assert found["overrun"].evidence["completion_tokens"] == 103
    # the end-of-turn token a server counts but does not return is not an overrun
    honest = " ".join(f"w{i}" for i in range(72))  # 96 tokens
    ok = completion(honest, tokens=97, max_tokens=100, finish="stop")
    assert check(ok, counter=FakeCounter()) == []


def test_a_sampled_answer_may_re_tokenize_to_a_few_more_tokens_than_it_was() -> None:
    # real n-gram vLLM at temperature 0.7: 96 tokens generated (max_tokens 96, reported),
    # and the text re-tokenized by the server's own /tokenize counts 100: the sampler chose
    # a split the tokenizer would not make; greedy, the same counts are an overrun
    sampled = completion(tokens=96, max_tokens=96, finish="length", local=100, temperature=0.7)
    assert "overrun" not in [v.code for v in check(sampled)]
    greedy = completion(tokens=96, max_tokens=96, finish="length", local=100)
    v = next(v for v in check(greedy) if v.code == "overrun")
    assert "100 completion tokens counted in the text exceed max_tokens=96" in v.message
    # a whole extra block (16 tokens) is past any drift, sampled or not
    block = completion(tokens=96, max_tokens=96, finish="length", local=112, temperature=0.7)
    assert "overrun" in [v.code for v in check(block)]


def test_a_sampled_answers_usage_is_judged_with_the_drift_of_re_tokenization() -> None:
    # real n-gram vLLM at temperature 1.0: usage 96, the text counts 92 (beyond ±4)
    sampled = completion(tokens=96, max_tokens=96, finish="length", local=92, temperature=1.0)
    assert "usage-mismatch" not in [v.code for v in check(sampled)]
    greedy = completion(tokens=96, max_tokens=96, finish="length", local=92)
    assert "usage-mismatch" in [v.code for v in check(greedy)]
    # counts far apart still fail when sampled
    far = completion(tokens=96, max_tokens=96, finish="length", local=70, temperature=1.0)
    assert "usage-mismatch" in [v.code for v in check(far)]
