"""The invariants against the reference server: silent on healthy output at every
budget, and each injected fault named by its code."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytest_ddtree.checks.invariants import (
    BudgetSample,
    check,
    check_budget_ignored,
    check_determinism,
)
from pytest_ddtree.core.settings import Timeout
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion
from pytest_ddtree.wire.tokens import TokenizerCounter

reference = pytest.importorskip("pytest_ddtree.reference")

BUDGETS = [16, 32, 64, 128, 256, 512, 1024]
SUBJECTS = [
    "rivers",
    "gardens",
    "computers",
    "cooking",
    "music",
    "railways",
    "weather",
    "bees",
    "stars",  # "astronomy" is none of its topic's words: its prompts went to other topics
    "libraries",
    "oceans",
    "mountains",
]


def _prompts() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for s in SUBJECTS:
        out += [
            {"id": f"essay-{s}", "prompt": f"Write a long essay about {s}.", "max_tokens": 96},
            {
                "id": f"question-{s}",
                "prompt": f"What is the most important thing about {s}?",
                "max_tokens": 64,
            },
            {"id": f"list-{s}", "prompt": f"List five facts about {s}.", "max_tokens": 128},
            {
                "id": f"brief-{s}",
                "prompt": f"Briefly, why do people care about {s}?",
                "max_tokens": 48,
            },
        ]
    out += [
        {
            "id": "code",
            "prompt": "Write a python function that loops over a list.",
            "max_tokens": 96,
        },
        {"id": "arithmetic", "prompt": "Calculate 12 plus 30 and show the sum.", "max_tokens": 64},
        {
            "id": "thinking",
            "prompt": "Explain how rivers shape valleys.",
            "max_tokens": 160,
            "thinking": True,
        },
        # a short factual question: its honest answer may be one short sentence
        {
            "id": "thinking-short",
            "prompt": "What is the capital of the river country?",
            "max_tokens": 128,
            "thinking": True,
            "min_tokens": 1,
        },
        {
            "id": "raw-completion",
            "prompt": "The history of the railways began when",
            "max_tokens": 64,
            "api": "completions",
        },
        {
            "id": "raw-completion-long",
            "prompt": "A detailed report on bees:",
            "max_tokens": 96,
            "api": "completions",
        },
    ]
    return out


PROMPTS = _prompts()


@pytest.fixture(scope="module")
def counter() -> TokenizerCounter:
    return TokenizerCounter(reference.tokenizer_path())


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    srv = reference.start_reference_server(simulated_latency=False, hang_seconds=3)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server: Any, counter: TokenizerCounter) -> Iterator[DDTreeClient]:
    with DDTreeClient(
        server.base_url, counter=counter, timeout=Timeout(connect=5, read=1.0, total=20)
    ) as c:
        yield c


def run(
    client: DDTreeClient,
    p: dict[str, Any],
    *,
    budget: int = 64,
    stream: bool = True,
    headers: dict[str, str] | None = None,
) -> Completion:
    extra: dict[str, Any] = {}
    if p.get("thinking"):
        extra["chat_template_kwargs"] = {"enable_thinking": True}
    return client.request(
        p["prompt"],
        api="completions" if p.get("api") == "completions" else "chat",
        max_tokens=p["max_tokens"],
        tree_budget=budget,
        stream=stream,
        prompt_id=p["id"],
        headers=headers,
        **extra,
    )


def test_prompt_set_reaches_every_answer_table_of_the_model():
    # the model answers from the table a prompt's words pick: the healthy test below is
    # silent on the whole model only if the set reaches every one (each topic in prose and
    # as a list, code, arithmetic, facts), with thinking on and off
    from pytest_ddtree.reference._tables import TABLE_NAMES
    from pytest_ddtree.reference.model import get_model

    model = get_model()
    plans = []
    for p in PROMPTS:
        think = bool(p.get("thinking"))
        rendered = model.render_chat([("user", p["prompt"])], think)
        plans.append(model.plan(p["prompt"], rendered, think=think))
    answers = {n for n in TABLE_NAMES if not n.endswith(":reasoning")}
    assert {TABLE_NAMES[plan.table] for plan in plans} == answers
    assert {plan.think for plan in plans} == {True, False}
    # each prompt is its own row in the reports
    assert len({p["id"] for p in PROMPTS}) == len(PROMPTS)


@pytest.mark.serial  # 1 s read timeout: wall-clock sensitive
@pytest.mark.parametrize("budget", BUDGETS, ids=[f"budget={b}" for b in BUDGETS])
def test_healthy_server_has_no_violation(client, counter, budget):
    problems: list[str] = []
    finishes: set[str | None] = set()
    for p in PROMPTS:
        for stream in (False, True):
            c = run(client, p, budget=budget, stream=stream)
            finishes.add(c.finish_reason)
            expect = {"thinking": bool(p.get("thinking")), "min_tokens": p.get("min_tokens")}
            for v in check(c, counter=counter, **expect):
                problems.append(f"{p['id']} stream={stream}: {v.format()}")
    assert problems == [], "\n".join(problems)
    # the set exercises both ways of finishing, so the finish checks ran for real
    assert finishes == {"stop", "length"}


# fault -> the code it must produce (streamed, plain)
FAULT_CODES = {
    "early-eos": ("early-stop", "early-stop"),
    "role-leak": ("role-leak", "role-leak"),
    "think-leak": ("reasoning-leak", "reasoning-leak"),
    "reasoning-only": ("reasoning-only", "reasoning-only"),
    "finish-always-stop": ("finish-lie", "finish-lie"),
    "overrun": ("overrun", "overrun"),
    "usage-mismatch": ("usage-mismatch", "usage-mismatch"),
    "degenerate": ("degenerate", "degenerate"),
    "stats-inflated": ("stats-inflated", "stats-inflated"),
    "empty-200": ("empty", "empty"),
    "stream-error-event": ("stream-error", "http-error"),
    "stream-no-done": ("stream-integrity", "http-error"),
    "hang": ("stream-integrity", "http-error"),
}
LONG = {
    "id": "essay",
    "prompt": "Write a long essay about the history of bridges.",
    "max_tokens": 128,
}


@pytest.mark.serial  # 1 s read timeout: wall-clock sensitive
@pytest.mark.parametrize("fault", sorted(FAULT_CODES))
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
def test_fault_is_named(client, counter, fault, stream):
    expected = FAULT_CODES[fault][0 if stream else 1]
    c = run(client, LONG, stream=stream, headers={"X-DDTree-Fault": fault})
    found = check(c, counter=counter)
    assert expected in [v.code for v in found], "\n".join(v.format() for v in found)
    # and the healthy twin of the same request is clean
    assert check(run(client, LONG, stream=stream), counter=counter) == []


@pytest.mark.serial  # 1 s read timeout: wall-clock sensitive
def test_intermittent_5xx_is_an_http_error_every_other_request(client, counter):
    codes = [
        [
            v.code
            for v in check(
                run(client, LONG, headers={"X-DDTree-Fault": "intermittent-5xx"}), counter=counter
            )
        ]
        for _ in range(4)
    ]
    assert sorted(codes) == [[], [], ["http-error"], ["http-error"]]


@pytest.mark.serial  # 1 s read timeout: wall-clock sensitive
def test_nondeterministic_output_is_caught(client):
    h = {"X-DDTree-Fault": "nondeterministic"}
    a, b = run(client, LONG, headers=h), run(client, LONG, headers=h)
    assert [v.code for v in check_determinism(a, b)] == ["nondeterministic"]
    assert check_determinism(run(client, LONG), run(client, LONG)) == []


@pytest.mark.serial  # 1 s read timeout: wall-clock sensitive
def test_state_leak_is_caught_as_nondeterminism(client):
    other = {"id": "other", "prompt": "List five facts about bees.", "max_tokens": 64}
    h = {"X-DDTree-Fault": "state-leak"}
    clean = run(client, LONG)
    run(client, other, headers=h)
    after_other = run(client, LONG, headers=h)
    assert [v.code for v in check_determinism(clean, after_other)] == ["nondeterministic"]


def sweep(server_url: str, counter: TokenizerCounter, headers: dict[str, str] | None):
    samples = []
    prompts = [
        {"id": f"p{i}", "prompt": f"Write a long essay about {s}.", "max_tokens": 48}
        for i, s in enumerate(["rivers", "music", "oceans"])
    ]
    with DDTreeClient(server_url, counter=counter) as c:
        for _round in range(2):
            for p in prompts:
                for b in BUDGETS:
                    samples.append(
                        BudgetSample.from_completion(run(c, p, budget=b, headers=headers))
                    )
    return [s for s in samples if s is not None]


def test_budget_ignored_over_a_sweep(counter):
    with reference.start_reference_server(simulated_latency=True) as srv:
        healthy = sweep(srv.base_url, counter, None)
        ignored = sweep(srv.base_url, counter, {"X-DDTree-Fault": "budget-ignored"})
    # the healthy server echoes its budget: nothing to judge, by design
    assert check_budget_ignored(healthy) == []
    # without the echo, the healthy sweep still shows the budget at work
    unechoed = [
        BudgetSample(
            s.tree_budget, s.decode_tokens_per_second, s.mean_acceptance_length, s.prompt_id
        )
        for s in healthy
    ]
    assert check_budget_ignored(unechoed) == []
    assert all(s.echoed_tree_budget is None for s in ignored)
    assert [v.code for v in check_budget_ignored(ignored)] == ["budget-ignored"]


@pytest.mark.parametrize("dialect", ["vllm", "omlx", "none"])
def test_other_stats_dialects_are_judged_the_same_way(counter, dialect):
    with (
        reference.start_reference_server(simulated_latency=False, stats_dialect=dialect) as srv,
        DDTreeClient(srv.base_url, counter=counter) as c,
    ):
        for p in PROMPTS[:8]:
            for stream in (True, False):
                assert check(run(c, p, budget=256, stream=stream), counter=counter) == []
        inflated = run(c, LONG, headers={"X-DDTree-Fault": "stats-inflated"})
    codes = [v.code for v in check(inflated, counter=counter)]
    if dialect == "none":
        assert codes == []  # nothing reported, nothing to contradict
    else:
        assert inflated.stats is not None and inflated.stats.dialect == dialect
        assert "stats-inflated" in codes
