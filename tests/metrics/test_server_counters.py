"""The server's Prometheus counters: deltas, other traffic, consistency, bad pages."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import httpx
import pytest

from pytest_ddtree.measure.sweep.drift import DRIFT_PAIRS
from pytest_ddtree.reference import start_reference_server, tokenizer_path
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.servermetrics import (
    CounterDelta,
    GroupWatch,
    MetricsReader,
    RequestSums,
    ServerMetricsLog,
    Snapshot,
    default_metrics_url,
    delta,
    other_traffic,
    parse,
    stats_disagreement,
)

PROMPTS = {
    "rivers": "Write a short essay about rivers and the towns along them.",
    "count": "Count from one to twenty in words, separated by commas.",
}


def _client(server: Any) -> DDTreeClient:
    return DDTreeClient(server.base_url, model="ddtree-reference")


def test_counter_deltas_equal_the_per_request_sums(vllm_server: Any) -> None:
    log = ServerMetricsLog(MetricsReader(default_metrics_url(vllm_server.base_url)))
    assert log.reader.probe() is not None and log.reader.status.endswith("(vllm)")
    watch = GroupWatch(log, "direct")
    client = _client(vllm_server)
    try:
        for budget in (16, 128):
            watch.start(0, budget)
            done = [
                client.chat(p, max_tokens=64, tree_budget=budget, stream=stream)
                for p in PROMPTS.values()
                for stream in (True, False)
            ]
            watch.end(0, budget, done)
    finally:
        client.close()
    assert [r.tree_budget for r in watch.records] == [16, 128]
    for record in watch.records:
        stats = [c.stats for c in _completions_of(record, watch)]
        d = record.delta
        assert d.prefix == "vllm" and d.requests == record.sent == 4
        assert d.draft_tokens == sum(s.num_draft_tokens for s in stats)
        assert d.accepted_tokens == sum(s.num_accepted_draft_tokens for s in stats)
        # one verification step per speculative step (the prefill round is none)
        assert d.drafts == sum(s.decode_rounds for s in stats)
        assert sum(d.accepted_per_position.values()) == d.accepted_tokens
        rates = list(d.position_rates.values())
        assert rates == sorted(rates, reverse=True) and 0 < rates[0] <= 1
        assert d.acceptance_length is not None and d.acceptance_length > 1
        assert record.shared is None and record.inconsistent == ()
    # a deeper tree is accepted further: the counters show the budget's effect
    low, high = (r.delta.acceptance_length for r in watch.records)
    assert low is not None and high is not None and high > low


_SEEN: dict[int, list[Any]] = {}


def _completions_of(record: Any, watch: GroupWatch) -> list[Any]:
    return _SEEN[id(record)]


@pytest.fixture(autouse=True)
def _remember_completions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep each watched group's completions, to sum their statistics in the test."""
    real = GroupWatch.end

    def end(self: GroupWatch, *args: Any, **kwargs: Any) -> None:
        # the signature as the callers use it (the load runner passes label= too)
        real(self, *args, **kwargs)
        completions = kwargs.get("completions", args[2] if len(args) > 2 else ())
        if self.records:
            _SEEN[id(self.records[-1])] = list(completions)

    monkeypatch.setattr(GroupWatch, "end", end)


def _snap(**values: float) -> Snapshot:
    lines = []
    for key, value in values.items():
        name, _, pos = key.partition("__")
        labels = f'{{position="{pos}"}}' if pos else ""
        lines.append(f"# TYPE {name} counter" if name.endswith("_total") else "")
        lines.append(f"{name}{labels} {value}")
    return parse("\n".join(line for line in lines if line) + "\n")


def test_llamacpp_counters_absent_before_the_first_draft_count_from_zero() -> None:
    before = parse("llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n")
    after = parse(
        "# TYPE llamacpp:spec_decode_num_drafts_total counter\n"
        "llamacpp:spec_decode_num_drafts_total 7\n"
        "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter\n"
        "llamacpp:spec_decode_num_draft_tokens_total 21\n"
        "# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter\n"
        "llamacpp:spec_decode_num_accepted_tokens_total 12\n"
        "llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n"
    )
    d = delta(before, after)
    assert (d.prefix, d.drafts, d.draft_tokens, d.accepted_tokens) == ("llamacpp", 7, 21, 12)
    assert d.requests is None  # llama.cpp counts no finished requests
    assert d.acceptance_length == pytest.approx(1 + 12 / 7)


def test_other_traffic_and_consistency_verdicts() -> None:
    quiet = CounterDelta("vllm", requests=4, running_before=0, waiting_before=0)
    assert other_traffic(quiet, 4, serial=True) is None
    more = CounterDelta("vllm", requests=6, running_before=0, waiting_before=0)
    assert other_traffic(more, 4, serial=True) == "the server finished 6 requests, the suite sent 4"
    busy = CounterDelta("vllm", requests=4, running_before=1, waiting_before=2)
    assert "1 running and 2 waiting before a serial timing" in str(
        other_traffic(busy, 4, serial=True)
    )
    assert other_traffic(busy, 4, serial=False) is None
    counted = CounterDelta("vllm", draft_tokens=1000, accepted_tokens=500)
    assert stats_disagreement(counted, RequestSums(1000, 505)) == []  # within 1%
    wrong = stats_disagreement(counted, RequestSums(1000, 700))
    assert wrong == [
        "accepted tokens: the responses report 700, the server's counters grew by 500 (tolerance 5)"
    ]
    assert stats_disagreement(counted, RequestSums(None, None)) == []  # not comparable


def _args(server: Any, *extra: str) -> list[str]:
    return [
        f"--ddtree-endpoint={server.base_url}",
        f"--ddtree-tokenizer={tokenizer_path()}",
        "--ddtree-budgets=16,64,256",
        "-p",
        "no:cacheprovider",
        *extra,
    ]


SECOND_CLIENT = """
import threading

import httpx

def test_sweep(ddtree_sweep, ddtree_runtime, ddtree_endpoint, ddtree_model):
    client = ddtree_runtime.client
    real = client.request

    def other_client():
        body = {{"model": ddtree_model, "max_tokens": 16,
                "messages": [{{"role": "user", "content": "Say hello."}}]}}
        with httpx.Client(timeout=30) as http:
            for _ in range(2):
                http.post(ddtree_endpoint + "/chat/completions", json=body).raise_for_status()

    def request(prompt, **kwargs):
        # a second client shares the server while tree_budget 64 is timed, and only then
        if kwargs.get("tree_budget") != 64:
            return real(prompt, **kwargs)
        other = threading.Thread(target=other_client)
        other.start()
        try:
            return real(prompt, **kwargs)
        finally:
            other.join(30)

    client.request = request
    ddtree_sweep({prompts!r}, max_tokens=48, rounds=2, warmup_rounds=1, order="fixed")
"""


def test_a_second_client_is_flagged_on_the_budgets_it_overlapped(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_shared=SECOND_CLIENT.format(prompts={"a": PROMPTS["rivers"]}))
    report = pytester.path / "report"
    # the reference server's own dialect echoes the budget; its /metrics uses vLLM's names
    with start_reference_server(simulated_latency=False) as server:
        # the full grid: the counts below are the exhaustive sweep's requests
        result = pytester.runpytest(
            *_args(server, f"--ddtree-report={report}", "--ddtree-sweep=exhaustive")
        )
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    rows = {
        line.split()[0]: line
        for line in out.splitlines()
        if line.split()[:1] in (["16"], ["64"], ["256"])
    }
    assert "(shared server)" in rows["64"], out
    assert "shared server" not in rows["16"] + rows["256"], out
    result.stdout.fnmatch_lines(
        [
            "*server metrics: http://127.0.0.1:*/metrics (vllm)*",
            "WARNING: tree_budget 64: shared server: the server finished 3 requests, "
            "the suite sent 1*",
            "recommendation caveat: another client shared the server while tree_budget 64 "
            "was timed*cannot be trusted as is*",
            "server counters, tree_budget 16: accept len * over all traffic, * verify steps; "
            "accepted at draft positions 0, 1, ...: 0.*",
        ]
    )
    doc = json.loads((report / "sweep.json").read_text())
    counters = doc["metadata"]["server_counters"]
    assert [s["tree_budget"] for s in counters["shared"]] == [64]
    notes = doc["metadata"]["notes"]
    assert any(n.startswith("tree_budget 64: shared server: ") for n in notes), notes
    assert any(n.startswith("recommendation caveat: ") for n in notes), notes
    by_budget = {b["tree_budget"]: b for b in counters["budgets"]}
    assert set(by_budget) == {16, 64, 256}
    # the suite's own requests alone: one prompt x two rounds per budget, and at the
    # first budget the drift check's two blocks of DRIFT_PAIRS requests
    assert by_budget[256]["requests"] == 2
    assert by_budget[16]["requests"] == 2 + 2 * DRIFT_PAIRS
    assert by_budget[64]["requests"] == 2 + 2 * 2
    assert by_budget[16]["acceptance_length"] > 1
    html = (report / "sweep.html").read_text()
    # the section's own text names "shared server" too: the mark is the 64 row's cell alone
    assert "<h2>Server counters</h2>" in html
    assert html.count("<td><strong>shared server</strong>: ") == 1, html
    mark = "<td><strong>shared server</strong>: the server finished 3 requests, the suite sent 1"
    assert mark in html, html


BENCH = """
def test_bench(ddtree_benchmark, tree_budget):
    ddtree_benchmark("Write a short essay about rivers.", max_tokens=32, rounds=2,
                     warmup_rounds=0)
"""


def test_benchmark_extra_info_holds_the_counter_deltas(
    pytester: pytest.Pytester, ddtree_server: Any
) -> None:
    pytester.makepyfile(test_bench=BENCH)
    saved = pytester.path / "bench.json"
    result = pytester.runpytest(*_args(ddtree_server, f"--benchmark-json={saved}"))
    result.assert_outcomes(passed=3)
    benches = json.loads(saved.read_text())["benchmarks"]
    for bench in benches:
        info = bench["extra_info"]["server_counters"]
        assert info["prefix"] == "vllm" and info["requests"] == 2
        assert info["accepted_tokens"] > 0 and "shared_server" not in info


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/html", "not Prometheus text"),
        ("/huge", "larger than 4096 KiB: not read"),
        ("/slow", "slower than the time allowed: abandoned"),
    ],
)
def test_a_bad_metrics_page_is_one_warning_and_the_run_goes_on(
    pytester: pytest.Pytester, ddtree_server: Any, bad_metrics: Any, path: str, why: str
) -> None:
    url = bad_metrics.url(path)
    pytester.makepyfile(
        test_sweep=textwrap.dedent(
            """
            def test_sweep(ddtree_sweep):
                ddtree_sweep({"a": "Say hello."}, max_tokens=16, rounds=2, warmup_rounds=0)
            """
        )
    )
    result = pytester.runpytest(*_args(ddtree_server, f"--ddtree-metrics-url={url}"))
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [f"ddtree: server metrics: off: {url}: {why}* (see the warning at the end)"]
    )
    assert out.count("WARNING: server metrics") == 1, out  # one warning, naming the URL
    assert f"ddtree: WARNING: server metrics {url}: {why}" in out, out
    assert "Traceback" not in out
    assert bad_metrics.hits[path] == 1  # probed once, never again after the failure


def test_a_missing_metrics_page_turns_the_counters_off_with_one_header_line(
    pytester: pytest.Pytester, ddtree_server: Any, bad_metrics: Any
) -> None:
    url = bad_metrics.url("/nothing")
    pytester.makepyfile(
        test_sweep="""
        def test_sweep(ddtree_sweep):
            ddtree_sweep({"a": "Say hello."}, max_tokens=16, rounds=1, warmup_rounds=0)
        """
    )
    result = pytester.runpytest(*_args(ddtree_server, f"--ddtree-metrics-url={url}"))
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"ddtree: server metrics: off: {url} answered HTTP 404"])
    assert "WARNING: server metrics" not in result.stdout.str()


def test_metrics_url_off_and_a_bad_value(pytester: pytest.Pytester, ddtree_server: Any) -> None:
    pytester.makepyfile(test_x="def test_x(ddtree_check):\n    pass\n")
    off = pytester.runpytest(*_args(ddtree_server, "--ddtree-metrics-url=off"))
    off.assert_outcomes(passed=1)
    off.stdout.fnmatch_lines(["ddtree: server metrics: off (--ddtree-metrics-url off)"])
    bad = pytester.runpytest(*_args(ddtree_server, "--ddtree-metrics-url=ftp://x/metrics"))
    bad.stderr.fnmatch_lines(
        ["*invalid metrics-url 'ftp://x/metrics' (from option --ddtree-metrics-url)*"]
    )


def test_reference_server_metrics_page_is_prometheus(vllm_server: Any) -> None:
    page = httpx.get(vllm_server.root_url + "/metrics", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    snap = parse(page.text)
    assert snap.prefix == "vllm"
    assert snap.total("vllm:num_requests_waiting") == 0


LOAD = """
def test_load(ddtree_load):
    ddtree_load(["Write a short essay about rivers.", "Say hello."], requests=6,
                concurrencies=[1, 3], tree_budgets=[32], max_tokens=24)
"""


def test_load_points_record_the_counter_deltas(
    pytester: pytest.Pytester, ddtree_server: Any
) -> None:
    pytester.makepyfile(test_load=LOAD)
    report = pytester.path / "report"
    result = pytester.runpytest(*_args(ddtree_server, f"--ddtree-report={report}"))
    result.assert_outcomes(passed=1)
    doc = json.loads((report / "sweep.json").read_text())
    records = doc["metadata"]["server_counters"]["records"]
    assert [(r["scope"], r["label"], r["tree_budget"], r["sent"]) for r in records] == [
        ("load", "C=1", 32, 6),
        ("load", "C=3", 32, 6),
    ]
    # each carries its point, which the HTML orders the rows by (no label parsed back)
    assert [r["point"] for r in records] == [
        {"mode": "concurrency", "value": c, "burstiness": 1.0} for c in (1, 3)
    ]
    for r in records:
        assert r["delta"]["requests"] == 6 and "shared" not in r
        assert r["delta"]["acceptance_length"] > 1
    html = (report / "sweep.html").read_text()
    # the counters' own load-point rows (the load section names C=3 too): point, budget,
    # requests sent, requests the server counted
    assert "<h2>Server counters</h2>" in html and "<h3>Load points</h3>" in html
    for label in ("C=1", "C=3"):
        assert f"<td>{label}</td><td>32</td><td>6</td><td>6</td>" in html, label


def test_counters_that_count_late_are_waited_for_and_never_judged_unsettled(
    bad_metrics: Any,
) -> None:
    late = ServerMetricsLog(MetricsReader(bad_metrics.url("/lag")))
    before = late.before()  # counter at 1
    record = late.after(
        before, scope="sweep", test="t", tree_budget=16, label="r", stats=[None] * 2
    )
    # read again until both requests were counted: no false "fewer counted" or spill-over
    assert record is not None and record.settled and record.delta.requests == 2
    assert record.shared is None
    stuck = ServerMetricsLog(MetricsReader(bad_metrics.url("/stuck")))
    before = stuck.before()
    record = stuck.after(before, scope="sweep", test="t", tree_budget=16, label="r", stats=[None])
    assert record is not None and not record.settled and record.shared is None
    assert "not_judged" in record.to_json()


def test_a_default_url_that_is_not_prometheus_means_no_metrics(bad_metrics: Any) -> None:
    """The endpoint root's /metrics may be anyone's page (a proxy's HTML): off, no warning."""
    default = MetricsReader(bad_metrics.url("/html"), explicit=False)
    assert default.probe() is None and default.warning is None
    assert default.status.startswith(f"off: {bad_metrics.url('/html')} is not Prometheus text")
    chosen = MetricsReader(bad_metrics.url("/html"))
    assert chosen.probe() is None and chosen.warning is not None


def test_sglang_gauges_show_other_traffic() -> None:
    """SGLang has no differenceable acceptance counters; its queue gauges still show a tenant."""
    page = (
        "# TYPE sglang:spec_verify_calls_total counter\nsglang:spec_verify_calls_total {n}\n"
        "sglang:spec_accept_length 3.2\n"
        'sglang:num_running_reqs{{model_name="m"}} {running}\n'
        'sglang:num_queue_reqs{{model_name="m"}} 0\n'
    )
    before = parse(page.format(n=10, running=2))
    after = parse(page.format(n=25, running=0))
    d = delta(before, after)
    assert (d.prefix, d.drafts, d.draft_tokens, d.requests) == ("sglang", 15, None, None)
    assert d.acceptance_length is None  # no accepted-token counter: never invented
    assert other_traffic(d, 4, serial=True) == "2 running and 0 waiting before a serial timing"


UNDERCOUNT = """
import dataclasses

def test_sweep(ddtree_sweep, ddtree_runtime):
    client = ddtree_runtime.client
    real = client.request

    def request(prompt, **kwargs):
        # the responses claim three accepted tokens more than the server counted (and no
        # histogram, mean or rate, which would give the claim away within the response)
        c = real(prompt, **kwargs)
        s = c.stats
        claimed = dataclasses.replace(
            s, num_accepted_draft_tokens=s.num_accepted_draft_tokens + 3,
            acceptance_histogram=None, depth_source=None, mean_acceptance_length=None, raw={},
        )
        return dataclasses.replace(c, stats=claimed)

    client.request = request
    ddtree_sweep({"a": "Write a short essay about rivers."}, budgets=[64], max_tokens=48,
                 rounds=2, warmup_rounds=0)
"""


def test_responses_that_disagree_with_the_counters_are_stats_inconsistent(
    pytester: pytest.Pytester, vllm_server: Any
) -> None:
    pytester.makepyfile(test_undercount=UNDERCOUNT)
    result = pytester.runpytest(*_args(vllm_server))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*server counters disagree with the responses' statistics*",
            "*[[]stats-inconsistent[]] the per-request speculation statistics do not add up to "
            "the server's own counters over the same requests",
            "*where: tree_budget 64, round 0: accepted tokens: the responses report *, the "
            "server's counters grew by * (tolerance *)",
        ]
    )
