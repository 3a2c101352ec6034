"""Differential diagnosis, losslessness and state checks on the reference server."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from pytest_ddtree.checks.diagnose import (
    Diagnoser,
    Diagnosis,
    compare_lossless,
    first_divergence,
    prompt_mismatch,
)
from pytest_ddtree.core.settings import Lossless
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.measure.sweep import DiagnosisRecord
from pytest_ddtree.reference import ReferenceServer, start_reference_server
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion
from pytest_ddtree.wire.tokens import TokenCounter

FAST = ("--ddtree-reference-latency=off",)

FAULT_TESTS = """
import pytest

LONG = "Write a detailed essay about rivers and the towns along them."

@pytest.mark.parametrize("fault", [{faults}])
def test_fault(ddtree_client, ddtree_check, fault):
    c = ddtree_client.chat(LONG, max_tokens=64, tree_budget=256,
                           headers={{"X-DDTree-Fault": fault}})
    ddtree_check(c)
"""


def _verdicts(pytester: pytest.Pytester, faults: list[str]) -> dict[str, tuple[str, str]]:
    pytester.makepyfile(FAULT_TESTS.format(faults=", ".join(repr(f) for f in faults)))
    result = pytester.runpytest("--junitxml=out.xml", "--ddtree-budgets=256", *FAST)
    result.assert_outcomes(failed=len(faults))
    verdicts: dict[str, tuple[str, str]] = {}
    for case in ET.parse(pytester.path / "out.xml").iter("testcase"):
        fault = case.get("name", "").split("[", 1)[1].rstrip("]")
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        verdicts[fault] = (str(props.get("ddtree_diagnosis")), str(props.get("ddtree_codes")))
    return verdicts


def test_template_faults_are_blamed_on_the_template(pytester: pytest.Pytester) -> None:
    verdicts = _verdicts(pytester, ["early-eos", "role-leak", "think-leak"])
    # each fault fails with its own code alone, and the diagnosis blames the template
    assert verdicts == {
        "early-eos": ("template", "early-stop"),
        "role-leak": ("template", "role-leak"),
        "think-leak": ("template", "reasoning-leak"),
    }, verdicts


def test_speculation_faults_are_blamed_on_speculation(pytester: pytest.Pytester) -> None:
    verdicts = _verdicts(pytester, ["overrun", "stats-inflated"])
    assert verdicts["overrun"][0] == "speculation", verdicts
    assert "overrun" in verdicts["overrun"][1].split(","), verdicts
    assert verdicts["stats-inflated"] == ("speculation", "stats-inflated"), verdicts


def test_transport_failures_on_both_servers_blame_the_serving_stack(
    pytester: pytest.Pytester,
) -> None:
    verdicts = _verdicts(pytester, ["stream-no-done", "stream-error-event", "usage-mismatch"])
    assert verdicts["stream-no-done"][0] == "server", verdicts
    assert verdicts["stream-error-event"][0] == "server", verdicts
    # a usage count the server gets wrong without speculation is the serving stack's
    assert verdicts["usage-mismatch"][0] == "server", verdicts


def test_a_rejected_request_is_not_blamed_on_speculation(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_a(ddtree_client, ddtree_check, tree_budget):
            ddtree_check(ddtree_client.chat("Write a long essay.", max_tokens=16,
                                            tree_budget=tree_budget))
        """
    )
    result = pytester.runpytest("--ddtree-budgets=5000", *FAST)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*[[]http-error[]] *HTTP 400*",
            "*diagnosis: undetermined - the server rejected the request (HTTP 400*",
            "*what to do: the server refused the request as sent*",
        ]
    )
    assert "diagnosis: speculative decoding" not in result.stdout.str()


def test_a_refused_field_is_named_in_the_advice(pytester: pytest.Pytester) -> None:
    # the server refuses what the request asks beyond plain chat (a tool choice without
    # tools): the advice names that field, not the budget or a cut stream
    pytester.makepyfile(
        """
        def test_a(ddtree_client, ddtree_check):
            ddtree_check(ddtree_client.chat("Weather?", max_tokens=16, tool_choice="required"))
        """
    )
    result = pytester.runpytest("--ddtree-budgets=16", *FAST)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*the server rejected the request (HTTP 400*tool_choice*",
            "*what to do: the server refused the request as sent*; it also asks for "
            "tool_choice='required': check that the server serves each of them*",
        ]
    )


def test_a_4xx_that_is_no_refusal_names_no_field() -> None:
    from pytest_ddtree.checks.blame import REJECTED_ADVICE
    from pytest_ddtree.checks.diagnose import Diagnoser
    from pytest_ddtree.core.violation import Violation
    from pytest_ddtree.wire.completion import Completion, RequestSpec, Timings

    body = {"messages": [], "stop": ["\n\n"]}
    spec = RequestSpec("chat", "http://127.0.0.1:9/v1/chat/completions", body, 16, True, 8, 0.0)

    def answer(status: int) -> Completion:
        error = f"HTTP {status}: no"
        return Completion(
            spec,
            status,
            "",
            "",
            None,
            None,
            None,
            Timings(0, 0, 0, 1),
            [],
            error=error,
            error_kind="http",
        )

    found = [Violation("http-error", "HTTP")]
    for status, named in ((400, True), (422, True), (401, False), (404, False), (413, False)):
        advice = Diagnoser(None).diagnose(answer(status), found, lambda c: []).advice
        assert advice.startswith(REJECTED_ADVICE), advice
        assert ("stop=" in advice) is named, (status, advice)


def test_failure_message_carries_diagnosis(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(FAULT_TESTS.format(faults="'role-leak'"))
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*output-quality invariant(s) broken: *role-leak*",
            "*[[]role-leak[]]*",
            "*diagnosis: prompt / chat template / model - the target-only baseline fails the same"
            " way (*role-leak*)",
            "*what to do: *fix the chat template*",
        ]
    )


LOSSLESS_TESTS = """
import pytest

@pytest.mark.parametrize("fault", ["", "lossy"])
def test_lossless(ddtree_lossless, fault):
    headers = {"X-DDTree-Fault": fault} if fault else {}
    ddtree_lossless("Write a detailed essay about harbours and ships.", max_tokens=96,
                    headers=headers)
"""


def test_lossy_is_caught_with_divergence_point_and_budgets(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(LOSSLESS_TESTS)
    result = pytester.runpytest("--ddtree-budgets=16,64,128,512", *FAST)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "not lossless: 2 of 4 budget(s) change the temperature-0 output" in out
    result.stdout.fnmatch_lines(
        [
            "*[[]not-lossless[]] tree_budget 128 diverges from the target-only baseline at token *"
            " (character *): the target was sure (*)*",
            "*diverging budgets: 128, 512",
            "*[[]not-lossless[]] tree_budget 512 diverges*",
            "*diagnosis: speculative decoding*",
        ]
    )
    assert "tree_budget 16 diverges" not in out and "tree_budget 64 diverges" not in out


def test_lossless_prefix_tolerance_is_reported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(LOSSLESS_TESTS)
    result = pytester.runpytest(
        "--ddtree-budgets=16,512", "--ddtree-lossless=prefix:1", "--junitxml=out.xml", *FAST
    )
    # a divergence after the first token is tolerated, and the tolerance is recorded
    result.assert_outcomes(passed=2)
    assert "ddtree_lossless_tolerated" in (pytester.path / "out.xml").read_text()


STATE_TESTS = """
import pytest

@pytest.mark.parametrize("fault", ["", "nondeterministic", "state-leak"])
def test_state(ddtree_determinism, fault):
    headers = {"X-DDTree-Fault": fault} if fault else {}
    ddtree_determinism("Write a detailed essay about rivers.", "Tell me a long story about bees.",
                       tree_budget=64, max_tokens=48, headers=headers)
"""


def test_state_leak_and_nondeterminism_are_caught(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(STATE_TESTS)
    result = pytester.runpytest("-v", *FAST)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_state?? PASSED*",
            "*test_state?nondeterministic? FAILED*",
            "*test_state?state-leak? FAILED*",
        ]
    )
    out = result.stdout.str()
    nondet = out[out.index("_ test_state[nondeterministic] _") :]
    nondet = nondet[: nondet.index("_ test_state[state-leak] _")]
    assert "[nondeterministic] the same request gave different" in nondet
    leak = out[out.index("_ test_state[state-leak] _") : out.index("short test summary")]
    assert "[state-leak] the same temperature-0 request gave different output" in leak
    assert "[nondeterministic]" not in leak


def test_no_replay_storm(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("i", range(12))
        def test_many(ddtree_client, ddtree_check, ddtree_runtime, tree_budget, i):
            try:
                ddtree_check(ddtree_client.chat("Write a long essay about salt.", max_tokens=32,
                                                tree_budget=tree_budget))
            finally:
                with open(f"replays.txt", "w") as f:
                    f.write(str(ddtree_runtime.diagnoser.replays))
        """
    )
    result = pytester.runpytest(
        "--ddtree-reference-fault=early-eos",
        "--ddtree-budgets=16,64,256",
        "-rN",
        "--junitxml=junit.xml",
        *FAST,
    )
    result.assert_outcomes(failed=36)
    # one replay per request kind (the budget is not part of the kind): one in all
    assert (pytester.path / "replays.txt").read_text() == "1"
    # every test carries its diagnosis (JUnit XML: one failure each) ...
    failures = ET.parse(pytester.path / "junit.xml").getroot().iter("failure")
    diagnosed = [
        f for f in failures if "diagnosis: prompt / chat template / model" in (f.text or "")
    ]
    assert len(diagnosed) == 36
    # ... and the terminal prints it once a budget: the same failure at the same budget
    # refers back to the first test that showed it
    output = result.stdout.str()
    assert output.count("diagnosis: prompt / chat template / model") == 3, output
    assert output.count("E   the same failure (codes, prompt, budget and evidence) as ") == 33


def test_first_divergence_token_and_character() -> None:
    class Chars:
        exact = True

        def encode(self, text: str) -> list[int]:
            return [ord(c) for c in text]

    div = first_divergence("the river bends", "the river turns", Chars())
    assert div is not None
    assert (div.token_index, div.char_offset) == (10, 10)
    assert "»bends«" in div.reference_excerpt and "»turns«" in div.actual_excerpt
    assert first_divergence("same", "same", Chars()) is None
    plain = first_divergence("abc", "abd")
    assert plain is not None and plain.token_index is None and plain.char_offset == 2
    shorter = first_divergence("abc", "ab")
    assert shorter is not None and shorter.char_offset == 2


def test_compare_lossless_modes(reference_server, reference_counter) -> None:
    from pytest_ddtree.wire.client import DDTreeClient

    with DDTreeClient(reference_server.base_url, counter=reference_counter) as c:
        ref = c.chat("Write a long essay about glass.", max_tokens=48, tree_budget=16)
        same = c.chat("Write a long essay about glass.", max_tokens=48, tree_budget=1024)
        lossy = c.chat(
            "Write a long essay about glass.",
            max_tokens=48,
            tree_budget=1024,
            headers={"X-DDTree-Fault": "lossy"},
        )
    assert compare_lossless(ref, {1024: same}, Lossless("exact"), counter=reference_counter).ok
    result = compare_lossless(ref, {1024: lossy}, Lossless("exact"), counter=reference_counter)
    assert not result.ok and 1024 in result.divergences
    off = compare_lossless(ref, {1024: lossy}, Lossless("off"), counter=reference_counter)
    assert off.ok and off.tolerated == (1024,)


def _answer(prompt_tokens: int | None) -> Completion:
    from pytest_ddtree.wire.completion import RequestSpec, Timings, Usage

    spec = RequestSpec("chat", "http://127.0.0.1:9/v1/chat/completions", {}, None, False, 8, 0.0)
    usage = None if prompt_tokens is None else Usage(prompt_tokens, 8, prompt_tokens + 8)
    return Completion(spec, 200, "text", "", "stop", usage, None, Timings(0, 0, 0, 1), {})


def test_prompt_mismatch_names_both_counts() -> None:
    reason = prompt_mismatch(_answer(12), _answer(37))
    assert reason is not None and "12 vs 37" in reason and "chat template" in reason
    assert prompt_mismatch(_answer(37), _answer(37)) is None
    assert prompt_mismatch(_answer(None), _answer(37)) is None


# --------------------------------------------- a replay is evidence only where comparable

ESSAY = "Write a detailed essay about rivers and the towns along them."


def _diagnose_fault(
    reference_server: ReferenceServer,
    baseline_server: ReferenceServer,
    counter: TokenCounter,
    fault: str,
    **kwargs: Any,
) -> Diagnosis:
    """The diagnosis of a (pretended) degenerate answer the fault produced, the baseline
    judged by a check that passes it: which layer the replay and its margin name."""
    with (
        DDTreeClient(reference_server.base_url) as client,
        DDTreeClient(baseline_server.base_url) as baseline,
    ):
        answer = client.chat(
            ESSAY, max_tokens=64, tree_budget=256, headers={"X-DDTree-Fault": fault}, **kwargs
        )
        assert answer.ok, answer.error
        failing = [Violation("degenerate", "a phrase repeated over most of the answer")]
        return Diagnoser(baseline, counter=counter).diagnose(answer, failing, lambda _: [])


def test_a_failure_after_a_near_tie_flip_is_the_models_own_path(
    reference_server: ReferenceServer,
    baseline_server: ReferenceServer,
    reference_counter: TokenCounter,
) -> None:
    found = _diagnose_fault(
        reference_server, baseline_server, reference_counter, "near-tie", temperature=0
    )
    assert found.blame == "template", found.render()
    assert found.reason.startswith("near-tie flip, then the model's own path fails (degenerate)")
    assert "the answer leaves the baseline's at token " in found.reason, found.reason
    assert "nats apart" in found.reason and "speculative-decoding layer" not in found.render()
    assert found.margin is not None and found.margin["kind"] == "near-tie", found.margin
    # the fault flips the target's runner-up within 0.15 nats of its best token
    assert 0 < found.to_json()["margin"]["margin_nats"] <= 0.15, found.to_json()
    # the run's JSON and HTML report keep it: the record of the failing test
    record = DiagnosisRecord.from_json({"nodeid": "t", **found.to_json()})
    assert record.margin == found.margin and record.reason == found.reason


def test_a_failure_after_a_confident_divergence_names_speculation_with_the_margin(
    reference_server: ReferenceServer,
    baseline_server: ReferenceServer,
    reference_counter: TokenCounter,
) -> None:
    found = _diagnose_fault(
        reference_server, baseline_server, reference_counter, "lossy", temperature=0
    )
    assert found.blame == "speculation", found.render()
    assert "the target was sure" in found.reason, found.reason
    assert found.margin is not None and found.margin["kind"] == "confident", found.margin


def test_a_sampled_replay_is_not_evidence_against_speculation(
    reference_server: ReferenceServer,
    baseline_server: ReferenceServer,
    reference_counter: TokenCounter,
) -> None:
    found = _diagnose_fault(
        reference_server, baseline_server, reference_counter, "lossy", temperature=0.7, seed=7
    )
    assert found.blame == "undetermined", found.render()
    assert found.reason.startswith("not comparable: sampled (temperature 0.7)"), found.reason
    assert "speculative-decoding layer" not in found.render()
    assert "test_lossless_in_distribution" in found.advice


def test_a_failure_that_is_not_of_the_text_keeps_the_replays_verdict(
    reference_server: ReferenceServer,
    baseline_server: ReferenceServer,
    reference_counter: TokenCounter,
) -> None:
    # statistics or accounting are no sample of the text: sampled or not, a failure only
    # speculation shows is speculation's
    with (
        DDTreeClient(reference_server.base_url) as client,
        DDTreeClient(baseline_server.base_url) as baseline,
    ):
        for temperature in (0.0, 0.7):
            answer = client.chat(
                ESSAY,
                max_tokens=64,
                tree_budget=256,
                temperature=temperature,
                seed=7,
                headers={"X-DDTree-Fault": "near-tie"},
            )
            failing = [Violation("stats-inflated", "the server's rate is 3x the client's")]
            found = Diagnoser(baseline, counter=reference_counter).diagnose(
                answer, failing, lambda _: []
            )
            assert found.blame == "speculation", (temperature, found.render())
            assert "near-tie flip" not in found.reason and "sampled" not in found.reason


# ------------------------------- a gateway's leak in front of an endpoint that drafted nothing


class _LeakingGateway(BaseHTTPRequestHandler):
    """A gateway in front of a speculative server (``upstream``): it appends ``\\nuser:`` to
    every answer (a role leak of its own) and passes on the statistics of an engine that
    drafted nothing (vLLM's per-request counts, 0 drafted and 0 accepted)."""

    upstream = ""
    LEAK = "\nuser:"
    LEAK_TOKENS = 4  # the reference tokenizer's count of LEAK
    NOTHING_DRAFTED: ClassVar[dict[str, int]] = {
        "num_draft_tokens": 0,
        "num_accepted_draft_tokens": 0,
    }

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _relay(self, method: str, body: bytes | None = None) -> tuple[int, str, bytes]:
        url = self.upstream + self.path[len("/v1") :]
        req = urllib.request.Request(url, data=body, method=method)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.headers.get("Content-Type", ""), resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("Content-Type", ""), exc.read()

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._send(*self._relay("GET"))

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, content_type, answer = self._relay("POST", body)
        if status == 200 and self.path.endswith("/chat/completions"):
            if content_type.startswith("text/event-stream"):
                answer = self._stream(answer)
            else:
                answer = json.dumps(self._rewrite(json.loads(answer))).encode()
        self._send(status, content_type, answer)

    def _rewrite(self, obj: dict[str, Any]) -> dict[str, Any]:
        for choice in obj.get("choices", ()):
            message = choice.get("message")
            if message is not None:
                message["content"] = (message.get("content") or "") + self.LEAK
        if "metrics" in obj:
            obj["metrics"] = {"speculative_decoding": dict(self.NOTHING_DRAFTED)}
        usage = obj.get("usage")
        if usage:  # the leak's tokens counted, so the role leak is the answer's one failure
            usage["completion_tokens"] += self.LEAK_TOKENS
            usage["total_tokens"] += self.LEAK_TOKENS
        return obj

    def _stream(self, answer: bytes) -> bytes:
        out: list[bytes] = []
        for event in answer.split(b"\n\n"):
            data = event.removeprefix(b"data: ")
            if not event.startswith(b"data: ") or data == b"[DONE]":
                out.append(event)
                continue
            obj = json.loads(data)
            choices = obj.get("choices") or []
            if choices and choices[0].get("finish_reason") is not None:
                leak = json.loads(data)
                leak["choices"][0] = {"index": 0, "delta": {"content": self.LEAK}}
                leak["choices"][0]["finish_reason"] = None
                out.append(b"data: " + json.dumps(leak).encode())
            out.append(b"data: " + json.dumps(self._rewrite(obj)).encode())
        return b"\n\n".join(out)


GATEWAY_TEST = """
import pytest

@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
def test_answer(ddtree_client, ddtree_check, stream):
    ddtree_check(ddtree_client.chat("What is 2+2?", max_tokens=48, stream=stream))
"""


def test_a_gateways_role_leak_before_an_endpoint_that_drafted_nothing_is_not_blamed_on_drafts(
    pytester: pytest.Pytester,
    loopback: Callable[[ThreadingHTTPServer], str],
    baseline_server: ReferenceServer,
) -> None:
    with start_reference_server(simulated_latency=False, stats_dialect="vllm") as upstream:
        gateway = type("Gateway", (_LeakingGateway,), {"upstream": upstream.base_url})
        url = loopback(ThreadingHTTPServer(("127.0.0.1", 0), gateway)) + "/v1"
        pytester.makepyfile(GATEWAY_TEST)
        result = pytester.runpytest(
            f"--ddtree-endpoint={url}",
            f"--ddtree-baseline-endpoint={baseline_server.base_url}",
            "--ddtree-budgets=16",
        )
    out = result.stdout.str()
    result.assert_outcomes(failed=2)
    # each answer's failure, once (with CI set, pytest's short summary repeats the message)
    broken = [line for line in out.splitlines() if line.startswith("E   pytest_ddtree.")]
    assert [line.endswith("invariant(s) broken: role-leak") for line in broken] == [True] * 2, out
    result.stdout.fnmatch_lines(
        [
            "*diagnosis: serving stack - the speculative endpoint's stack, not its drafts: "
            "its statistics show no drafted token reached this answer "
            "(num_draft_tokens=0, num_accepted_draft_tokens=0)*",
            "*what to do: *a wrapper, a proxy, the chat template or the sampling settings*",
        ]
    )
    assert "speculative-decoding layer" not in out, out


def test_a_failure_the_baseline_does_not_share_is_named_beside_the_shared_one(
    reference_server: ReferenceServer, baseline_server: ReferenceServer
) -> None:
    # the model stops early on both servers (the baseline shares early-stop) and a gateway
    # adds a role leak of its own: the verdict on the shared failure does not clear the
    # endpoint of the leak (it said "speculative decoding is not the cause" of both)
    failing = [
        Violation("early-stop", "finish_reason 'stop' after 5 tokens"),
        Violation("role-leak", "role marker 'user:' in content"),
    ]
    with (
        DDTreeClient(reference_server.base_url) as client,
        DDTreeClient(baseline_server.base_url) as baseline,
    ):
        answer = client.chat(ESSAY, max_tokens=16, tree_budget=16)
        found = Diagnoser(baseline).diagnose(answer, failing, lambda _: failing[:1])
        # every failure shared: the verdict is as before
        alike = Diagnoser(baseline).diagnose(answer, failing, lambda _: failing)
    assert found.blame == "template", found.render()
    assert found.reason == (
        "the target-only baseline fails the same way (early-stop); not shared: role-leak "
        "(the target-only baseline's answer does not break it)"
    ), found.reason
    assert found.advice.endswith(
        "speculative decoding is not the cause - for the shared failure only; the endpoint "
        "under test alone breaks the rest, so look for it in its own stack (speculation, a "
        "wrapper, a proxy or its sampling settings) (role-leak)"
    ), found.advice
    assert alike.reason == "the target-only baseline fails the same way (early-stop, role-leak)"


def _with_stats(drafted: int | None, accepted: int | None) -> Completion:
    from pytest_ddtree.wire.completion import SpecStats

    stats = SpecStats("vllm", num_draft_tokens=drafted, num_accepted_draft_tokens=accepted)
    return replace(_answer(20), stats=stats, stats_asked=True)


def test_only_statistics_that_show_no_draft_reached_the_answer_are_evidence() -> None:
    from pytest_ddtree.checks.diagnose import drafts_absent

    assert drafts_absent(_with_stats(0, 0)) == "num_draft_tokens=0, num_accepted_draft_tokens=0"
    # drafted but none accepted: still only the target's tokens
    assert drafts_absent(_with_stats(30, 0)) == "num_draft_tokens=30, num_accepted_draft_tokens=0"
    assert drafts_absent(_with_stats(30, 5)) is None  # drafts reached it
    assert drafts_absent(_with_stats(None, None)) is None  # counts not reported: no evidence
    assert drafts_absent(_answer(20)) is None  # no statistics: no evidence either way
    # statistics the checks found broken are no evidence of anything
    assert drafts_absent(_with_stats(0, 0), ["stats-inconsistent", "role-leak"]) is None


def test_a_speculation_verdict_stands_when_the_statistics_say_nothing_of_drafts() -> None:
    from pytest_ddtree.checks.blame import SPECULATION_ADVICE
    from pytest_ddtree.checks.diagnose import _not_the_drafts

    blamed = Diagnosis("speculation", "the target-only baseline passes", SPECULATION_ADVICE)
    assert _not_the_drafts(_answer(20), ["role-leak"], blamed) == blamed
    assert _not_the_drafts(_with_stats(30, 5), ["role-leak"], blamed) == blamed
    moved = _not_the_drafts(_with_stats(12, 0), ["role-leak"], blamed)
    assert moved.blame == "server" and moved.reason.startswith(
        "the speculative endpoint's stack, not its drafts: its statistics show no drafted "
        "token reached this answer (num_draft_tokens=12, num_accepted_draft_tokens=0); "
        "the target-only baseline passes"
    ), moved.reason


# ------------------------------------- a target that does not reproduce its own answer


class _UnsteadyTarget(_LeakingGateway):
    """A target-only server in front of ``upstream`` that answers a request asking for
    log-probabilities otherwise than the same request without them (its first words change):
    at temperature 0 the target alone does not reproduce its own greedy answer."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, content_type, answer = self._relay("POST", body)
        if status == 200 and b'"logprobs"' in body and not content_type.startswith("text/e"):
            obj = json.loads(answer)
            message = obj["choices"][0]["message"]
            message["content"] = "Otherwise: " + (message.get("content") or "")
            answer = json.dumps(obj).encode()
        self._send(status, content_type, answer)


def test_a_parting_where_the_target_alone_answers_two_ways_blames_no_layer(
    reference_server: ReferenceServer,
    baseline_server: ReferenceServer,
    reference_counter: TokenCounter,
    loopback: Callable[[ThreadingHTTPServer], str],
) -> None:
    # the speculative answer parts from the target's (a lossy verifier), but the target,
    # asked again for its margin there, answers otherwise before that point (seen on
    # llama.cpp at long prompts): the parting is no evidence against speculation
    target = type("Target", (_UnsteadyTarget,), {"upstream": baseline_server.base_url})
    url = loopback(ThreadingHTTPServer(("127.0.0.1", 0), target)) + "/v1"
    with DDTreeClient(reference_server.base_url) as client, DDTreeClient(url) as baseline:
        answer = client.chat(
            ESSAY, max_tokens=64, tree_budget=256, headers={"X-DDTree-Fault": "lossy"}
        )
        failing = [Violation("degenerate", "a phrase repeated over most of the answer")]
        found = Diagnoser(baseline, counter=reference_counter).diagnose(
            answer, failing, lambda _: []
        )
    assert found.blame == "undetermined", found.render()
    assert "the target alone is not reproducible there" in found.reason, found.reason
    assert found.margin is not None and found.margin["target_unstable"] is True
    assert "speculative-decoding layer" not in found.render()
