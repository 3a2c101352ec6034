"""Real loops of every shape from llama.cpp with SmolLM2-135M, at temperature 0.

Each prompt below makes the model repeat one unit until ``max_tokens``: a digit, a table
row, a code line, a numbered list item, a JSON value, a dialogue turn, a phrase in Arabic.
``degenerate`` must flag each one, with the server's own ``/tokenize`` (the loop measured
on token ids) and without any tokenizer (on characters), and must leave the healthy answers
of the same shapes alone. Temperature 0 with one thread: the pinned engine build and model
answer the same every run (``benchmarks/calibrate_real_text.py`` recorded these answers).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from pytest_ddtree import engines
from pytest_ddtree.checks.invariants import check
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.tokens import ServerCounter

pytestmark = pytest.mark.real_engine

# (shape, prompt, max_tokens, the unit the loop repeats)
LOOPS = [
    ("digits", "Pi to 50 decimal places:", 96, "0"),
    (
        "table",
        "Create a table with three columns: item, price, quantity, for a grocery list.",
        128,
        "| Butter | 1 tablespoon | 1 |\n",
    ),
    ("code", "Write an HTML list of ten fruits.", 128, "    <li>Orange</i>\n"),
    ("numbered list", "List 30 colours, one per line, numbered.", 96, ". Grey\n"),
    (
        "json",
        "Return a JSON object describing a book, with title, author, year and chapters.",
        96,
        "A.",
    ),
    (
        "dialogue",
        "Write a dialogue between a cat and a dog.",
        128,
        "CAT: (cat's ears perk up again)",
    ),
    ("non-Latin", "اكتب جملة عن الطقس.", 96, "جملة الطقس، "),
]

HEALTHY = [
    ("digits", "Count from 1 to 50 with no spaces between the numbers.", 96),
    (
        "table",
        "Make a markdown table of five students and their scores in math, science and art.",
        128,
    ),
    ("json", "Return a JSON list of the seven days of the week.", 128),
    ("dialogue", "Write a dialogue between a doctor and a patient.", 96),
]


@pytest.fixture(scope="module")
def client(target: engines.LlamaCppServer) -> Iterator[DDTreeClient]:
    fresh = httpx.HTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
    with httpx.Client(timeout=60, transport=fresh) as http:
        counter = ServerCounter(target.root_url, http, shape="llamacpp")
        with DDTreeClient(
            target.base_url,
            model=target.model,
            budget_mode="none",
            counter=counter,
            transport=httpx.HTTPTransport(limits=httpx.Limits(max_keepalive_connections=0)),
        ) as c:
            yield c


@pytest.mark.parametrize("shape, prompt, max_tokens, unit", LOOPS, ids=[s for s, *_ in LOOPS])
def test_a_real_loop_of_each_shape_is_degenerate(
    client: DDTreeClient, shape: str, prompt: str, max_tokens: int, unit: str
) -> None:
    c = client.chat(prompt, max_tokens=max_tokens, stream=False)
    assert c.finish_reason == "length", c.text
    found = {v.code: v for v in check(c, counter=client.counter)}
    assert "degenerate" in found, c.text
    v = found["degenerate"]
    assert "output loops until max_tokens" in v.message
    assert v.evidence["loop_repeats"] >= 3
    shown = unit.replace("\n", "\\n")  # evidence is on one line, breaks made visible
    assert shown in v.evidence["loop_unit"], v.format()
    # the period in tokens, unless a numbered list (its ordinal counts up: not verbatim)
    key = "loop_period_lines" if shape == "numbered list" else "loop_period_tokens"
    assert v.evidence[key] >= 1 and "(character " in v.evidence["loop_starts_at"]
    # without a tokenizer the characters tell the same
    assert "degenerate" in [x.code for x in check(c)], c.text


@pytest.mark.parametrize("shape, prompt, max_tokens", HEALTHY, ids=[s for s, *_ in HEALTHY])
def test_healthy_answers_of_the_same_shapes_are_not_degenerate(
    client: DDTreeClient, shape: str, prompt: str, max_tokens: int
) -> None:
    c = client.chat(prompt, max_tokens=max_tokens, stream=False)
    assert "degenerate" not in [v.code for v in check(c, counter=client.counter)], c.text
    assert "degenerate" not in [v.code for v in check(c)], c.text
