"""Verdicts only from complete, comparable answers.

A relay in front of the reference server cuts some streams mid-JSON or slips an in-band
error event into them (the reference server's own ``stream-no-done`` and
``stream-error-event`` faults, applied to chosen requests only). The losslessness and
determinism tests then fail with ``not-comparable`` and the reason, never with
``not-lossless`` or ``nondeterministic``, and never blame speculative decoding.
"""

from __future__ import annotations

import itertools
import json
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import BaseServer
from typing import Any

import httpx
import pytest

from pytest_ddtree.checks.comparable import (
    SHAPING_OPTIONS,
    not_whole_advice,
    prompt_mismatch,
    requested_features,
    why_not_whole,
)
from pytest_ddtree.checks.diagnose import (
    Diagnoser,
    check_state,
    first_divergence,
    judge_lossless,
)
from pytest_ddtree.core.settings import Lossless
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.reference import ReferenceServer
from pytest_ddtree.wire.completion import Completion, RequestSpec, StreamInfo, Timings, Usage

FAST = ("--ddtree-reference-latency=off",)
PROMPT = "Write a detailed essay about harbours and ships."


class _Relay(BaseHTTPRequestHandler):
    """Forwards to the reference server, adding ``X-DDTree-Fault`` to chosen requests."""

    protocol_version = "HTTP/1.1"
    server: Relay

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._forward("GET", b"", {})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/tokenize" and self.server.tokenize_fails():
            body = b'{"error": {"message": "tokenizer crashed"}}'
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        headers = {"Content-Type": "application/json"}
        fault = self.server.fault_for(raw, self.headers.get("X-Relay-Alternate"))
        if fault:
            headers["X-DDTree-Fault"] = fault
        elif self.headers.get("X-DDTree-Fault"):
            headers["X-DDTree-Fault"] = str(self.headers["X-DDTree-Fault"])
        self._forward("POST", raw, headers)

    def _forward(self, method: str, raw: bytes, headers: dict[str, str]) -> None:
        upstream = self.server.upstream + self.path
        resp = httpx.request(method, upstream, content=raw, headers=headers, timeout=30)
        self.send_response(resp.status_code)
        self.send_header("Content-Type", resp.headers.get("content-type", "application/json"))
        self.send_header("Content-Length", str(len(resp.content)))
        self.end_headers()
        self.wfile.write(resp.content)


class Relay(ThreadingHTTPServer):
    """A relay on 127.0.0.1: ``cut`` maps a tree budget to the fault its requests get;
    requests carrying ``X-Relay-Alternate: FAULT`` get FAULT every second time;
    ``flaky_tokenize`` makes ``/tokenize`` answer HTTP 500 after the first call."""

    daemon_threads = True

    def __init__(self, upstream: str, cut: dict[int, str], *, flaky_tokenize: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Relay)
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.cut = cut
        self.flaky_tokenize = flaky_tokenize
        self._tokenized = itertools.count()
        self._alternate = itertools.count()
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def tokenize_fails(self) -> bool:
        """With ``flaky_tokenize``: the start-up probe is answered, every later call fails."""
        with self._lock:
            return self.flaky_tokenize and next(self._tokenized) > 0

    def fault_for(self, raw: bytes, alternate: str | None) -> str | None:
        if alternate:
            with self._lock:
                return alternate if next(self._alternate) % 2 else None
        try:
            budget = json.loads(raw).get("tree_budget")
        except ValueError:
            return None
        return self.cut.get(budget) if isinstance(budget, int) else None


@pytest.fixture
def relay(reference_server: ReferenceServer, loopback: Callable[[BaseServer], str]) -> Relay:
    server = Relay(reference_server.base_url, {64: "stream-no-done", 128: "stream-error-event"})
    loopback(server)
    return server


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "DDTREE_ENDPOINT",
        "OPENAI_BASE_URL",
        "DDTREE_BASELINE_ENDPOINT",
        "DDTREE_TOKENIZER",
        "DDTREE_TIMEOUT",
        "PYTEST_ADDOPTS",
        "PYTEST_XDIST_WORKER",
        "PYTEST_XDIST_WORKER_COUNT",
    ):
        monkeypatch.delenv(name, raising=False)


CHECKS = f"""
PROMPT = {PROMPT!r}

def test_lossless(ddtree_lossless):
    ddtree_lossless(PROMPT, max_tokens=64)

def test_determinism(ddtree_determinism):
    ddtree_determinism(PROMPT, "Tell me a long story about bees.", tree_budget=16,
                       max_tokens=48, headers={{"X-Relay-Alternate": "stream-no-done"}})
"""


def _properties(path: Any) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        out[case.get("name", "")] = {
            str(p.get("name")): str(p.get("value")) for p in case.iter("property")
        }
    return out


@pytest.mark.parametrize("with_baseline", [True, False], ids=["baseline", "no-baseline"])
def test_cut_streams_are_not_comparable_never_lossy(
    pytester: pytest.Pytester,
    relay: Relay,
    baseline_server: ReferenceServer,
    with_baseline: bool,
) -> None:
    pytester.makepyfile(CHECKS)
    baseline = [f"--ddtree-baseline-endpoint={baseline_server.base_url}"] if with_baseline else []
    result = pytester.runpytest(
        f"--ddtree-endpoint={relay.base_url}",
        "--ddtree-budgets=16,64,128,256",
        "--junitxml=out.xml",
        *baseline,
        *FAST,
    )
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    reference = "target-only baseline" if with_baseline else "lowest budget (16"
    result.stdout.fnmatch_lines(
        [
            "*not comparable: 2 of 4 budget(s) could not be compared with the *; no verdict on "
            "losslessness*",
            f"*[[]not-comparable[]] tree_budget 64 not compared with the {reference}*: its answer "
            "did not arrive whole (stream-integrity: the stream ended without [[]DONE[]]*",
            f"*[[]not-comparable[]] tree_budget 128 not compared with the {reference}*: its answer "
            "did not arrive whole (stream-error: an in-band error event inside the stream)*",
            "*diagnosis: undetermined - not comparable: *",
            "*what to do: an answer that did not arrive whole*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*not comparable: an answer did not arrive whole; no verdict on determinism*",
            "*[[]not-comparable[]] the * did not arrive whole (stream-integrity: *",
        ]
    )
    for verdict in ("[not-lossless]", "[nondeterministic]", "[state-leak]", "speculative decoding"):
        assert verdict not in out, verdict
    props = _properties(pytester.path / "out.xml")
    assert {p.get("ddtree_diagnosis") for p in props.values()} == {"undetermined"}


def test_healthy_relay_passes(
    pytester: pytest.Pytester,
    reference_server: ReferenceServer,
    baseline_server: ReferenceServer,
    loopback: Callable[[BaseServer], str],
) -> None:
    # the same relay, cutting nothing: the tests above fail because of the cuts alone
    server = Relay(reference_server.base_url, {})
    loopback(server)
    pytester.makepyfile(CHECKS.replace('"X-Relay-Alternate": "stream-no-done"', ""))
    result = pytester.runpytest(
        f"--ddtree-endpoint={server.base_url}",
        f"--ddtree-baseline-endpoint={baseline_server.base_url}",
        "--ddtree-budgets=16,64,128,256",
        *FAST,
    )
    result.assert_outcomes(passed=2)


def test_a_failing_tokenizer_locates_a_real_divergence_by_characters(
    pytester: pytest.Pytester,
    reference_server: ReferenceServer,
    baseline_server: ReferenceServer,
    loopback: Callable[[BaseServer], str],
) -> None:
    # budget 128 gets the reference server's lossy fault; /tokenize fails after the probe
    server = Relay(reference_server.base_url, {128: "lossy"}, flaky_tokenize=True)
    loopback(server)
    pytester.makepyfile(CHECKS)
    # a subprocess: its timeout guards the run against a hang
    result = pytester.runpytest_subprocess(
        f"--ddtree-endpoint={server.base_url}",
        f"--ddtree-baseline-endpoint={baseline_server.base_url}",
        "--ddtree-tokenizer=server",
        "--ddtree-budgets=16,128",
        "-k",
        "lossless",
        *FAST,
        timeout=120,
    )
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output, output
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines(
        [
            "*[[]not-lossless[]] tree_budget 128 diverges from the target-only baseline at "
            "character * (token position unknown: the token counter failed (RuntimeError: "
            "*/tokenize answered HTTP 500))*",
        ]
    )
    named = [line for line in output.splitlines() if line.startswith("ddtree: the token counter")]
    assert len(named) == 1 and "did not run" in named[0], output


# ------------------------------------------------------------ units


def _answer(
    text: str = "The harbour is busy.",
    *,
    prompt_tokens: int | None = 13,
    finish: str | None = "stop",
    done: bool = True,
    error: str | None = None,
    kind: str | None = None,
    budget: int | None = 64,
) -> Completion:
    spec = RequestSpec("chat", "http://127.0.0.1:9/v1/chat/completions", {}, budget, True, 32, 0.0)
    usage = None if prompt_tokens is None else Usage(prompt_tokens, 5, prompt_tokens + 5)
    stream = StreamInfo(events=5, done_seen=done, finish_chunks=1 if finish else 0)
    return Completion(
        spec,
        200 if error is None else 0,
        text,
        "",
        finish,
        usage,
        None,
        Timings(0, 0, 0, 1),
        [],
        stream=stream,
        error=error,
        error_kind=kind,
    )


def test_why_not_whole_names_the_kind() -> None:
    assert why_not_whole(_answer()) is None
    assert why_not_whole(_answer(finish="length")) is None
    cut = why_not_whole(_answer(done=False))
    assert cut is not None and cut.startswith("stream-integrity:") and "[DONE]" in cut
    failed = why_not_whole(_answer(error="deadline: 3.1s > total 3s", kind="deadline"))
    assert failed == "deadline: deadline: 3.1s > total 3s"
    none = why_not_whole(_answer(finish=None))
    assert none is not None and none.startswith("stream-integrity:")


def test_an_error_kind_enum_reads_as_its_value() -> None:
    from enum import Enum

    class Kind(str, Enum):
        DEADLINE = "deadline"

    failed = why_not_whole(_answer(error="too slow", kind=Kind.DEADLINE))  # type: ignore[arg-type]
    assert failed == "deadline: too slow"


def test_other_prompt_is_not_comparable_and_never_lossy() -> None:
    reference = _answer("Paris is the capital.", prompt_tokens=37, budget=None)
    result = judge_lossless(
        reference, {None: _answer("Paris.", prompt_tokens=13, budget=None)}, Lossless("exact")
    )
    assert not result.ok and not result.divergences
    why = result.not_comparable[None]
    assert "sees 37 prompt tokens, the server 13" in why.reason
    assert "same chat template" in why.advice
    assert prompt_mismatch(_answer(prompt_tokens=13), reference) is not None


def test_a_cut_reference_makes_every_budget_not_comparable() -> None:
    reference = _answer("The harb", done=False, budget=None)
    result = judge_lossless(reference, {16: _answer(), 64: _answer()}, Lossless("exact"))
    assert set(result.not_comparable) == {16, 64} and not result.divergences
    assert all(
        "answer of the target-only baseline did not arrive whole" in u.reason
        for u in result.not_comparable.values()
    )


def test_a_cut_lowest_budget_is_named_once_in_the_not_comparable_evidence() -> None:
    from pytest_ddtree.checks.lossless import _reference, not_comparable_violations

    # no budget arrived whole: the lowest is the reference, and it is cut
    outputs = {b: _answer("The harb", done=False, budget=b) for b in (16, 64)}
    reference, label = _reference(outputs, None)
    result = judge_lossless(reference, outputs, Lossless("exact"), reference_label=label)
    v = next(v for v in not_comparable_violations(result) if "tree_budget 64" in v.message)
    assert v.message.startswith(
        "tree_budget 64 not compared: the answer of the lowest budget (16; no baseline "
        "configured) did not arrive whole ("
    ), v.message
    assert v.message.count("lowest budget") == 1 and v.message.count("no baseline") == 1


def test_determinism_never_judges_a_cut_answer() -> None:
    whole, cut = _answer("The harbour is busy."), _answer("The harb", done=False)
    found = check_state(whole, cut, whole, whole)
    assert [v.code for v in found] == ["not-comparable"]
    assert "the repeat did not arrive whole (stream-integrity" in found[0].message
    assert check_state(whole, whole, whole, whole) == []


def test_a_failing_tokenizer_locates_the_divergence_by_characters() -> None:
    class Broken:
        exact = True

        def encode(self, text: str) -> list[int]:
            raise RuntimeError("/tokenize answered HTTP 500")

    div = first_divergence("the river bends", "the river turns", Broken())  # type: ignore[arg-type]
    assert div is not None and div.token_index is None and div.char_offset == 10
    assert div.where() == (
        "character 10 (token position unknown: the token counter failed "
        "(RuntimeError: /tokenize answered HTTP 500))"
    )
    assert first_divergence("same", "same", Broken()) is None  # type: ignore[arg-type]


def test_the_baseline_diagnosis_does_not_compare_a_cut_answer() -> None:
    class Baseline:
        base_url = "http://127.0.0.1:9/v1"

        def replay(self, spec: RequestSpec) -> Completion:
            return _answer()

    cut = _answer("The harb", done=False)
    found = [Violation("stream-integrity", "no [DONE]"), Violation("early-stop", "short")]
    diagnosis = Diagnoser(Baseline()).diagnose(cut, found, lambda c: [])  # type: ignore[arg-type]
    assert diagnosis.blame == "undetermined", diagnosis
    assert diagnosis.reason.startswith("not comparable: the server's answer did not arrive whole")
    assert "speculative decoding" not in diagnosis.render()


def test_comparable_budgets_are_still_judged_beside_the_cut_ones() -> None:
    from pytest_ddtree.checks.diagnose import lossless_footer, lossless_header

    reference = _answer("The harbour is busy today.", budget=None)
    outputs = {
        16: _answer("The harbour is busy today.", budget=16),
        64: _answer("The harb", done=False, budget=64),
        128: _answer("The harbour is quiet today.", budget=128),
    }
    result = judge_lossless(reference, outputs, Lossless("exact"))
    assert set(result.divergences) == {128} and set(result.not_comparable) == {64}
    assert lossless_header(result) == (
        "not lossless: 1 of 3 budget(s) change the temperature-0 output "
        "(reference: target-only baseline); 1 more not comparable"
    )
    assert lossless_footer(result, has_baseline=True).startswith("diagnosis: speculative decoding")
    cut_only = judge_lossless(reference, {64: outputs[64]}, Lossless("exact"))
    footer = lossless_footer(cut_only, has_baseline=True)
    assert footer.startswith("diagnosis: undetermined - not comparable: tree_budget 64: ")
    assert "speculative decoding" not in footer


def test_a_refused_request_is_advised_on_the_field_it_asked_for_not_a_cut_stream() -> None:
    from pytest_ddtree.checks.coldwarm import LABELS, WARM, Batch, _unjudged

    body = {
        "messages": [],
        "tools": [{"type": "function", "function": {"name": "get_weather"}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    }
    spec = RequestSpec("chat", "http://127.0.0.1:9/v1/chat/completions", body, None, True, 32, 0.0)
    refused = replace(
        _answer("", finish=None),
        request=spec,
        status_code=400,
        error="HTTP 400: tool_choice not supported without --tool-call-parser",
        error_kind="http",
    )
    reference = _answer()
    result = judge_lossless(reference, {None: refused}, Lossless("exact"))
    advice = result.not_comparable[None].advice
    assert advice.startswith("the server refused the request (HTTP 400)"), advice
    assert "tools=[get_weather]; tool_choice={'type': 'function'" in advice, advice
    assert "stream" not in advice, advice
    unjudged = _unjudged(reference, refused, LABELS[WARM], Batch(0, 0, 0))
    assert unjudged is not None and unjudged.advice == advice
    # a 5xx, a 429 and a cut stream keep the advice about an answer cut short
    for status, kind in ((503, "http"), (429, "rate-limited")):
        failed = replace(refused, status_code=status, error_kind=kind)
        other = judge_lossless(reference, {None: failed}, Lossless("exact")).not_comparable
        assert other[None].advice.startswith("an answer that did not arrive whole"), status
    cut = judge_lossless(reference, {None: _answer(done=False)}, Lossless("exact"))
    assert cut.not_comparable[None].advice.startswith("an answer that did not arrive whole")
    # the options that shape any request come first (a budget out of range is the common 400)
    assert "a tree budget outside the server's range" in advice
    # a refused baseline is named as the baseline, not the server
    theirs = judge_lossless(refused, {None: reference}, Lossless("exact")).not_comparable[None]
    assert theirs.advice.startswith("the target-only baseline refused the request (HTTP 400)")
    assert "check that the target-only baseline serves each of them" in theirs.advice
    assert "check that the server serves" not in theirs.advice
    # a malformed tool (what a server refuses) is named as it can be, never a crash
    odd = {"tools": [{"type": "function", "function": None}, "get_weather"], "seed": 7}
    odd_spec = replace(spec, body=odd)
    assert requested_features(replace(refused, request=odd_spec)) == ["tools=[?, ?]", "seed=7"]
    # a field the check itself sent (the distribution test's seed) is not the prompt set's
    assert requested_features(replace(refused, request=odd_spec), injected=("seed",)) == [
        "tools=[?, ?]"
    ]
    # nothing asked beyond plain chat: no sentence about fields
    plain = replace(refused, request=replace(spec, body={"messages": []}))
    assert not_whole_advice(plain, default="") == (
        "the server refused the request (HTTP 400), so there is no answer to compare: "
        + SHAPING_OPTIONS
    )
