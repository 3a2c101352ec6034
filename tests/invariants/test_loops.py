"""The loop at the end of an answer: found on token ids, characters or numbered list items,
judged by how the answer ended, and shown so a person can read it."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pytest_ddtree.checks.invariants import Expectation, check
from pytest_ddtree.checks.invariants._loop import (
    char_loop,
    list_loop,
    readable_unit,
    tail_periods,
    token_loop,
)

from .factories import HEALTHY_TEXT, RecordedCounter, completion, fake_count


class FailingCounter(RecordedCounter):
    """A server counter whose /tokenize went away."""

    def encode(self, text: str) -> list[int] | None:
        raise RuntimeError("http://127.0.0.1:9/tokenize failed: ConnectError")


def degenerate(text: str, finish: str = "length", counter: object = None, **expect: object):
    c = completion(text, tokens=max(1, fake_count(text)), max_tokens=96, finish=finish)
    found = [v for v in check(c, counter=counter, min_tokens=1, **expect) if v.code == "degenerate"]
    return found[0] if found else None


# --- the period search ------------------------------------------------------------------


def test_tail_periods_finds_the_shortest_unit_and_its_span():
    assert (3, 14) in tail_periods("hello world abcabcabcabcab", 40, 4)
    assert tail_periods("a" * 100, 40, 4) == [(1, 100)]  # multiples of 1 are skipped
    assert tail_periods("the end of a healthy sentence.", 40, 4) == []


def test_token_loop_counts_whole_units_and_places_the_start():
    ids = [7, 8, 9] + [1, 2, 3, 4] * 5 + [1, 2]
    text = "abc" + "wxyz" * 5 + "wx"
    loop = token_loop(ids, text)
    assert loop is not None
    assert (loop.kind, loop.period, loop.repeats, loop.start) == ("tokens", 4, 5, 3)
    assert loop.unit == "wxyz" and loop.char_start == 3


def test_token_loop_tolerates_a_last_token_split_differently():
    ids = [5, 6] + [1, 2] * 10 + [99]  # the cut answer's last token, re-tokenised
    loop = token_loop(ids, "ab" + "xy" * 10 + "x")
    assert loop is not None and loop.period == 2 and loop.repeats == 10


def test_token_loop_rejects_what_is_not_token_ids():
    assert token_loop(["a", "a", "a", "a", "a", "a", "a"], "x") is None  # type: ignore[list-item]


def test_char_loop_leaves_rules_of_dashes_to_the_tokenizer():
    table = "| a | b |\n|" + "-" * 60
    assert char_loop(table, 3, 20) is None
    assert char_loop("12" + "0" * 60, 3, 20) is not None


def test_char_loop_weighs_any_script_in_bytes():
    assert char_loop("答" + "穷" * 8, 3, 20) is not None  # 24 bytes
    assert char_loop("a" + "x" * 8, 3, 20) is None  # 8 bytes


def test_list_loop_masks_the_ordinal_only():
    grey = "1. Red\n2. Blue\n" + "".join(f"{i}. Grey\n" for i in range(3, 12))
    loop = list_loop(grey, 3)
    assert loop is not None and loop.period == 1 and loop.repeats == 9
    assert loop.unit == "3. Grey\n" and grey[loop.char_start :].startswith("3. Grey")
    counting = "".join(f"{i}. {i}\n" for i in range(1, 30))
    assert list_loop(counting, 3) is None


def test_list_loop_unit_starts_at_its_numbered_line():
    tips = "".join(f"{i}. Use a timer.\n\n" for i in range(1, 8))
    loop = list_loop(tips, 3)
    assert loop is not None and loop.period == 2
    assert loop.unit.startswith("1. Use a timer.")


def test_readable_unit_starts_at_a_line_or_a_word():
    text = "rows:\n| 1 | a |\n| 2 | b |\n| 2 | b |\n| 2 | b |\n"
    at = text.index("b |\n| 2")  # a loop found mid-row
    unit, start = readable_unit(text, at, len("| 2 | b |\n"))
    assert unit == "| 2 | b |\n" and text[start - 1] == "\n"
    text = "a fleeting sight, a fleeting sight, a fleeting sight, "
    unit, start = readable_unit(text, 4, 18)  # found mid-word
    assert text[start - 1] == " " and unit == text[start : start + 18]


@settings(max_examples=200, deadline=None)
@given(
    head=st.lists(st.integers(0, 50), max_size=20),
    unit=st.lists(st.integers(0, 50), min_size=1, max_size=8),
    times=st.integers(0, 12),
    cut=st.integers(0, 7),
)
def test_a_reported_token_loop_is_really_periodic(head, unit, times, cut):
    ids = head + unit * times + unit[: cut % len(unit)]
    loop = token_loop(ids, "x" * len(ids))
    # no loop reported: nothing to prove here (rejected, not passed; a finder that never
    # reports one leaves no example and fails the test)
    assume(loop is not None)
    run = ids[loop.start : loop.start + loop.span]
    assert len(run) == loop.span and loop.repeats >= 2
    assert all(run[i] == run[i - loop.period] for i in range(loop.period, len(run)))


# --- the rule: how the answer ended -----------------------------------------------------

DIGITS = "1" + "0" * 95  # SmolLM2's "Pi to 50 decimal places:" at temperature 0


def test_a_digit_run_cut_by_max_tokens_is_degenerate_at_any_length():
    v = degenerate(DIGITS)
    assert v is not None and len(DIGITS) < Expectation().degenerate_min_chars
    assert v.evidence["loop_unit"] == "»0«" and v.evidence["loop_repeats"] == 95
    assert v.evidence["loop_period_characters"] == 1
    assert "output loops until max_tokens" in v.message


def test_the_same_text_that_stopped_by_itself_needs_stronger_evidence():
    assert degenerate(DIGITS, finish="stop") is None
    row = "| Butter | 1 tablespoon | 1 |\n"
    assert degenerate("| Item | Price |\n" + row * 4, finish="stop") is None
    assert degenerate("| Item | Price |\n" + row * 4) is not None


def test_two_repeats_are_not_a_loop_three_are():
    sentence = "It is a simple example of a table of five countries. "
    assert degenerate("Intro. " + sentence * 2 + "It is") is None
    assert degenerate("Intro. " + sentence * 3 + "It is") is not None


def test_the_repeat_count_is_an_expectation():
    row = "| Butter | 1 tablespoon | 1 |\n"
    text = "| Item | Price |\n" + row * 3
    assert degenerate(text) is not None
    assert degenerate(text, degenerate_loop_repeats=4) is None
    with pytest.raises(ValueError, match="degenerate_loop_repeats=1"):
        Expectation(degenerate_loop_repeats=1)


def test_token_ids_are_used_when_the_counter_gives_them():
    text = "Intro: " + "ab" * 30
    ids = [9, 9] + [4, 5] * 30
    v = degenerate(text, counter=RecordedCounter(text, ids))
    assert v is not None
    assert v.evidence["loop_period_tokens"] == 2 and v.evidence["loop_repeats"] == 30
    assert v.evidence["loop_starts_at"] == "token 3 of 62 (character 8)"
    assert v.evidence["loop_unit"] == "»ab«" and "from token 3 of 62" in v.message
    # the same text whose tokens do not repeat (the tokenizer merged them differently)
    assert degenerate(text, counter=RecordedCounter(text, list(range(40)))) is None


@pytest.mark.parametrize("counter", [RecordedCounter("other", [1]), FailingCounter("", None)])
def test_without_ids_the_characters_decide_and_nothing_raises(counter):
    v = degenerate(DIGITS, counter=counter)
    assert v is not None and v.evidence["loop_period_characters"] == 1


def test_a_numbered_list_repeating_its_item_is_degenerate():
    text = "1. Red\n2. Blue\n" + "".join(f"{i}. Grey\n" for i in range(3, 22))
    v = degenerate(text)
    assert v is not None and v.evidence["loop_period_lines"] == 1
    assert v.evidence["loop_unit"] == "»3. Grey\\n«"
    assert "lines of a numbered list" not in v.message  # one line: singular
    assert "(1 line of a numbered list)" in v.message


@pytest.mark.parametrize(
    "text",
    [
        "".join(f"{i}. {i}\n" for i in range(1, 40)),
        "| n | square |\n|---|---|\n" + "".join(f"| {i} | {i * i} |\n" for i in range(1, 30)),
        "".join(f"    case {i}: return handle_{i}(event);\n" for i in range(40)),
        "| a | b | c | d | e | f | g | h |\n|---|---|---|---|---|---|---|---|\n|---",
        HEALTHY_TEXT + " The answer is 1000000000000",
        HEALTHY_TEXT + " " + "=" * 80,
    ],
    ids=["counting", "squares-table", "switch", "separator", "big-number", "rule"],
)
def test_healthy_structured_text_cut_by_max_tokens_is_not_degenerate(text):
    assert degenerate(text) is None
