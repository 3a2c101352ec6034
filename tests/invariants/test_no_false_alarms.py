"""Healthy text that looks suspicious must pass: the corpus every pattern is tuned against."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_ddtree.checks.invariants import Expectation, check
from pytest_ddtree.checks.invariants._loop import char_periods, list_loop, token_periods
from pytest_ddtree.checks.invariants._text import loop_share, repetition

from .factories import HEALTHY_TEXT, FakeCounter, RecordedCounter, completion, fake_count

TRICKY_HEALTHY = [
    "Each user: a person who signs in, gets a session and a quota.",
    "The user: interface is the first thing people notice about the product.",
    "Ask the assistant: it will answer in the same language you used.",
    "A user:password pair in the URL is sent in clear text; avoid it.",
    "Set basic auth as user:pass only over TLS, never over plain HTTP.",
    "The superuser: root on most systems, Administrator on others.",
    "Map each end_user: account to one row in the table.",
    "At 10:30 the system: rebooted, then the logs filled up again.",
    "**Note for the user:** remember to save your work before closing.",
    "Users often ask: what is a token, and why does the count differ?",
    "The user says hello and the assistant replies with a greeting.",
    "Glossary of terms used below.\nUser: a person who uses the service.\n"
    "Administrator: a person who manages it.\nQuota: the limit on requests.",
    "Fields of the record:\n- user: the account name\n- system: the host name\n"
    "- created: the timestamp",
    "Here is the configuration:\n```yaml\nuser: admin\nsystem: linux\nassistant: none\n```\n"
    "Save it as config.yaml.",
    'services:\n  app:\n    image: web\n    user: "1000"\n    restart: always',
    '```python\nprint(f"user: {name}")\nprint("assistant:", reply)\n```',
    "See https://example.com/user:42 for the profile page.",
    "The model: a transformer with 27 billion parameters.",
    "My thought process: first list the options, then rank them by cost.",
    "Thinking about the process, the first step is always the hardest.",
    "Use <s>strike</s> for deleted text and <b>bold</b> for emphasis.",
    'Arrays are written as [1, 2, 3] and maps as {"a": 1}.',
    "In Chinese, 用户 means user: the word appears in many interfaces.",
    "Emoji such as 👩‍💻 and flags 🇫🇷 are single graphemes built from several code points.",
    "Arabic text (مرحبا) is written right to left\u200f, and the mark is invisible.",
    "The recipe:\n1. Mix the flour.\n2. Add the water.\n3. Knead for ten minutes.\n"
    "4. Let the dough rest.\n5. Bake at 220 degrees.",
    "Human: a member of the species Homo sapiens, as defined in the first chapter.",
    "The system prompt tells the assistant how to behave; the user message asks a question.",
]


@pytest.mark.parametrize("text", TRICKY_HEALTHY, ids=range(len(TRICKY_HEALTHY)))
def test_tricky_healthy_text_passes(text):
    full = HEALTHY_TEXT + "\n" + text + "\n" + HEALTHY_TEXT
    c = completion(full, tokens=fake_count(full))
    assert check(c, counter=FakeCounter()) == []


@pytest.mark.parametrize(
    "text",
    [
        "2 x 1 = 2\n"
        + "".join(f"{a} x {b} = {a * b}\n" for a in range(2, 10) for b in range(1, 11)),
        "| budget | tok/s | acceptance |\n|---|---|---|\n"
        + "".join(f"| {b} | {1000 - b // 3} | {2 + b / 600:.2f} |\n" for b in range(16, 1040, 16)),
        "def handler(event):\n"
        + "".join(
            f"    if event.kind == 'k{i}':\n        return on_k{i}(event)\n" for i in range(30)
        ),
        "Paris is the capital of France. " + HEALTHY_TEXT * 2,
    ],
    ids=["times-table", "markdown-table", "dispatch-code", "prose-twice"],
)
def test_structured_healthy_output_is_not_degenerate(text):
    c = completion(text, tokens=fake_count(text), max_tokens=2048)
    assert [v.code for v in check(c)] == []


def test_legitimate_short_answer_with_its_expectation():
    c = completion("Paris.", tokens=2)
    assert check(c, min_tokens=1) == []


REAL = json.loads((Path(__file__).with_name("real_answers.json")).read_text(encoding="utf-8"))
ANSWERS = REAL["answers"]


def _name(a: dict) -> str:
    sampled = f"-t{a['temperature']}-s{a['seed']}" if a["seed"] is not None else ""
    return f"{a['prompt']}-{a['max_tokens']}{sampled}"


def _judge(answer: dict, counter: object) -> list[str]:
    text = answer["text"]
    c = completion(
        text,
        tokens=answer["usage_completion_tokens"] or fake_count(text),
        max_tokens=answer["max_tokens"],
        finish=answer["finish_reason"],
    )
    return [v.code for v in check(c, counter=counter, min_tokens=1)]


@pytest.mark.parametrize("with_ids", [True, False], ids=["token-ids", "characters"])
@pytest.mark.parametrize("answer", ANSWERS, ids=[_name(a) for a in ANSWERS])
def test_real_model_answers(answer, with_ids):
    """A real small model's answers, judged on the token ids its server's /tokenize gave and
    without any tokenizer: its loops of every shape are degenerate (even at 64 tokens, under
    100 characters), its healthy answers, templated lists, counting and sampled text included,
    are not, nor the answers that end in a unit said only twice."""
    counter = RecordedCounter(answer["text"], answer["ids"]) if with_ids else None
    found = _judge(answer, counter)
    if answer["label"] == "loop":
        assert "degenerate" in found, answer["text"]
    else:
        assert "degenerate" not in found, answer["text"]


def _runs(answer: dict) -> tuple[int, int, int]:
    """(most whole repeats of a run over the token floor, longest run repeated often
    enough, most whole repeats of a character or list run over the byte floor)."""
    e = Expectation()
    runs = token_periods(answer["ids"])
    repeats = max(
        ((s + k) // q for q, s, k in runs if s >= e.degenerate_loop_min_tokens), default=0
    )
    span = max((s for q, s, k in runs if (s + k) // q >= e.degenerate_loop_repeats), default=0)
    chars = max(
        (s // q for q, s, b in char_periods(answer["text"]) if b >= e.degenerate_loop_min_bytes),
        default=0,
    )
    items = list_loop(answer["text"])
    return repeats, span, max(chars, items.repeats if items else 0)


def test_degenerate_has_a_clear_margin_on_real_answers():
    """On answers cut by max_tokens: every real loop repeats its unit at least 3 times over at
    least 23 tokens, or is a numbered list repeating its item; no healthy answer repeats a run
    of 16 tokens or more more than twice, and its runs repeated 3 times span at most 9 tokens
    (a counting table's "| 8 | 8 | 8 |"). The thresholds (3 repeats, 16 tokens) sit between;
    without ids, loops repeat 3 times or more on characters, healthy answers at most twice.
    Healthy answers also stay far from the word measures that judge any answer (at most
    0.10 of the words in a final loop, 57 % repeated 4-grams, compression 0.26)."""
    e = Expectation()
    assert (e.degenerate_loop_repeats, e.degenerate_loop_min_tokens) == (3, 16)
    for answer in ANSWERS:
        text = answer["text"]
        repeats, span, chars = _runs(answer)
        if answer["label"] == "loop":
            numbered = answer["shape"] == "numbered list" and repeats < 3
            assert numbered or (repeats >= 3 and span >= 23), (repeats, span, text)
            assert chars >= 3, (chars, text)
            continue
        if answer["finish_reason"] == "length":
            assert repeats <= 2 and span <= 9 and chars <= 2, (repeats, span, chars, text)
        if answer["label"] == "early":
            continue  # a sentence said twice: up to 61 % repeated 4-grams, still not a loop
        share, ratio, _ = repetition(text, e.degenerate_min_words)
        looped, _ = loop_share(text)
        assert looped <= e.degenerate_loop_share - 0.4, (looped, text)
        assert share <= e.degenerate_ngram_share - 0.2, (share, text)
        assert ratio >= e.degenerate_compression + 0.1, (ratio, text)
