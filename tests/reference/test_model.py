"""The model and the DDTree algorithm, exercised directly (no HTTP) for speed."""

from __future__ import annotations

import itertools

import pytest

from pytest_ddtree.reference import tokenizer_path
from pytest_ddtree.reference._corpus import TOPICS
from pytest_ddtree.reference._tables import TABLE_NAMES
from pytest_ddtree.reference.model import ReferenceModel

BUDGETS = (1, 2, 3, 5, 8, 16, 32, 64, 128, 256, 512, 1024)


def _prompts() -> list[str]:
    shapes = (
        "Write a long essay about {w}.",
        "What is a {w}?",
        "List 5 facts about {w}.",
        "Tell me about the {w}.",
    )
    out = [s.format(w=t.keywords[0]) for t, s in itertools.product(TOPICS, shapes)]
    out += [
        "Write a Python function that counts the rows.",
        "What is seven plus five?",
        "What is the capital of Norland?",
        "Explain in detail how a program handles a request.",
        "Hello!",
        "",
    ]
    return out


PROMPTS = _prompts()


def _decode(
    model: ReferenceModel,
    prompt: str,
    budget: int | None,
    *,
    max_tokens: int = 128,
    think: bool = False,
    temperature: float = 0.0,
    seed: int | None = None,
) -> tuple[list[int], int]:
    plan = model.plan(
        prompt,
        model.render_chat([("user", prompt)], think),
        think=think,
        temperature=temperature,
        seed=seed,
    )
    ids: list[int] = []
    rounds = 0
    for rd in model.generate(plan, max_tokens, budget):
        ids += rd.tokens
        rounds += 1
    return ids[:max_tokens], rounds


def test_the_lossless_prompts_reach_every_answer_table(model: ReferenceModel) -> None:
    # the model routes each prompt to the table it answers from: the prompts below must
    # reach every one (each topic in prose and as a list, code, arithmetic, facts) and
    # every answer shape, or the lossless test leaves part of the model unproved
    plans = [model.plan(p, model.render_chat([("user", p)], False)) for p in PROMPTS]
    answers = {n for n in TABLE_NAMES if not n.endswith(":reasoning")}
    assert {TABLE_NAMES[p.table] for p in plans} == answers
    shapes = {(p.max_sentences is None, p.list_items is not None) for p in plans}
    assert shapes == {(True, False), (False, False), (False, True)}  # long, short, list


@pytest.mark.parametrize("prompt", PROMPTS)
def test_lossless_at_temperature_zero(model: ReferenceModel, prompt: str) -> None:
    think = len(prompt) % 3 == 0  # a third of the prompts also run with thinking on
    reference, _ = _decode(model, prompt, None, think=think)
    assert len(reference) >= 8
    for budget in BUDGETS:
        out, _ = _decode(model, prompt, budget, think=think)
        assert out == reference, f"budget {budget} diverges at token " + str(
            next(i for i, (a, b) in enumerate(zip(out, reference, strict=False)) if a != b)
            if any(a != b for a, b in zip(out, reference, strict=False))
            else min(len(out), len(reference))
        )


@pytest.mark.parametrize("prompt", PROMPTS[::6])
def test_lossless_when_sampling_with_a_seed(model: ReferenceModel, prompt: str) -> None:
    reference, _ = _decode(model, prompt, None, temperature=0.8, seed=11)
    assert reference == _decode(model, prompt, None, temperature=0.8, seed=11)[0]
    for budget in (1, 16, 128, 1024):
        assert _decode(model, prompt, budget, temperature=0.8, seed=11)[0] == reference


def test_acceptance_rises_with_budget_and_saturates(model: ReferenceModel) -> None:
    long_prompts = [p for p in PROMPTS if p.startswith(("Write a long", "Explain"))]
    tau = {}
    for budget in (1, 16, 32, 64, 256, 512, 1024):
        tokens = rounds = 0
        for p in long_prompts:
            ids, r = _decode(model, p, budget)
            tokens += len(ids)
            rounds += r
        tau[budget] = tokens / rounds
    assert tau[1] < tau[16] < tau[32] < tau[64] < tau[256] < tau[512] < tau[1024]
    assert tau[1024] - tau[512] < tau[32] - tau[16]  # saturating
    assert tau[1] > 1.3 and tau[1024] < 16


def test_tree_is_best_first_and_nested(model: ReferenceModel) -> None:
    c2, c3 = model.encode(" the river")[-2:]
    trees = {b: model.build_tree(c2, c3, b, 16) for b in (1, 7, 64, 300)}
    for budget, tree in trees.items():
        assert tree.nodes == budget
        assert len(tree.children) == budget  # distinct (parent, token) edges
    for small, big in itertools.pairwise(sorted(trees)):
        assert set(trees[small].children) <= set(trees[big].children)
    # depth is bounded by the block size
    deep = model.build_tree(c2, c3, 4096, 4)
    depth = {0: 0}
    for (parent, _), child in sorted(deep.children.items(), key=lambda kv: kv[1]):
        depth[child] = depth[parent] + 1
    assert max(depth.values()) == 3


def test_block_size_changes_speed_not_output(model: ReferenceModel) -> None:
    prompt = PROMPTS[0]
    plan = model.plan(prompt, model.render_chat([("user", prompt)], False))
    outs = {}
    for bs in (2, 4, 16, 32):
        ids: list[int] = []
        for rd in model.generate(plan, 96, 64, bs):
            ids += rd.tokens
        outs[bs] = ids[:96]
    assert len({tuple(v) for v in outs.values()}) == 1


def test_output_reads_as_prose_on_the_topic(model: ReferenceModel) -> None:
    for topic in TOPICS:
        prompt = f"Write a long essay about {topic.keywords[0]}."
        text = model.decode(_decode(model, prompt, 64, max_tokens=96)[0])
        words = {w.strip(".,").lower() for w in text.split()}
        lexicon = {n for pair in topic.nouns for n in pair}
        assert len(words & lexicon) >= 2, (topic.name, text)
        assert text[0].isupper() and text.count(".") >= 2
        assert not any(s in text for s in ("<|im_start|>", "<|im_end|>", "<think>"))


def test_numbered_list(model: ReferenceModel) -> None:
    text = model.decode(_decode(model, "List 4 facts about bees.", 64, max_tokens=200)[0])
    lines = text.removesuffix("<|im_end|>").split("\n")
    assert [line.split(".")[0] for line in lines] == ["1", "2", "3", "4"]


def test_tokenizer_and_template(model: ReferenceModel) -> None:
    assert tokenizer_path().is_file()
    vocab = model.tokenizer.get_vocab()
    for special in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>"):
        assert special in vocab
        assert model.encode(f"a{special}b").count(vocab[special]) == 1
    text = "Rivers carry water. ünïcode ✓ 2 + 2 = 4\n\tdone"
    assert model.decode(model.encode(text)) == text
    rendered = model.render_chat([("system", "Be brief."), ("user", "Hi")], False)
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert model.render_chat([("user", "Hi")], True).endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("think", [False, True])
def test_short_answers_stop_but_never_too_early(model: ReferenceModel, think: bool) -> None:
    questions = [f"What is a {t.keywords[0]}?" for t in TOPICS]
    questions += [f"Is the {t.keywords[-1]} important?" for t in TOPICS]
    questions += ["What is 3 plus 4?", "What is the capital of Osmar?", "Briefly, why rain?"]
    for q in questions:
        ids, _ = _decode(model, q, 64, max_tokens=256, think=think)
        assert ids[-1] == model.eos, q
        answer = ids[ids.index(model.think_close) + 1 : -1] if think else ids[:-1]
        text = model.decode(answer).strip()
        assert 8 <= len(model.encode(text)) <= 120, (q, text)
