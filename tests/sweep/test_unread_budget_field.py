"""Budgets the endpoint's dialect never reads stop the run at once, in one line.

llama.cpp reads no ``tree_budget`` field: a default sweep sent it seven budgets and timed the
server's own seven times. The run stops at the first answer in its dialect (or at start,
when the dialect is configured), naming ``--ddtree-budget-mode none``.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from pytest_ddtree.core.options import resolve, unread_budget_field
from pytest_ddtree.reference import ReferenceServer, start_reference_server

FIX = "give --ddtree-budget-mode none"

TEST_FILE = """
def test_each_budget(ddtree_client, ddtree_check, tree_budget):
    messages = [{"role": "user", "content": "Name three colours."}]
    ddtree_check(ddtree_client.chat(messages, tree_budget=tree_budget, max_tokens=12))
"""


def test_a_default_sweep_to_a_llamacpp_dialect_names_the_options_that_fix_it() -> None:
    why = unread_budget_field(resolve({}, {}, {}), "llamacpp", "detected from its first answer")
    assert why is not None
    assert "dialect 'llamacpp' (detected from its first answer)" in why
    assert "read no 'tree_budget' field" in why
    assert FIX in why and "--ddtree-budget-field /speculative.n_max" in why


@pytest.mark.parametrize(
    ("options", "dialect"),
    [
        ({}, "ddtree"),  # its servers read tree_budget
        ({}, "vllm"),  # the dialect names no budget field: nothing known either way
        ({}, None),  # nothing detected
        ({"ddtree_budget_mode": "none"}, "llamacpp"),
        ({"ddtree_budget_mode": "field"}, "llamacpp"),  # chosen: sent as chosen
        ({"ddtree_budget_field": "tree_budget"}, "llamacpp"),
        ({"ddtree_budgets": "16"}, "llamacpp"),  # one budget: nothing is swept
    ],
)
def test_chosen_options_or_a_dialect_that_reads_the_field_never_stop_a_run(
    options: dict[str, str], dialect: str | None
) -> None:
    assert unread_budget_field(resolve(options, {}, {}), dialect, "configured") is None


def _as_llamacpp(obj: Any) -> Any:
    """An answer (or chunk) of the reference server with its statistics where llama.cpp
    puts them: ``timings``, counted in tokens."""
    if not isinstance(obj, dict) or "ddtree_stats" not in obj:
        return obj
    stats = obj.pop("ddtree_stats")
    tokens = (obj.get("usage") or {}).get("completion_tokens", 0)
    rounds = stats.get("cycles", 0)
    obj["timings"] = {
        "predicted_n": tokens,
        "predicted_per_second": stats.get("tok_per_sec", 0.0),
        "draft_n": rounds * (stats.get("block_size", 1) - 1),
        "draft_n_accepted": max(tokens - rounds, 0),
    }
    return obj


def _rewrite(kind: str, answer: bytes) -> bytes:
    if kind.startswith("application/json"):
        return json.dumps(_as_llamacpp(json.loads(answer))).encode()
    lines = []
    for line in answer.decode().split("\n"):
        if line.startswith("data: {"):
            line = "data: " + json.dumps(_as_llamacpp(json.loads(line[6:])))
        lines.append(line)
    return "\n".join(lines).encode()


class _LlamaCppDialect(BaseHTTPRequestHandler):
    """Relays to ``upstream`` (a reference server) with its statistics rewritten into
    llama.cpp's dialect."""

    upstream = ""

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _relay(self, method: str) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
        req = urllib.request.Request(self.upstream + self.path[len("/v1") :], body, method=method)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, kind, answer = resp.status, resp.headers["Content-Type"], resp.read()
        except urllib.error.HTTPError as exc:
            status, kind, answer = exc.code, exc.headers["Content-Type"], exc.read()
        kind = kind or "application/json"
        if status == 200 and method == "POST":
            answer = _rewrite(kind, answer)
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def do_GET(self) -> None:
        self._relay("GET")

    def do_POST(self) -> None:
        self._relay("POST")


@pytest.fixture(scope="module")
def upstream() -> Iterator[ReferenceServer]:
    with start_reference_server(simulated_latency=False) as server:
        yield server


@pytest.fixture
def llamacpp_dialect(
    loopback: Callable[[ThreadingHTTPServer], str], upstream: ReferenceServer
) -> str:
    relay = type("Relay", (_LlamaCppDialect,), {"upstream": upstream.base_url})
    return loopback(ThreadingHTTPServer(("127.0.0.1", 0), relay)) + "/v1"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("DDTREE_", "OPENAI_", "PYTEST_ADDOPTS")):
            monkeypatch.delenv(name)


@pytest.mark.usefixtures("clean_env")
def test_a_sweep_to_an_endpoint_answering_in_llamacpp_dialect_stops_at_its_first_answer(
    pytester: pytest.Pytester, llamacpp_dialect: str
) -> None:
    pytester.makepyfile(test_budgets=TEST_FILE)
    result = pytester.runpytest("-p", "no:xdist", f"--ddtree-endpoint={llamacpp_dialect}")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out
    assert "dialect 'llamacpp' (detected from its first answer)" in out, out
    assert FIX in out, out
    assert "passed" not in out and "failed" not in out, out  # not one budget was timed


@pytest.mark.usefixtures("clean_env")
def test_the_option_the_stop_names_runs_the_sweep(
    pytester: pytest.Pytester, llamacpp_dialect: str
) -> None:
    pytester.makepyfile(test_budgets=TEST_FILE)
    result = pytester.runpytest(
        "-p", "no:xdist", f"--ddtree-endpoint={llamacpp_dialect}", "--ddtree-budget-mode=none"
    )
    out = result.stdout.str()
    result.assert_outcomes(passed=1)
    assert "statistics dialect detected: llamacpp" in out, out
    assert FIX not in out, out


@pytest.mark.usefixtures("clean_env")
def test_a_configured_llamacpp_dialect_stops_before_any_request(
    pytester: pytest.Pytester, upstream: ReferenceServer
) -> None:
    pytester.makepyfile(test_budgets=TEST_FILE)
    result = pytester.runpytest(
        "-p",
        "no:xdist",
        f"--ddtree-endpoint={upstream.base_url}",
        "--ddtree-dialect=llamacpp",
    )
    err = result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, err
    assert "dialect 'llamacpp' (from option --ddtree-dialect)" in err, err
    assert FIX in err, err
