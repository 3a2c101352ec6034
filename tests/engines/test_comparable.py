"""A speculative llama.cpp server whose chat template differs from its baseline's.

The n-gram server renders every chat with a plain ``role: content`` template; the target-only
baseline uses the model's own ChatML template. The two answer different prompts, so their
outputs differ for reasons that have nothing to do with speculation: the losslessness test must
say "not comparable" (with both prompt token counts and what to do) and no verdict may name
speculative decoding.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from pytest_ddtree import engines
from pytest_ddtree.checks.diagnose import run_lossless
from pytest_ddtree.core.settings import Lossless
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.tokens import ServerCounter

# No ChatML markers at all: the same messages become a different (shorter) prompt.
PLAIN_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
)
PROMPT = "Describe how bread is baked in a small kitchen."

pytestmark = pytest.mark.real_engine


@pytest.fixture(scope="module")
def plain_ngram() -> Iterator[engines.LlamaCppServer]:
    """n-gram speculation behind the plain template."""
    why = engines.missing()
    if why is not None:
        pytest.skip(why)
    server = engines.start_llamacpp(speculation="ngram", chat_template=PLAIN_TEMPLATE)
    try:
        yield server
    finally:
        server.stop()


def _client(server: engines.LlamaCppServer, http: httpx.Client) -> DDTreeClient:
    return DDTreeClient(
        server.base_url,
        model=server.model,
        budget_mode="none",
        counter=ServerCounter(server.root_url, http, shape="llamacpp"),
        transport=httpx.HTTPTransport(limits=httpx.Limits(max_keepalive_connections=0)),
    )


def test_another_template_is_not_comparable_not_lossy(
    plain_ngram: engines.LlamaCppServer, target: engines.LlamaCppServer
) -> None:
    with httpx.Client(timeout=60) as http:
        client, baseline = _client(plain_ngram, http), _client(target, http)
        try:
            result, violations = run_lossless(
                client, baseline, PROMPT, [None], Lossless("exact"), max_tokens=48
            )
        finally:
            client.close()
            baseline.close()
    assert [v.code for v in violations] == ["not-comparable"], [v.message for v in violations]
    ours = result.outputs[None].usage
    theirs = result.reference.usage
    assert ours is not None and theirs is not None
    assert ours.prompt_tokens != theirs.prompt_tokens
    assert (
        f"the target-only baseline sees {theirs.prompt_tokens} prompt tokens, the server "
        f"{ours.prompt_tokens}" in violations[0].message
    )
    assert not result.divergences


def test_example_suite_blames_no_speculation_on_another_template(
    plain_ngram: engines.LlamaCppServer,
    target: engines.LlamaCppServer,
    pytester: pytest.Pytester,
    user_env_cleared: None,
) -> None:
    """``pytest example_suite`` against the plain-template server, ChatML baseline."""
    root = Path(__file__).resolve().parents[2]
    junit = pytester.path / "suite.xml"
    result = pytester.runpytest_subprocess(
        str(root / "example_suite"),
        "-p",
        "no:xdist",
        "-q",
        "-k",
        # test_invariants at the one budget of --ddtree-budget-mode none sends test_smoke's
        # request again, byte for byte
        "not test_load and not test_invariants",
        "--ddtree-endpoint",
        plain_ngram.base_url,
        "--ddtree-baseline-endpoint",
        target.base_url,
        "--ddtree-budget-mode",
        "none",
        "--ddtree-model",
        plain_ngram.model,
        f"--junitxml={junit}",
        timeout=900,
    )
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output, output[-4000:]
    for verdict in ("diagnosis: speculative decoding", "[not-lossless]", "[nondeterministic]"):
        assert verdict not in output, (verdict, output[-4000:])
    lossless = 0
    for case in ET.parse(junit).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert props.get("ddtree_diagnosis") != "speculation", case.get("name")
        if not case.get("name", "").startswith("test_lossless"):
            continue
        bad = case.find("failure")
        assert bad is not None, f"{case.get('name')} passed on answers to different prompts"
        text = bad.text or ""
        assert "[not-comparable]" in text and "prompt tokens" in text, text
        assert "what to do: serve the baseline with the same chat template" in text, text
        lossless += 1
    assert lossless >= 5, output[-3000:]
