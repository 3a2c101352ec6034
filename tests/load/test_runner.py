"""The load runner against real reference servers: concurrency, validation, client health."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from pytest_ddtree.checks.invariants import check
from pytest_ddtree.measure.load import (
    LoadError,
    LoadPoint,
    LoadTester,
    arrival_offsets,
    parse_slo,
)
from pytest_ddtree.measure.load.runner import run_point
from pytest_ddtree.reference import spawn_reference_server, tokenizer_path
from pytest_ddtree.reference.cost import DEFAULT_PROMPTS, optimal_schedule
from pytest_ddtree.report.client_text import client_reason
from pytest_ddtree.report.load_text import failure_text, load_lines, schedule_text
from pytest_ddtree.wire.protocol import EndpointConfig
from pytest_ddtree.wire.tokens import load_counter

PROMPTS = list(DEFAULT_PROMPTS)


def _tester(server: Any, **kw: Any) -> LoadTester:
    counter = load_counter(str(tokenizer_path()))
    return LoadTester(
        EndpointConfig(server.base_url),
        judge=lambda c, **e: check(c, counter=counter, **e),
        counter=counter,
        describe=failure_text,
        **kw,
    )


def test_64_concurrent_streams(timed_server: Any) -> None:
    result = _tester(timed_server, tree_budgets=[32], concurrencies=[64], requests=128)(PROMPTS)
    (s,) = result.stats
    assert (s.requests, s.valid, s.invalid) == (128, 128, 0)
    assert s.codes == {}
    # 64 streams really overlapped (the benchmark quotes the exact figure)
    assert s.achieved_concurrency > 32
    assert s.ttft is not None and s.tpot is not None and s.itl is not None
    # the batching server reports its own TTFT for every streamed request
    assert all(x.server_ttft is not None and x.server_ttft > 0 for x in result.samples)
    assert s.mean_acceptance_length is not None and s.mean_acceptance_length > 1


def test_rate_mode_sends_on_schedule(fast_server: Any) -> None:
    # 8 requests: each has a connection opened before the clock starts
    result = _tester(fast_server, tree_budgets=[16], concurrencies=(), rates=[10.0])(
        PROMPTS, requests=8
    )
    (s,) = result.stats
    assert s.point == LoadPoint("rate", 10.0) and s.valid == 8
    # each request goes at its seeded arrival time (0.71 s from the first to the last) or
    # later (a busy machine), never early; timed from the first request, which may be late
    # too: hence the 0.1 s
    starts = [x.start - result.samples[0].start for x in result.samples]  # in sending order
    schedule = arrival_offsets(10.0, 8, seed=0)
    early = max(due - sent for sent, due in zip(starts, schedule, strict=True))
    assert early < 0.1, list(zip(starts, schedule, strict=True))


def test_invalid_requests_fail_with_their_code() -> None:
    with spawn_reference_server(simulated_latency=False, faults=("role-leak",)) as server:
        tester = _tester(server, tree_budgets=[16, 64], concurrencies=[4])
        with pytest.raises(LoadError) as info:
            tester(PROMPTS, requests=8)
    msg = str(info.value)
    assert msg.startswith("16 of 16 requests under load broke output-quality invariants")
    assert "role-leak x16" in msg and "first evidence:" in msg and "[role-leak]" in msg
    # the same as data, for a caller that words it itself (or none: then its repr)
    failure = info.value.failure
    assert failure is not None and failure.broken == 16 and not failure.missed


def test_slo_breach_fails(fast_server: Any) -> None:
    tester = _tester(fast_server, tree_budgets=[16], concurrencies=[1])
    ok = tester(PROMPTS, requests=4, slo=parse_slo("e2e=60s", "test"))
    assert ok.stats[0].slo_met is True and ok.stats[0].goodput_share == 1.0
    with pytest.raises(LoadError) as info:
        tester(PROMPTS, requests=4, slo=parse_slo("ttft=1us", "test"))
    msg = str(info.value)
    # a miss is never blamed on the server when the client itself was saturated
    assert msg.startswith(("SLO missed at 1 load point", "SLO verdict withheld"))
    assert "goodput 0.0% < 100% required by ttft=0.001ms" in msg
    # a goodput share below 100% is the bar when the SLO names one
    with pytest.raises(LoadError) as info:
        tester(PROMPTS, requests=4, slo=parse_slo("ttft=1us,goodput=50%", "test"))
    assert "goodput 0.0% < 50% required by ttft=0.001ms,goodput=50%" in str(info.value)


def test_a_saturated_client_is_flagged(fast_server: Any) -> None:
    ep = EndpointConfig(fast_server.base_url)
    specs = [ep.spec(p, tree_budget=16, max_tokens=64) for p in PROMPTS * 2]

    async def busy_client() -> Any:
        async def hog() -> None:  # other work blocking the client's event loop
            for _ in range(40):
                time.sleep(0.03)
                await asyncio.sleep(0)

        hogging = asyncio.create_task(hog())
        out = await run_point(ep, specs, LoadPoint("concurrency", 4))
        hogging.cancel()
        return out

    *_, health = asyncio.run(busy_client())
    # blocked, not busy: sleeping in the loop costs no CPU, so it is stalled, not saturated
    assert health.unreliable and "event-loop lag" in client_reason(health)
    assert health.lag_max >= 0.02


def test_transport_failures_are_reported_not_dropped() -> None:
    # nothing listens on this port: every request fails and is counted as invalid
    ep = EndpointConfig("http://127.0.0.1:9/v1")
    tester = LoadTester(ep, judge=None, concurrencies=[2], describe=failure_text)
    with pytest.raises(LoadError) as info:
        tester(["hello"], requests=3)
    assert "3 of 3 requests under load" in str(info.value)
    assert "transport x3" in str(info.value)
    # a tester made without the report's words fails the same, its message the data
    tester.describe = None
    with pytest.raises(LoadError) as info:
        tester(["hello"], requests=3)
    assert str(info.value).startswith("LoadFailure(") and info.value.failure is not None
    assert info.value.failure.broken == 3


@pytest.mark.serial
def test_schedule_matches_the_batching_servers_optimum(timed_server: Any) -> None:
    # budgets whose predicted rates differ by more than 20% at each concurrency, so the
    # comparison does not hinge on the cost model's ties
    budgets, cs = [16, 64, 256], [1, 8]
    expected = optimal_schedule(budgets, cs, prompts=PROMPTS, max_tokens=64)
    assert expected == {1: 64, 8: 16}
    result = _tester(timed_server, tree_budgets=budgets, concurrencies=cs, max_tokens=64)(PROMPTS)
    measured = {c.point.concurrency: c.tree_budget for c in result.schedule.choices}
    assert measured == expected, load_lines(result.stats, result.schedule)
    assert schedule_text(result.schedule) == "C<=1: 64, C>1: 16"


def test_a_request_the_loop_stalled_in_has_its_speed_claim_withheld() -> None:
    """The event loop's late wake-ups over one request's decode window: that request's
    rate comparison is withheld (counted on the sample), the others are judged."""
    from pytest_ddtree.measure.load.runner import completion_of, validate
    from pytest_ddtree.wire.health import StallLog

    counter = load_counter(str(tokenizer_path()))

    def judge(c: Any, **e: Any) -> list[Any]:
        return check(c, counter=counter, **e)

    with spawn_reference_server(simulated_latency=True, faults=("stats-inflated",)) as server:
        ep = EndpointConfig(server.base_url)
        specs = [ep.spec(p, tree_budget=16, max_tokens=96) for p in PROMPTS[:4]]
        raws, wall0, perf0, _ = asyncio.run(run_point(ep, specs, LoadPoint("concurrency", 1)))
    point = LoadPoint("concurrency", 1)
    for r in raws:  # a clean log: every request judged
        r.stalls = StallLog("event-loop")
    judged = validate(raws, point, wall0, perf0, judge=judge)
    rated = [
        any("client_decode_tokens_per_second" in v.evidence for v in judge(completion_of(r)))
        for r in raws
    ]
    assert all(not s.withheld for s in judged) and any(rated)
    stalled = StallLog("event-loop")  # the loop late across the whole of every decode
    stalled.tick(min(r.stamps[0] for r in raws if r.stamps), max(r.done for r in raws))
    for r in raws:
        r.stalls = stalled
    spared = validate(raws, point, wall0, perf0, judge=judge)
    assert [s.withheld == ("stats-inflated",) for s in spared] == rated
    # the acceptance check needs no client timing: still a verdict
    assert all(not s.valid and "stats-inflated" in s.codes for s in spared)
    assert all("client measured" not in s.evidence for s in spared if s.withheld)


def test_a_check_withheld_for_the_requests_own_sake_is_no_timing_matter() -> None:
    """Only a check withheld because the client stalled counts on the sample (the load
    table's "timing checks withheld"); one withheld for the request (a schema that is not
    one) does not."""
    from pytest_ddtree.checks.invariants import Findings, Withheld
    from pytest_ddtree.measure.load.runner import validate

    def judge(c: Any, **e: Any) -> Findings:
        found = Findings()
        found.withheld = (
            Withheld("json-schema", "not a valid JSON Schema"),
            Withheld("stats-inflated", "client stalled 0.1 s of a 0.2 s decode", True),
        )
        return found

    with spawn_reference_server(simulated_latency=False) as server:
        ep = EndpointConfig(server.base_url)
        specs = [ep.spec(p, tree_budget=16, max_tokens=16) for p in PROMPTS[:2]]
        point = LoadPoint("concurrency", 1)
        raws, wall0, perf0, _ = asyncio.run(run_point(ep, specs, point))
    samples = validate(raws, point, wall0, perf0, judge=judge)
    assert [s.withheld for s in samples] == [("stats-inflated",)] * 2
    assert all(s.valid for s in samples)


def test_a_saturated_client_withholds_only_its_timing_checks() -> None:
    """The server's decode rate is compared with the client's own timings only when the
    client kept up; the checks that need no client timing (acceptance) still judge."""
    from pytest_ddtree.measure.load.runner import completion_of, validate

    counter = load_counter(str(tokenizer_path()))

    def judge(c: Any, **e: Any) -> list[Any]:
        return check(c, counter=counter, **e)

    with spawn_reference_server(simulated_latency=True, faults=("stats-inflated",)) as server:
        ep = EndpointConfig(server.base_url)
        specs = [ep.spec(p, tree_budget=16, max_tokens=96) for p in PROMPTS[:4]]
        raws, wall0, perf0, _health = asyncio.run(run_point(ep, specs, LoadPoint("concurrency", 1)))
    point = LoadPoint("concurrency", 1)
    # the point-wide verdict alone here (a busy machine may stall single requests too: that
    # per-request withholding is the next test's)
    for r in raws:
        r.stalls = None
    rate_checked = [
        any("client_decode_tokens_per_second" in v.evidence for v in judge(completion_of(r)))
        for r in raws
    ]
    assert any(rate_checked)  # the inflated rate is caught when the client kept up
    judged = validate(raws, point, wall0, perf0, judge=judge)
    spared = validate(raws, point, wall0, perf0, judge=judge, client_saturated=True)
    assert all(not s.withheld for s in judged)
    # saturated: the rate comparison is withheld and said so ...
    assert [bool(s.withheld) for s in spared] == rate_checked
    assert all(s.withheld in ((), ("stats-inflated",)) for s in spared)
    # ... and the checks that need no client timing (acceptance x rounds) still fail
    assert all(not s.valid and "stats-inflated" in s.codes for s in spared)


def test_a_stale_keep_alive_connection_is_retried_once_on_a_fresh_one() -> None:
    """A server that closes an idle keep-alive connection without a byte (llama.cpp does,
    after a stream) costs one counted retry on a fresh connection, never an error."""
    from hardening._hostile import HostileServer

    with HostileServer("stale") as server:
        ep = EndpointConfig(server.base_url)
        specs = [ep.spec(p, tree_budget=16, max_tokens=32) for p in PROMPTS[:3]]
        raws, *_, health = asyncio.run(run_point(ep, specs, LoadPoint("concurrency", 1)))
    # each later request found its connection closed, and was sent once more, fresh
    assert server.stale_closed == 2
    assert [r.error for r in raws] == [None, None, None]
    assert [r.retried for r in raws] == [False, True, True]
    assert health.retries == 2 and health.to_json()["retries"] == 2


def test_workers_that_share_a_point_send_what_one_process_sends(fast_server: Any) -> None:
    # --dist each over 2 workers deals each point's streams (stream j to worker j mod 2) and
    # every stream's requests with it: at C=1 only the first worker holds a stream, so it
    # sends all 12 requests; at C=3 the worker with two streams sends 8 and the other 4 (4 a
    # stream, as one process sends: dealt evenly per worker, the one-stream worker ran twice
    # as many rounds); at C=4, 6 each. Together they send every prompt the one-process run
    # sends, each once
    def sent(**kw: Any) -> dict[str, list[str]]:
        result = _tester(fast_server, concurrencies=[1, 3, 4], requests=12, max_tokens=8, **kw)(
            PROMPTS
        )
        out: dict[str, list[str]] = {}
        for s in result.samples:
            out.setdefault(s.point.label, []).append(s.prompt_id)
        return out

    whole = sent()
    parts = [sent(share=i, shares=2) for i in range(2)]
    assert [len(p.get("C=1", [])) for p in parts] == [12, 0]
    assert [len(p["C=3"]) for p in parts] == [8, 4]
    assert [len(p["C=4"]) for p in parts] == [6, 6]
    for label in ("C=1", "C=3", "C=4"):
        merged = sorted(x for p in parts for x in p.get(label, []))
        assert merged == sorted(whole[label]), label
