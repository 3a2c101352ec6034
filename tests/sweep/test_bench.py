"""Gated timing logic against a stand-in with pytest-benchmark's call semantics."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pytest_ddtree.core.violation import InvariantError, Violation
from pytest_ddtree.measure.bench import (
    discard_timings,
    group_name,
    keep_passed,
    machine_info_extra,
    run_gated,
)
from pytest_ddtree.measure.sweep import Sample
from pytest_ddtree.wire.completion import Completion

from ._factory import make_completion


class _Data:
    def __init__(self) -> None:
        self.data: list[float] = []


class _Meta:
    def __init__(self, group: str | None) -> None:
        self.group = group
        self.stats = _Data()


class FakeBenchmark:
    """Mirrors BenchmarkFixture.pedantic: group copied at start, W + R target calls,
    an exception escaping the target marks has_error and propagates."""

    def __init__(self, disabled: bool = False) -> None:
        self.group: str | None = None
        self.extra_info: dict[str, Any] = {}
        self.disabled = disabled
        self.has_error = False
        self.stats: _Meta | None = None
        self.pedantic_calls = 0

    def pedantic(
        self, target: Callable[[], Completion], *, rounds: int, warmup_rounds: int, iterations: int
    ) -> Completion:
        assert iterations == 1
        self.pedantic_calls += 1
        if self.disabled:
            return target()
        self.stats = _Meta(self.group)
        try:
            for _ in range(warmup_rounds):
                target()
            result = None
            for i in range(rounds):
                result = target()
                self.stats.stats.data.append(0.1 + i)
            assert result is not None
            return result
        except Exception:
            self.has_error = True
            raise


def _calls(
    *budgets_ok: bool,
) -> tuple[Callable[[], Completion], Callable[[Completion], list[Violation]]]:
    seq = iter(budgets_ok)
    results: dict[int, bool] = {}

    def call() -> Completion:
        c = make_completion(tree_budget=64, prompt_id="essay", text=f"call{len(results)}")
        results[id(c)] = next(seq)
        return c

    def validate(c: Completion) -> list[Violation]:
        return [] if results[id(c)] else [Violation("early-stop", "4 tokens then stop")]

    return call, validate


def test_valid_rounds_are_timed_grouped_and_described() -> None:
    bench = FakeBenchmark()
    call, validate = _calls(True, True, True, True)
    got: list[Sample] = []
    result = run_gated(
        bench,
        call,
        validate,
        rounds=3,
        warmup_rounds=1,
        group=group_name(64),
        extra_info_base={"prompt_id": "essay"},
        on_sample=got.append,
    )
    assert bench.stats is not None and bench.stats.group == "tree_budget=64"
    assert len(result.completions) == 3 and len(got) == 3
    assert [s.round for s in got] == [0, 1, 2]
    info = bench.extra_info
    assert info["tree_budget"] == 64 and info["prompt_id"] == "essay"
    assert info["decode_tokens_per_second"] == pytest.approx(800.0)
    assert info["mean_acceptance_length"] == 4.0 and info["valid_rounds"] == 3
    assert info["concurrent"] is False
    assert {"ttft", "completion_tokens", "decode_rounds", "server_tokens_per_second"} <= set(info)


def test_invalid_round_raises_inside_the_timed_target_and_drops_timings() -> None:
    bench = FakeBenchmark()
    call, validate = _calls(True, True, False, True)
    got: list[Sample] = []
    with pytest.raises(InvariantError) as info:
        run_gated(bench, call, validate, rounds=3, warmup_rounds=1, on_sample=got.append)
    assert bench.has_error
    # The one round timed before the failure is emptied too.
    assert bench.stats is not None and bench.stats.stats.data == []
    assert "round 2: 1 output-quality invariant(s) broken" in str(info.value)
    assert "[early-stop] 4 tokens then stop" in str(info.value)
    assert [(s.round, s.valid) for s in got] == [(0, True), (1, False)]


def test_diagnosis_is_appended_to_the_failure_and_names_the_samples_blame() -> None:
    from pytest_ddtree.checks.blame import Diagnosis

    call, validate = _calls(False)
    seen: list[list[Violation]] = []
    got: list[Sample] = []

    def diagnose(c: Completion, vs: list[Violation]) -> Diagnosis:
        seen.append(vs)
        return Diagnosis("template", "the baseline fails the same way", "fix the prompt")

    with pytest.raises(InvariantError) as info:
        run_gated(
            FakeBenchmark(),
            call,
            validate,
            rounds=1,
            warmup_rounds=0,
            diagnose=diagnose,
            on_sample=got.append,
        )
    assert str(info.value).endswith(
        "diagnosis: prompt / chat template / model - the baseline fails the same way\n"
        "    what to do: fix the prompt"
    )
    assert [v.code for v in seen[0]] == ["early-stop"]
    # the sample the race and the statistics see already carries the layer blamed
    assert [(s.valid, s.blame, s.against_budget) for s in got] == [(False, "template", False)]


def test_invalid_warmup_fails_too() -> None:
    bench = FakeBenchmark()
    call, validate = _calls(False, True, True, True)
    with pytest.raises(InvariantError, match="warm-up round 1"):
        run_gated(bench, call, validate, rounds=3, warmup_rounds=1)


def test_disabled_benchmark_still_runs_and_validates_every_round() -> None:
    bench = FakeBenchmark(disabled=True)
    call, validate = _calls(True, True, True)
    got: list[Sample] = []
    result = run_gated(
        bench,
        call,
        validate,
        rounds=2,
        warmup_rounds=1,
        on_sample=got.append,
        worker="gw0",
        concurrent=True,
    )
    # Rounds run untimed; pedantic() still runs the last one so the fixture counts as used.
    assert bench.pedantic_calls == 1
    assert len(result.completions) == 2 and len(got) == 2
    assert all(s.concurrent and s.worker == "gw0" for s in got)
    assert bench.extra_info["concurrent"] is True

    bench = FakeBenchmark(disabled=True)
    call, validate = _calls(True, False, True)
    with pytest.raises(InvariantError):
        run_gated(bench, call, validate, rounds=2, warmup_rounds=1)


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"rounds": 0}, "rounds must be a positive integer, got 0"),
        ({"warmup_rounds": -1}, "warmup_rounds must be a non-negative integer, got -1"),
    ],
)
def test_bad_round_counts(kw: dict[str, int], msg: str) -> None:
    call, validate = _calls(True)
    with pytest.raises(ValueError, match=msg):
        run_gated(FakeBenchmark(), call, validate, **kw)


def test_keep_passed_removes_the_failed_tests() -> None:
    doc: dict[str, Any] = {
        "benchmarks": [
            {"fullname": "t.py::a[tree_budget=16]"},
            {"fullname": "t.py::a[tree_budget=64]"},
        ]
    }
    assert keep_passed(doc, ["t.py::a[tree_budget=16]", "t.py::other"]) == 1
    assert doc["benchmarks"] == [{"fullname": "t.py::a[tree_budget=16]"}]
    assert keep_passed(doc, ["t.py::a[tree_budget=16]"]) == 0


def test_discard_timings_marks_errored_and_empties() -> None:
    assert discard_timings(object()) is False
    bench = FakeBenchmark()
    call, validate = _calls(True, True)
    run_gated(bench, call, validate, rounds=2, warmup_rounds=0)
    assert bench.stats is not None and len(bench.stats.stats.data) == 2 and not bench.has_error
    assert discard_timings(bench) is True
    assert bench.stats.stats.data == [] and bench.has_error


def test_machine_info_has_no_secrets_or_volatile_fields() -> None:
    models = {"data": [{"id": "tiny", "owned_by": "ref", "created": 1234567, "meta": {"x": 1}}]}
    info = machine_info_extra(
        endpoint="https://u:secret@h:9/v1?api_key=k",
        model="tiny",
        dialect="ddtree",
        server_models=models,
    )
    assert info == {
        "endpoint": "https://***@h:9/v1?api_key=***",
        "model": "tiny",
        "dialect": "ddtree",
        "server_models": [{"id": "tiny", "owned_by": "ref"}],
    }
    emb = machine_info_extra(
        endpoint="http://127.0.0.1:40123/v1", model="m", dialect="ddtree", embedded=True
    )
    assert emb["endpoint"] == "embedded reference server"
