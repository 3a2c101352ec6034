"""Temperature as an axis: seeds, the sampling check, per-temperature records and reports."""

from __future__ import annotations

import json
import textwrap
from dataclasses import replace
from typing import Any

import pytest

from pytest_ddtree.checks.sampling import check_sampling, request_seed
from pytest_ddtree.measure.sweep import Sample, summarize
from pytest_ddtree.measure.sweep.temperature import summarize_temperatures
from pytest_ddtree.reference import tokenizer_path
from pytest_ddtree.report import read_sweep_json
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion


def test_seed_is_the_same_at_every_budget_and_differs_by_round_and_prompt() -> None:
    # nothing of the budget goes in: the same (prompt, round) samples alike at every budget,
    # in every process (an xdist worker, the next run): a fixed value, not a per-process hash
    assert request_seed(0, "p0", 1) == 170084779
    seeds = {request_seed(0, p, r) for p in ("p0", "p1") for r in range(5)}
    assert len(seeds) == 10
    assert request_seed(1, "p0", 1) != request_seed(0, "p0", 1)
    assert all(0 <= s < 2**31 for s in seeds)


def _probe(server: Any) -> Any:
    client = DDTreeClient(server.base_url, model="ddtree-reference")

    def send(seed: int | None, t: float) -> Completion:
        extra = {} if seed is None else {"seed": seed}
        return client.request(
            "Write a few sentences about a river and the towns along it.",
            max_tokens=32,
            temperature=t,
            tree_budget=16,
            prompt_id="sampling-check",
            **extra,
        )

    return send


@pytest.mark.parametrize(
    ("faults", "temperature_honored", "seed_honored", "code"),
    [
        ((), True, True, None),
        (("temperature-ignored",), False, None, "temperature-ignored"),
        (("seed-ignored",), True, False, "seed-ignored"),
    ],
)
def test_sampling_check_names_what_the_server_ignores(
    server_factory: Any,
    faults: tuple[str, ...],
    temperature_honored: bool,
    seed_honored: bool | None,
    code: str | None,
) -> None:
    server = server_factory(simulated_latency=False, faults=faults)
    check = check_sampling(_probe(server), 0.7, 0)
    assert (check.temperature_honored, check.seed_honored) == (temperature_honored, seed_honored)
    found = check.violations()
    assert [v.code for v in found] == ([code] if code else [])
    assert ("honors temperature and seed" in check.line()) is (code is None)
    if code:
        assert check.violations(skip=(code,)) == []


def test_sampling_check_draws_no_verdict_when_a_probe_request_fails(server_factory: Any) -> None:
    server = server_factory(simulated_latency=False)
    send = _probe(server)
    server.stop()  # the client's trouble, not a finding about the server
    check = check_sampling(send, 0.7, 0)
    assert check.temperature_honored is None and check.seed_honored is None
    assert check.problem and check.violations() == []
    assert "no verdict" in check.line()


def test_old_samples_without_temperature_read_as_zero_and_round_trip() -> None:
    old = {"tree_budget": 16, "prompt_id": "p", "round": 0, "valid": True}
    assert Sample.from_json(old).temperature == 0.0
    hot = Sample(16, "p", 0, True, temperature=0.7, seed=123)
    assert Sample.from_json(json.loads(json.dumps(hot.to_json()))) == hot
    with pytest.raises(ValueError, match="field 'temperature' must be a finite number"):
        Sample.from_json({**old, "temperature": "hot"})


def _samples(temperature: float, fast: int) -> list[Sample]:
    rates = {16: 100.0, 64: 100.0}
    rates[fast] = 150.0
    return [
        Sample(b, p, r, True, decode_tokens_per_second=rates[b] + r, temperature=temperature)
        for b in (16, 64)
        for p in ("p0", "p1")
        for r in range(3)
    ]


def test_each_temperature_has_its_own_recommendation() -> None:
    samples = _samples(0.0, 64) + _samples(0.7, 16)
    per = summarize_temperatures(samples)
    assert list(per) == [0.0, 0.7]
    assert per[0.0].recommendation.tree_budget == 64
    assert per[0.7].recommendation.tree_budget == 16
    # pooled, the two would read as a tie: never pooled
    assert summarize(samples).recommendation.tied


def _args(server: Any, *extra: str) -> list[str]:
    return [
        f"--ddtree-endpoint={server.base_url}",
        f"--ddtree-tokenizer={tokenizer_path()}",
        "--ddtree-budgets=16,64",
        "--ddtree-rounds=2",
        "--ddtree-warmup-rounds=0",
        "--ddtree-max-tokens=48",
        "-p",
        "no:cacheprovider",
        *extra,
    ]


_BENCH = textwrap.dedent(
    """
    def test_timed(tree_budget, ddtree_temperature, ddtree_benchmark):
        completion = ddtree_benchmark("Write an essay about rivers.", prompt_id="essay")
        assert completion.request.temperature == ddtree_temperature
        seed = completion.request.body.get("seed")
        assert (seed is None) == (ddtree_temperature == 0)
    """
)


def test_only_zero_keeps_todays_ids_groups_and_report(
    pytester: pytest.Pytester, healthy_server: Any
) -> None:
    pytester.makepyfile(test_b=_BENCH)
    out = pytester.path / "bench.json"
    report = pytester.path / "report"
    result = pytester.runpytest(
        *_args(healthy_server, f"--benchmark-json={out}", f"--ddtree-report={report}"), "-v"
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_timed?tree_budget=16? PASSED*"])
    assert "temperature" not in result.stdout.str().split("budget sweep")[1].split("\n")[1]
    groups = {b["group"] for b in json.loads(out.read_text())["benchmarks"]}
    assert groups == {"tree_budget=16", "tree_budget=64"}
    doc = json.loads((report / "sweep.json").read_text())
    assert "temperatures" not in doc and doc["recommendation"]["leader"] in (16, 64)


def test_temperatures_parametrise_timings_with_seeds_per_temperature(
    pytester: pytest.Pytester, healthy_server: Any
) -> None:
    pytester.makepyfile(test_b=_BENCH)
    out = pytester.path / "bench.json"
    report = pytester.path / "report"
    result = pytester.runpytest(
        *_args(
            healthy_server,
            "--ddtree-temperatures=0,0.7",
            f"--benchmark-json={out}",
            f"--ddtree-report={report}",
        ),
        "-v",
    )
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        [
            "ddtree: endpoint *; timed at temperatures 0,0.7",
            "*test_timed?tree_budget=16-temperature=0? PASSED*",
            "*test_timed?tree_budget=16-temperature=0.7? PASSED*",
            "*-- temperature 0 --*",
            "*-- temperature 0.7 --*",
            "*sampling check, temperature 0.7: the server honors temperature and seed*",
        ]
    )
    benches = json.loads(out.read_text())["benchmarks"]
    assert {b["group"] for b in benches} == {
        "tree_budget=16 temperature=0",
        "tree_budget=64 temperature=0",
        "tree_budget=16 temperature=0.7",
        "tree_budget=64 temperature=0.7",
    }
    assert {b["extra_info"]["temperature"] for b in benches} == {0.0, 0.7}
    run = read_sweep_json(report / "sweep.json")
    hot = [s for s in run.samples if s.temperature == 0.7]
    assert hot and all(s.seed is not None for s in hot)
    # the same round has the same seed at both budgets, and rounds differ
    by_round = {(s.round, s.tree_budget): s.seed for s in hot}
    assert by_round[(0, 16)] == by_round[(0, 64)] != by_round[(1, 16)]
    assert all(s.seed is None for s in run.samples if s.temperature == 0)
    doc = json.loads((report / "sweep.json").read_text())
    assert "recommendation" not in doc
    assert [t["temperature"] for t in doc["temperatures"]] == [0.0, 0.7]
    assert all(t["recommendation"]["leader"] in (16, 64) for t in doc["temperatures"])
    html = (report / "sweep.html").read_text()
    assert "Sampling temperature 0.7" in html and "Sampling temperature 0<" in html


@pytest.mark.parametrize(
    ("fault", "code"),
    [("temperature-ignored", "temperature-ignored"), ("seed-ignored", "seed-ignored")],
)
def test_a_server_that_ignores_sampling_is_named_and_not_timed(
    pytester: pytest.Pytester, fault: str, code: str, server_factory: Any
) -> None:
    server = server_factory(simulated_latency=False, faults=(fault,))
    pytester.makepyfile(test_b=_BENCH)
    report = pytester.path / "report"
    result = pytester.runpytest(
        *_args(server, "--ddtree-temperatures=0,0.7", f"--ddtree-report={report}")
    )
    # temperature 0 is timed as ever; at 0.7 every budget fails with the code
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            f"*[[]{code}[]] the server ignores *",
            "*-- temperature 0.7 --*",
            f"WARNING: [[]{code}[]] the server ignores*",
            f"*INVALID ({code})*",
            "No recommendation*",
        ]
    )
    doc = json.loads((report / "sweep.json").read_text())
    hot = next(t for t in doc["temperatures"] if t["temperature"] == 0.7)
    assert hot["recommendation"]["tree_budget"] is None
    assert hot["sampling"] and hot["sampling"][0].startswith(f"[{code}]")
    assert {b["verdict"] for b in hot["budgets"]} == {f"INVALID ({code})"}
    cold = next(t for t in doc["temperatures"] if t["temperature"] == 0.0)
    assert cold["recommendation"]["leader"] in (16, 64)
    # skipped, the run is timed (and reported as weakened)
    again = pytester.runpytest(
        *_args(server, "--ddtree-temperatures=0.7", f"--ddtree-skip-check={code}")
    )
    again.assert_outcomes(passed=2)


def test_compare_never_compares_across_temperatures() -> None:
    from pytest_ddtree.measure.sweep import SweepRun
    from pytest_ddtree.report.compare import compare_runs

    baseline = SweepRun(samples=_samples(0.0, 64))
    # at 0.7 budget 64 is far slower than at 0: pooled, it would read as a regression
    slow = [replace(s, decode_tokens_per_second=10.0) for s in _samples(0.7, 16)]
    candidate = SweepRun(samples=_samples(0.0, 64) + slow)
    result = compare_runs(baseline, candidate)
    rows = {(r.temperature, r.tree_budget): r.outcome for r in result.rows}
    assert rows[(0.0, 64)] == rows[(0.0, 16)] == "no significant change"
    assert rows[(0.7, 64)] == rows[(0.7, 16)] == "only in candidate"
    assert not result.regressions
    lines = result.lines()
    assert "64 T=0.7" in "\n".join(lines)
    assert "recommended tree_budget at temperature 0: 64 -> 64" in lines
    assert "recommended tree_budget at temperature 0.7: none -> 16" in lines


def test_ddtree_sweep_at_a_temperature_seeds_rounds_and_drift_pairs(
    pytester: pytest.Pytester, healthy_server: Any
) -> None:
    pytester.makepyfile(
        test_s=textwrap.dedent(
            """
            def test_sweep(ddtree_sweep, ddtree_temperature):
                summary = ddtree_sweep(
                    {"a": "Write an essay about rivers.", "b": "Write a story about a train."},
                    rounds=2,
                    warmup_rounds=0,
                )
                assert summary.recommendation.leader is not None
            """
        )
    )
    report = pytester.path / "report"
    result = pytester.runpytest(
        *_args(healthy_server, "--ddtree-temperatures=0.7", f"--ddtree-report={report}"), "-v"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_sweep?temperature=0.7? PASSED*"])
    run = read_sweep_json(report / "sweep.json")
    assert {s.temperature for s in run.samples} == {0.7}
    timed = [s for s in run.samples if s.drift_mark is None]
    seeds = {(s.round, s.prompt_id, s.tree_budget): s.seed for s in timed}
    for r in (0, 1):
        for p in ("a", "b"):
            assert seeds[(r, p, 16)] == seeds[(r, p, 64)] is not None
    assert seeds[(0, "a", 16)] != seeds[(1, "a", 16)] != seeds[(1, "b", 16)]
    # the drift check's end block samples as its start block did, request for request
    starts = [s.seed for s in run.samples if s.drift_mark == "start"]
    ends = [s.seed for s in run.samples if s.drift_mark == "end"]
    assert starts and starts == ends


def test_budget_ignored_is_judged_per_temperature_and_says_which(
    pytester: pytest.Pytester, server_factory: Any
) -> None:
    server = server_factory(simulated_latency=False, faults=("budget-ignored",))
    pytester.makepyfile(
        test_b=textwrap.dedent(
            """
            import pytest

            PROMPTS = {
                "rivers": "Write a long essay about rivers and the valleys they shape.",
                "bees": "Write a detailed article about bees and their hives.",
            }

            @pytest.mark.parametrize("name", sorted(PROMPTS))
            def test_gen(ddtree_benchmark, tree_budget, name):
                ddtree_benchmark(PROMPTS[name], max_tokens=48, rounds=3, warmup_rounds=0,
                                 prompt_id=name, stream=False)
            """
        )
    )
    result = pytester.runpytest(
        f"--ddtree-endpoint={server.base_url}",
        f"--ddtree-tokenizer={tokenizer_path()}",
        "--ddtree-budgets=16,64,256",
        "--ddtree-temperatures=0,0.7",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=12, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*FAILED sweep: [[]budget-ignored[]] at temperature 0: *",
            "*FAILED sweep: [[]budget-ignored[]] at temperature 0.7: *",
        ]
    )


def test_under_xdist_each_temperature_is_merged_apart(
    pytester: pytest.Pytester, healthy_server: Any
) -> None:
    pytester.makepyfile(test_b=_BENCH)
    report = pytester.path / "report"
    # a subprocess: pytest-xdist's controller and pytest-benchmark keep state per process
    result = pytester.runpytest_subprocess(
        *_args(healthy_server, "--ddtree-temperatures=0,0.7", f"--ddtree-report={report}"),
        "-n",
        "2",
    )
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*-- temperature 0 --*", "*-- temperature 0.7 --*"])
    doc = json.loads((report / "sweep.json").read_text())
    assert [t["temperature"] for t in doc["temperatures"]] == [0.0, 0.7]
    for entry in doc["temperatures"]:
        assert {b["tree_budget"] for b in entry["budgets"]} == {16, 64}
        assert all(b["valid"] == b["total"] == 2 for b in entry["budgets"])


def test_a_bad_temperature_stops_the_run_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_b=_BENCH)
    pytester.makeini("[pytest]\nddtree_temperatures = 0,hot\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.stderr.lines if line] == [
        "ERROR: invalid temperatures '0,hot' (from ini key ddtree_temperatures): "
        "'hot' is not a number"
    ]
    result = pytester.runpytest("-p", "no:cacheprovider", "--ddtree-temperatures=0,2.5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: invalid temperatures '0,2.5' (from option *): 2.5 is*"])
    assert "Traceback" not in result.stderr.str()


class _Answer:
    """What the check reads of an answer: its text, and whether the request failed."""

    def __init__(self, text: str) -> None:
        self.text, self.error = text, None


def test_a_repeat_parted_once_by_numerics_is_not_called_seed_ignored() -> None:
    # a sampler that honors the seed, whose second ask of one seed parts late (a numeric
    # flip, as a cached prefix can cause): the third ask agrees, so no verdict against it
    asked: list[int | None] = []

    def send(seed: int | None, t: float) -> Any:
        asked.append(seed)
        flip = asked.count(seed) == 2
        return _Answer(f"answer {seed}" + (" parted late" if flip else ""))

    check = check_sampling(send, 0.7, 0)
    assert (check.temperature_honored, check.seed_honored) == (True, True), check.line()
    assert "asked three times gave two answers" in check.detail
    assert len(asked) == 6  # four seeds, the first again, and once more

    def deaf(seed: int | None, t: float) -> Any:
        asked.append(seed)
        return _Answer(f"answer {len(asked)}")  # a fresh sample every time

    check = check_sampling(deaf, 0.7, 0)
    assert check.seed_honored is False
    assert [v.code for v in check.violations()] == ["seed-ignored"]
    assert "asked three times gave three answers" in check.violations()[0].message


def test_a_peaked_model_at_a_low_temperature_is_not_called_deaf() -> None:
    # one answer for every seed at 0.2, several at 1: honored (the model is just sure)
    def peaked(seed: int | None, t: float) -> Any:
        return _Answer("greedy" if t < 1 or seed is None else f"sampled {seed}")

    check = check_sampling(peaked, 0.2, 0)
    assert (check.temperature_honored, check.seed_honored) == (True, True), check.line()
    assert "a peaked model, not a deaf server" in check.detail

    # one answer at 1 too, and not the greedy one: the server's own seed, not the request's
    def fixed(seed: int | None, t: float) -> Any:
        return _Answer("greedy" if t == 0 else "its own seed's answer")

    check = check_sampling(fixed, 0.2, 0)
    assert (check.temperature_honored, check.seed_honored) == (True, False)
    assert [v.code for v in check.violations()] == ["seed-ignored"]

    def greedy(seed: int | None, t: float) -> Any:
        return _Answer("greedy")

    check = check_sampling(greedy, 0.2, 0)
    assert check.temperature_honored is False
    assert check.detail == "4 distinct seeds all gave the temperature-0 answer, at 1 too"
