"""The raced load grid, without a server: runs of simulated requests with a known truth."""

from __future__ import annotations

import random

import pytest

from pytest_ddtree.measure.load import LoadPoint, LoadRecord, Sample, analyse, summarize_point
from pytest_ddtree.measure.load.metrics import ClientHealth, chain_health
from pytest_ddtree.measure.load.race import PointRace, PointRacer, Run, chunk_size, race_point
from pytest_ddtree.measure.load.runner import CLIENT_TIMEOUT
from pytest_ddtree.measure.sweep.race import Why
from pytest_ddtree.report.load_text import load_lines, race_line, schedule_text, unraced_text
from pytest_ddtree.report.race_text import reason

from ._samples import load_sample

C1, C4, C16 = (LoadPoint("concurrency", c) for c in (1, 4, 16))


class Server:
    """Answers each run of a budget with TPOTs drawn around that budget's true TPOT."""

    def __init__(
        self,
        point: LoadPoint,
        truth: dict[int | None, float],
        cv: float = 0.03,
        seed: int = 0,
        run_cv: float = 0.0,
    ) -> None:
        self.point, self.truth, self.cv, self.run_cv = point, truth, cv, run_cv
        self.rng = random.Random(seed)
        self.runs: list[tuple[int | None, int]] = []
        self.invalid: set[int | None] = set()
        self.codes: tuple[str, ...] = ("early-stop",)
        self.clock = 0.0
        self.samples: list[Sample] = []
        self.saturated_runs = 0  # the next runs the client is saturated in

    def __call__(self, budget: int | None, count: int) -> Run:
        self.runs.append((budget, count))
        out = []
        shared = self.rng.gauss(1.0, self.run_cv)  # the run's own conditions, on all of it
        for i in range(count):
            tpot = shared * self.truth[budget] * self.rng.gauss(1.0, self.cv)
            bad = budget in self.invalid and i == 0
            out.append(
                load_sample(
                    self.point,
                    budget,
                    self.clock + i,
                    0.01 + 99 * tpot,
                    0.01,
                    (tpot,),
                    100,
                    not bad,
                    self.codes if bad else (),
                    prompt_id=f"p{i % 2}",
                )
            )
        self.clock += count + 10.0
        self.samples += out
        saturated = self.saturated_runs > 0
        self.saturated_runs -= saturated
        return Run(out, saturated)

    def sent(self, budget: int | None) -> int:
        return sum(k for b, k in self.runs if b == budget)


def test_a_run_is_at_least_c_requests_and_an_eighth_of_the_point() -> None:
    assert chunk_size(C1, 16) == 2
    assert chunk_size(C4, 32) == 4  # the default 8 x C: one wave of C
    assert chunk_size(C16, 128) == 16
    assert chunk_size(C16, 20) == 16  # never fewer than C in flight
    assert chunk_size(C4, 100) == 13
    assert chunk_size(LoadPoint("rate", 2.0), 32) == 4


def test_a_clearly_slower_budget_stops_getting_requests() -> None:
    server = Server(C4, {16: 0.010, 64: 0.006, 256: 0.020})
    race = race_point(C4, (16, 64, 256), 32, server, equivalence=0.02)
    assert race.decided and race.recommended == 64 and race.leader == 64
    assert all(k >= 4 for _, k in server.runs)  # every run keeps C=4 in flight
    left = {x.tree_budget: x for x in race.left}
    assert set(left) == {16, 256} and {x.status for x in left.values()} == {"out"}
    assert left[256].why is not None and left[256].why.kind == "out"
    assert "more than the 2% margin" in reason(left[256].why)
    # the reasons are data in the JSON too (sweep.json, the xdist payload), and read back
    assert PointRace.from_json(race.to_json()) == race
    # each loser got the first batch only (min n 6: two runs of 4), and no more
    assert server.sent(16) == server.sent(256) == 8 == left[16].n
    assert race.requests == sum(k for _, k in server.runs) < race.max_requests == 3 * 32
    assert race_line(race) == f"race decided after {race.requests} of 96 requests"


def test_budgets_within_the_margin_are_as_fast_and_the_smallest_wins() -> None:
    # 128 leads by 0.5%: inside the 5% margin, so the smaller 32 is recommended
    server = Server(C1, {32: 0.01005, 128: 0.0100, 512: 0.02}, cv=0.01)
    race = race_point(C1, (32, 128, 512), 64, server, equivalence=0.05)
    assert race.decided and race.recommended == 32
    status = {b: s for b, _, s, _ in race.standing}
    assert status[512] == "out" and {status[32], status[128]} == {"leader", "as fast"}


def test_a_spent_budget_is_undecided_and_forces_no_winner() -> None:
    # 2% apart with 3% noise and a 2% margin: no honest verdict within the point's budget
    server = Server(C1, {16: 0.0100, 32: 0.0102}, cv=0.03, seed=0)
    race = race_point(C1, (16, 32), 16, server, equivalence=0.02)
    assert race.outcome == "undecided" and race.recommended is None
    assert race.requests <= race.max_requests == 32
    assert set(race.contending) == {16, 32}
    assert "request budget is spent" in race_line(race) and "no winner forced" in race_line(race)
    stats, schedule = analyse(server.samples)
    _, raced = analyse(server.samples, races=[race])
    (choice,) = raced.choices
    assert not choice.chosen and choice.undecided and choice.label is None
    assert schedule_text(raced) == "all C: undecided"
    # the same samples judged in full, by the same rule, force no winner either
    assert schedule.choices[0].decision.status == "undecided"
    table = "\n".join(load_lines(stats, raced))
    assert "best at C=1: undecided; race undecided after" in table
    assert "race at C=1: 16 " in table and "race at C=1: 32 " in table


def test_an_invalid_request_excludes_its_budget_at_the_point() -> None:
    server = Server(C4, {16: 0.010, 64: 0.006})
    server.invalid = {64}
    race = race_point(C4, (16, 64), 32, server, equivalence=0.02)
    (gone,) = race.left
    assert gone.tree_budget == 64 and gone.status == "excluded"
    first = [b for b, _ in server.runs].index(64)
    assert gone.why == Why("invalid", count=1, codes=("early-stop",))
    assert reason(gone.why) == "1 invalid request(s) (early-stop)"
    assert gone.after_requests == 4 * (first + 1) and gone.n == 3  # right after its first run
    assert server.sent(64) == 4  # the first run only
    assert race.decided and race.recommended == 16


def test_the_clients_own_limits_exclude_without_a_verdict_on_the_server() -> None:
    server = Server(C4, {16: 0.010, 64: 0.006})
    server.invalid, server.codes = {64}, (CLIENT_TIMEOUT,)
    race = race_point(C4, (16, 64), 32, server, equivalence=0.02)
    (gone,) = race.left
    assert gone.why is not None and gone.why.kind == "client limits"
    words = reason(gone.why)
    assert "client's own limits" in words and "no verdict on the server" in words


def test_every_budget_invalid_leaves_no_winner() -> None:
    server = Server(C4, {16: 0.010, 64: 0.006})
    server.invalid = {16, 64}
    race = race_point(C4, (16, 64), 32, server, equivalence=0.02)
    assert race.outcome == "undecided" and race.leader is None
    assert "no budget had every request valid" in race_line(race)
    assert race.requests == 8  # nothing sent after both were excluded


def test_the_choice_is_the_races_not_the_best_median() -> None:
    server = Server(C1, {32: 0.01005, 128: 0.0100}, cv=0.002)
    race = race_point(C1, (32, 128), 64, server, equivalence=0.05)
    assert race.decided and race.recommended == 32 and race.leader == 128
    samples = server.samples
    _, full = analyse(samples)
    _, raced = analyse(samples, races=[race])
    # the one rule, in full as raced: the smallest within the margin of the leader (the
    # former exhaustive rule took the lowest median, 128, where the race took 32)
    assert full.best(C1) == 32 and raced.best(C1) == 32
    assert full.choice(C1).decision.leader == 128 == raced.choice(C1).decision.leader
    choice = raced.choice(C1)
    assert choice.n == server.sent(32) and choice.race is race
    doc = raced.to_json()["points"][0]
    assert doc["race"]["recommended"] == 32 and doc["n"] == choice.n
    assert doc["race"]["left"] == [] and doc["undecided"] is False
    line = load_lines(analyse(samples)[0], raced)
    assert any(
        "best at C=1: 32 (TPOT p50" in x and "within 5% of the leader 128" in x for x in line
    )


def test_an_interrupted_race_snapshot_is_undecided() -> None:
    server = Server(C1, {16: 0.010, 64: 0.006})
    racer = PointRacer(C1, (16, 64), 16, equivalence=0.02)
    racer.feed(16, server(16, 4))
    snap = racer.snapshot(interrupted=True)
    assert snap.outcome == "interrupted" and snap.recommended is None
    assert race_line(snap).startswith("race interrupted after 4 of 32 requests: undecided")


def test_a_race_survives_its_json_and_the_record_carries_it() -> None:
    server = Server(C4, {16: 0.010, 64: 0.006})
    server.invalid = {16}
    race = race_point(C4, (16, 64), 32, server, equivalence=0.02)
    assert PointRace.from_json(race.to_json()) == race
    record = LoadRecord("t.py::t", tuple(server.samples), races=(race,), mode="adaptive")
    again = LoadRecord.from_json(record.to_json())
    assert again.races == (race,) and again.mode == "adaptive"


def test_a_raced_budgets_span_is_its_runs_not_the_gaps_between_them() -> None:
    one = [load_sample(C4, 64, float(i // 4), 1.0, 0.1, (0.1,), 10, True) for i in range(8)]
    # the same two waves sent as two runs, 100 s apart (other budgets ran in between)
    two = [s if s.start < 1 else _later(s, 100.0) for s in one]
    a, b = summarize_point(one), summarize_point(two)
    assert b.duration == pytest.approx(a.duration) == 2.0
    assert b.achieved_concurrency == pytest.approx(a.achieved_concurrency) == 4.0
    assert b.requests_per_second == pytest.approx(a.requests_per_second)


def test_runs_one_after_another_add_their_wall_time() -> None:
    h = ClientHealth(0.1, 1.0, 4, 40, 0.001, 0.002, 10)
    both = chain_health([h, h])
    assert both.wall_seconds == 2.0 and both.cpu_share == h.cpu_share
    assert both.requests == 8 and both.workers == 1 and chain_health([h]) is h


def _later(s: Sample, by: float) -> Sample:
    from dataclasses import replace

    return replace(s, start=s.start + by, round=1)


def test_too_few_requests_for_a_race_stop_before_anything_is_sent() -> None:
    from pytest_ddtree.measure.load import LoadTester

    tester = LoadTester(None, judge=None, tree_budgets=(16, 64), sweep="adaptive")  # type: ignore[arg-type]
    with pytest.raises(ValueError) as err:
        tester(["Write about rivers."], concurrencies=[4], requests=6)
    assert str(err.value) == (
        "ddtree_load: requests=6 per budget at C=4 is below the race's first batch of 8 "
        "(--ddtree-sweep adaptive): no budget could be judged; give at least 8 requests, "
        "or --ddtree-sweep exhaustive"
    )
    tester.requests = 4
    with pytest.raises(ValueError, match="--ddtree-load-requests 4 per budget at C=1 is below"):
        tester(["Write about rivers."], concurrencies=[1])


def test_no_budget_is_called_faster_below_the_minimum_n() -> None:
    server = Server(C1, {16: 0.010, 64: 0.006}, cv=0.01)
    for budget in (16, 64):
        server(budget, 4)
    stats, schedule = analyse(server.samples)
    choice = schedule.choice(C1)
    # 64 leads clearly, but on 4 requests a budget no claim is made: no forced winner
    assert not choice.chosen and choice.decision.leader == 64 and choice.n == 4
    assert choice.decision.status == "undecided" and not choice.decisive
    line = "\n".join(load_lines(stats, schedule))
    assert "best at C=1: undecided (too few requests for a claim: n < 6); 64 leads" in line


def test_runs_with_a_saturated_client_count_but_do_not_race() -> None:
    server = Server(C4, {16: 0.010, 64: 0.006})
    server.saturated_runs = 2  # the client's own queueing in the first two runs
    race = race_point(C4, (16, 64), 32, server, equivalence=0.02)
    assert race.discarded == 2 and race.decided and race.recommended == 64
    assert race.requests == len(server.samples)  # every request counts against the budget
    (gone,) = race.left
    assert gone.n == 8 and server.sent(16) == 12  # its raced values: the first batch, again
    assert "(2 run(s) not raced: the client was saturated or stalled, no verdict on a budget)" in (
        race_line(race)
    )
    assert PointRace.from_json(race.to_json()) == race


def test_a_tester_sharing_its_points_with_other_processes_runs_them_in_full() -> None:
    from pytest_ddtree.measure.load import LoadTester

    shared = LoadTester(None, judge=None, tree_budgets=(16, 64), sweep="adaptive", shares=2)  # type: ignore[arg-type]
    assert not shared.racing((16, 64))
    assert shared.note((16, 64)) == "split"
    assert "cannot race together" in unraced_text(shared.note((16, 64)))
    alone = LoadTester(None, judge=None, sweep="adaptive")  # type: ignore[arg-type]
    assert alone.racing((16, 64)) and not alone.racing((16,))
    assert (
        unraced_text(alone.note((16,)))
        == "adaptive sweep: one budget, nothing to race: its points run in full"
    )
    assert LoadTester(None, judge=None).note((16, 64)) == ""  # type: ignore[arg-type]


def test_equal_budgets_under_noise_shared_by_a_run_are_rarely_called_out() -> None:
    # a run of C requests shares its conditions (5% between runs, 2% within one): the
    # race's unit is the run, so two equal budgets are seldom told apart; taking every
    # request as its own replicate called one of them out in about a quarter of races
    outs = 0
    for seed in range(60):
        server = Server(C4, {16: 0.01, 64: 0.01}, cv=0.02, seed=seed, run_cv=0.05)
        race = race_point(C4, (16, 64), 32, server, equivalence=0.02, seed=seed)
        outs += any(x.status == "out" for x in race.left)
    assert outs <= 4, outs
