"""Invariant-gated timings on top of pytest-benchmark, without importing pytest.

The ``benchmark`` object is duck-typed: anything with ``pedantic``, ``group``,
``extra_info`` and ``disabled`` like pytest-benchmark's ``BenchmarkFixture``.

The rule this module enforces: a timing is kept only for a response that
passed every invariant. Each round's request is validated *inside* the timed
target, so an invalid round raises :class:`InvariantError` out of
``benchmark.pedantic``; pytest-benchmark then marks the benchmark as errored
and leaves it out of its JSON, and :func:`discard_timings` empties the rounds
already measured so the terminal table and ``--benchmark-compare-fail`` do
not see them either. Validation costs well under a millisecond, noise next
to a request that takes tens of milliseconds or more.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_ddtree.core.budget import Budget
from pytest_ddtree.core.settings import Settings
from pytest_ddtree.core.violation import InvariantError, Violation
from pytest_ddtree.measure.sweep import Sample, redact_endpoint
from pytest_ddtree.wire.completion import Completion

if TYPE_CHECKING:
    from pytest_ddtree.checks.blame import Diagnosis

#: ``/models`` fields that change from one server start to the next; kept out
#: of ``machine_info`` so ``--benchmark-compare`` warns only on real changes.
_VOLATILE_MODEL_FIELDS = frozenset({"created", "id_created", "uptime", "pid", "port"})


def group_name(tree_budget: int | None, temperature: float | None = None) -> str:
    """The pytest-benchmark group of a budget, e.g. ``"tree_budget=64"``, or with a
    temperature ``"tree_budget=64 temperature=0.7"`` (never compared across temperatures)."""
    return Budget(tree_budget).group(temperature)


@dataclass
class GatedResult:
    """What :func:`run_gated` measured: the timed completions and their samples.

    ``completion`` is the last timed round's completion (what
    ``benchmark.pedantic`` returns).
    """

    completions: list[Completion] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)

    @property
    def completion(self) -> Completion:
        """The last timed completion."""
        return self.completions[-1]


def _median(values: Iterable[float | int | None]) -> float | None:
    xs = [float(v) for v in values if v is not None]
    return statistics.median(xs) if xs else None


def summary_extra_info(completions: Sequence[Completion]) -> dict[str, Any]:
    """``extra_info`` figures: medians over the timed rounds (None when unknown)."""
    stats = [c.stats for c in completions]
    first = completions[0].request if completions else None
    return {
        "tree_budget": None if first is None else first.tree_budget,
        "prompt_id": None if first is None else first.prompt_id,
        "completion_tokens": _median(c.completion_tokens for c in completions),
        "ttft": _median(c.ttft for c in completions),
        "decode_tokens_per_second": _median(c.decode_tokens_per_second for c in completions),
        "mean_acceptance_length": _median(s.mean_acceptance_length for s in stats if s),
        "decode_rounds": _median(s.decode_rounds for s in stats if s),
        "server_tokens_per_second": _median(s.server_tokens_per_second for s in stats if s),
        "valid_rounds": len(completions),
    }


def discard_timings(benchmark: Any) -> bool:
    """Drop every round a benchmark recorded; True if there were any.

    pytest-benchmark shows and compares every benchmark with at least one
    round, and writes to JSON every benchmark not marked as errored: an empty,
    errored one is skipped everywhere (an empty one alone would break its
    statistics when the JSON is written).
    """
    meta = getattr(benchmark, "stats", None)
    data = getattr(getattr(meta, "stats", None), "data", None)
    if hasattr(benchmark, "has_error"):
        benchmark.has_error = True
    if isinstance(data, list) and data:
        data.clear()
        return True
    return False


def run_gated(
    benchmark: Any,
    call: Callable[[], Completion],
    validate: Callable[[Completion], Sequence[Violation]],
    *,
    rounds: int = Settings.rounds,
    warmup_rounds: int = Settings.warmup_rounds,
    first_round: int = 0,
    group: str | None = None,
    extra_info_base: Mapping[str, Any] | None = None,
    on_sample: Callable[[Sample], None] | None = None,
    worker: str | None = None,
    concurrent: bool = False,
    diagnose: Callable[[Completion, list[Violation]], Diagnosis] | None = None,
) -> GatedResult:
    """Time ``call`` with ``benchmark.pedantic``, validating every round inside the target.

    ``validate`` returns the violations of one completion; any violation
    raises :class:`InvariantError` from inside the timed target, naming the
    round, so the benchmark is errored and nothing of it is recorded. Warm-up
    rounds are validated too (a broken server cannot hide there). ``on_sample``
    receives a :class:`Sample` for each timed round and for each invalid
    round (warm-up included); the timed rounds' numbers start at ``first_round``
    (a later pass of the same test's prompt and budget follows the earlier ones).

    When the benchmark is disabled (``--benchmark-disable``, or pytest-xdist,
    under which pytest-benchmark turns itself off) the rounds run here
    without pytest-benchmark and are still validated and recorded as samples;
    pass ``concurrent=True`` under xdist so reports label those timings.
    ``diagnose(completion, violations)`` names the layer at fault in an invalid round: its
    ``render()`` is appended to the failure message and its verdict is the sample's
    ``blame`` (a failure blamed on the prompt does not count against the budget).
    """
    __tracebackhide__ = True
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive integer, got {rounds!r}")
    if isinstance(warmup_rounds, bool) or not isinstance(warmup_rounds, int) or warmup_rounds < 0:
        raise ValueError(f"warmup_rounds must be a non-negative integer, got {warmup_rounds!r}")
    result = GatedResult()
    calls = 0

    def target() -> Completion:
        nonlocal calls
        index = calls
        calls += 1
        warmup = index < warmup_rounds
        round_no = index - warmup_rounds
        completion = call()
        # a later pass's timed rounds follow the earlier passes' (warm-up rounds stay < 0)
        sample_round = round_no if warmup else first_round + round_no
        violations = list(validate(completion))
        found = diagnose(completion, violations) if violations and diagnose is not None else None
        if violations or not warmup:
            sample = Sample.from_completion(
                completion,
                violations,
                round=sample_round,
                worker=worker,
                concurrent=concurrent,
                blame=None if found is None else found.blame,
            )
            result.samples.append(sample)
            if on_sample is not None:
                on_sample(sample)
        if violations:
            kind = "warm-up round" if warmup else "round"
            number = index + 1 if warmup else round_no + 1
            request = completion.request
            raise InvariantError(
                violations,
                header=(
                    f"{group_name(request.tree_budget)} prompt={request.prompt_id or '-'} "
                    f"{kind} {number}: {len(violations)} output-quality invariant(s) broken; "
                    "no timing was recorded for this benchmark"
                ),
                footer="" if found is None else found.render(),
            )
        if not warmup:
            result.completions.append(completion)
        return completion

    # pytest-benchmark copies the group when the timing starts; set it first.
    if group is not None:
        benchmark.group = group
    extra: MutableMapping[str, Any] = benchmark.extra_info
    if extra_info_base:
        extra.update(extra_info_base)
    extra["concurrent"] = concurrent
    if getattr(benchmark, "disabled", False):
        for _ in range(warmup_rounds + rounds - 1):
            target()
        # A disabled pedantic() just calls the target once; going through it
        # tells pytest-benchmark the fixture was used (no "not used" warning).
        benchmark.pedantic(target, rounds=1, warmup_rounds=0, iterations=1)
    else:
        try:
            benchmark.pedantic(target, rounds=rounds, warmup_rounds=warmup_rounds, iterations=1)
        except InvariantError as exc:
            discard_timings(benchmark)
            # The failure is about the response, not about pytest-benchmark's
            # internals: report it from here, without their frames.
            raise exc.with_traceback(None) from None
    # extra_info is stored by reference: figures added after the run are saved.
    extra.update(summary_extra_info(result.completions))
    return result


def keep_passed(output_json: MutableMapping[str, Any], passed_nodeids: Iterable[str]) -> int:
    """Remove every benchmark whose test did not pass; return how many.

    pytest-benchmark keeps a benchmark whose test failed *after* the timed
    call, and a test interrupted (Ctrl-C) inside ``benchmark.pedantic`` never
    gets a failed report, yet its partial rounds are saved: only a passed test
    may leave a timing, so an interrupted run can never become a
    ``--benchmark-compare`` baseline.
    """
    passed = set(passed_nodeids)
    benches = output_json.get("benchmarks")
    if not isinstance(benches, list):
        return 0
    kept = [b for b in benches if isinstance(b, Mapping) and b.get("fullname") in passed]
    removed = len(benches) - len(kept)
    benches[:] = kept
    return removed


def strip_budgets(output_json: MutableMapping[str, Any], budgets: Iterable[int | None]) -> int:
    """Remove every benchmark of the given tree budgets; return how many.

    Used for budgets shown lossy in the session: a timing of a budget that
    changes the output is not a timing of the same computation.
    """
    drop = set(budgets)
    benches = output_json.get("benchmarks")
    if not isinstance(benches, list) or not drop:
        return 0

    def budget_of(bench: Any) -> Any:
        if not isinstance(bench, Mapping):
            return object()
        info = bench.get("extra_info")
        if isinstance(info, Mapping) and "tree_budget" in info:
            return info["tree_budget"]
        params = bench.get("params")
        return params.get("tree_budget", object()) if isinstance(params, Mapping) else object()

    kept = [b for b in benches if budget_of(b) not in drop]
    removed = len(benches) - len(kept)
    benches[:] = kept
    return removed


def _stable_model_info(models: Any) -> list[dict[str, Any]]:
    data = models.get("data") if isinstance(models, Mapping) else models
    if not isinstance(data, list):
        return []
    out: list[dict[str, Any]] = []
    for item in data:
        if isinstance(item, Mapping):
            out.append(
                {
                    str(k): v
                    for k, v in item.items()
                    if k not in _VOLATILE_MODEL_FIELDS and isinstance(v, (str, int, float, bool))
                }
            )
    return out


def machine_info_extra(
    *,
    endpoint: str | None,
    model: str | None,
    dialect: str | None,
    server_models: Any = None,
    embedded: bool = False,
    embedded_setup: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``ddtree`` entry for pytest-benchmark's ``machine_info``.

    The endpoint is stripped of credentials; the embedded reference server is
    named as such rather than by its per-run port, so that a saved run and a
    new one compare without a spurious "machine_info is different" warning.
    ``server_models`` is the ``GET /models`` answer; only its stable fields
    are kept. ``embedded_setup`` (simulated latency, injected faults) makes
    runs of differently configured embedded servers compare with a warning.
    """
    if embedded:
        where = "embedded reference server"
        if embedded_setup:
            setup = ", ".join(f"{k}={v}" for k, v in sorted(embedded_setup.items()))
            where = f"{where} ({setup})"
    elif endpoint:
        where = redact_endpoint(endpoint)
    else:
        where = None
    return {
        "endpoint": where,
        "model": model,
        "dialect": dialect,
        "server_models": _stable_model_info(server_models),
    }


def differing_keys(
    current: Mapping[str, Any], saved: Mapping[str, Any], prefix: str = ""
) -> list[str]:
    """The dotted keys whose values differ between two ``machine_info`` mappings
    (``ddtree.endpoint``), nested mappings compared key by key."""
    out: list[str] = []
    for key in sorted(set(current) | set(saved), key=str):
        a, b = current.get(key), saved.get(key)
        name = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out.extend(differing_keys(a, b, name + "."))
        elif a != b:
            out.append(name)
    return out
