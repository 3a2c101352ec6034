"""The description and end-of-session analysis of a sweep, without pytest.

:func:`describe` builds the run's metadata; :func:`conclude` turns the
session's samples and lossy budgets into the samples that count, the
budget-ignored verdict and the summary; :func:`conclude_load` merges the
load records of every process per test; :func:`sweep_run` and :func:`write`
make and write the report."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from pytest_ddtree.core.settings import Settings, budget_label
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.measure.sweep import (
    DiagnosisRecord,
    RunMetadata,
    Sample,
    SweepRun,
    SweepSummary,
    redact_endpoint,
    summarize,
)
from pytest_ddtree.measure.sweep.race import RaceRecord, RaceRule
from pytest_ddtree.pytest_plugin.runtime import Runtime

if TYPE_CHECKING:
    from pytest_ddtree.measure.breakeven import BreakEvenMap
    from pytest_ddtree.measure.load import LoadRecord, LoadTestResult
    from pytest_ddtree.measure.load.hosts import Hosts

INTERRUPTED_NOTE = (
    "interrupted: this is a partial run; tests that did not finish are left out "
    "and the recommendation is not final"
)


def mark_interrupted(metadata: RunMetadata | None) -> RunMetadata:
    """The run's metadata, marked partial (created if nothing was described yet)."""
    meta = metadata or RunMetadata()
    meta.interrupted = True
    meta.notes.append(INTERRUPTED_NOTE)
    return meta


def untimed_reason(
    *,
    start_error: str | None,
    interrupted: bool,
    runtime: Runtime | None,
    smoke_failure: str | None,
) -> str:
    """Why a run timed nothing, for the report it still writes (the first cause that holds)."""
    if start_error is not None:
        return f"the run stopped before any test: {start_error}"
    if runtime is not None and runtime.client.guard.dead:
        return f"the run stopped early, the endpoint is down: {runtime.client.guard.reason}"
    if runtime is not None and runtime.client.guard.stopped:
        return f"the run stopped early: {runtime.client.guard.reason}"
    if interrupted:
        return "the run was interrupted before any request was timed"
    if smoke_failure is not None:
        return f"the benchmarks were skipped: {smoke_failure}"
    if runtime is None:
        return "no test talked to the endpoint"
    return (
        "no test reached its timed requests (no ddtree_benchmark, ddtree_sweep or ddtree_load "
        "test ran, or each was skipped or failed before timing)"
    )


def untimed_run(
    run: SweepRun, settings: Settings, why: str
) -> tuple[SweepRun, dict[float, SweepSummary]]:
    """A run that timed nothing, as its report says it: the reason first among the notes and
    in the recommendation, the endpoint from the settings when no test described it."""
    from pytest_ddtree.measure.sweep.temperature import only_summary

    meta = replace(run.metadata, notes=[f"Nothing was timed: {why}.", *run.metadata.notes])
    if meta.endpoint is None:
        endpoint = settings.endpoint
        meta.endpoint = redact_endpoint(endpoint) if endpoint else "embedded reference server"
    empty = only_summary({}, seed=run.seed)
    summaries = {
        0.0: replace(empty, recommendation=replace(empty.recommendation, nothing_timed=why))
    }
    return replace(run, metadata=meta), summaries


def describe(runtime: Runtime, *, workers: int | None) -> RunMetadata:
    """What describes the run, from the runtime (never a secret)."""
    s = runtime.settings
    endpoint = redact_endpoint(runtime.endpoint)
    meta = RunMetadata(
        endpoint=f"embedded reference server ({endpoint})" if runtime.embedded else endpoint,
        model=runtime.model,
        dialect=runtime.dialect,
        embedded_setup=(
            f"reference_latency={s.reference_latency}, "
            f"reference_slowdown={s.reference_slowdown:g}, "
            f"faults={','.join(s.reference_faults) or 'none'}{_slowdown_note(s)}"
            if runtime.embedded
            else None
        ),
        api=s.api,
        budgets=[b if b is not None else budget_label(b) for b in s.requested_budgets],
        budget_mode=s.budget_mode,
        max_tokens=s.max_tokens,
        configured_rounds=s.rounds,
        configured_warmup_rounds=s.warmup_rounds,
        order=s.sweep_order,
        sweep=s.sweep,
        tokenizer=runtime.tokenizer_source,
        workers=workers,
    )
    # Descriptive only: a failed probe must not fail a benchmark.
    with contextlib.suppress(Exception):
        meta.server_models = list(runtime.client.list_models())
    if s.skip_checks:
        meta.notes.append(f"Weakened run: checks skipped: {', '.join(s.skip_checks)}.")
    return meta


def _slowdown_note(settings: Settings) -> str:
    """``--ddtree-reference-slowdown-after`` in the embedded setup, when given."""
    if settings.reference_slowdown_after is None:
        return ""
    after, factor = settings.reference_slowdown_after
    return f", slowdown x{factor:g} after {after} requests"


@dataclass(frozen=True)
class Conclusion:
    """What the session measured, once analysed."""

    samples: list[Sample]
    budget_ignored: list[Violation]
    #: one summary per temperature, lowest first (empty when nothing counted)
    summaries: Mapping[float, SweepSummary] = field(default_factory=dict)


def _with_lossy(samples: list[Sample], lossy: Mapping[int | None, str]) -> list[Sample]:
    """Mark every sample of a lossy budget invalid; report a lossy budget never timed."""
    if not lossy:
        return samples
    timed = {s.tree_budget for s in samples}
    untimed = [
        Sample(
            tree_budget=budget,
            prompt_id="(losslessness)",
            round=0,
            valid=False,
            codes=("not-lossless",),
            messages=(f"not timed: the output changed at this budget ({where})",),
        )
        for budget, where in lossy.items()
        if budget not in timed
    ]
    return [
        replace(s, valid=False, codes=(*s.codes, "not-lossless"))
        if s.tree_budget in lossy and "not-lossless" not in s.codes
        else s
        for s in [*samples, *untimed]
    ]


def conclude(
    samples: list[Sample],
    lossy: Mapping[int | None, str],
    *,
    seed: int,
    skip_checks: Sequence[str],
    interrupted: bool,
    rule: RaceRule | None = None,
    races: Mapping[float, Sequence[RaceRecord[int | None]]] | None = None,
) -> Conclusion:
    """Samples that count, the budget-ignored verdict and the (maybe partial) summary."""
    from pytest_ddtree.measure.sweep.ignored import budget_ignored, ignoring_budget
    from pytest_ddtree.measure.sweep.temperature import by_temperature

    samples = _with_lossy(samples, lossy)
    if not samples:
        return Conclusion(samples, [])
    groups = by_temperature(samples)
    # a budget that makes no difference shows at each temperature alone: never pooled
    found = {t: budget_ignored(group, skip_checks) for t, group in groups.items()}
    ignored = [
        v if list(groups) == [0.0] else replace(v, message=f"at temperature {t:g}: {v.message}")
        for t, violations in found.items()
        for v in violations
    ]
    summaries = {
        t: _summary(group, seed=seed, rule=rule, races=(races or {}).get(t, ()))
        for t, group in groups.items()
    }
    summaries = {t: ignoring_budget(s) if found.get(t) else s for t, s in summaries.items()}
    if interrupted:
        summaries = {t: _partial(s) for t, s in summaries.items()}
    return Conclusion(samples, ignored, summaries)


def _summary(
    samples: Sequence[Sample],
    *,
    seed: int,
    rule: RaceRule | None,
    races: Sequence[RaceRecord[int | None]],
) -> SweepSummary:
    """One temperature's summary: a race's own verdict when one race made its samples.

    Several races (two raced tests at one temperature) each judged their own samples;
    the table pools them all, so the pooled samples are judged by the exhaustive rule.
    """
    if len(races) == 1:
        return summarize(samples, seed=seed, rule=rule, race=races[0])
    summary = summarize(samples, seed=seed, rule=rule)
    if not races:
        return summary
    return replace(summary, recommendation=replace(summary.recommendation, pooled_races=len(races)))


def _partial(summary: SweepSummary) -> SweepSummary:
    return replace(summary, recommendation=summary.recommendation.flagged(partial=True))


def conclude_load(
    records: Sequence[LoadRecord],
    *,
    seed: int,
    equivalence: float,
    hosts: Hosts | None = None,
) -> list[LoadTestResult]:
    """Per load test, the statistics and schedule of the raw samples of every process
    (``hosts``: the load hosts of a run over xdist gateways, see ``measure.load.hosts``)."""
    if not records:
        return []  # the load package is loaded only when a load test ran
    from pytest_ddtree.measure.load.record import merge_records

    return merge_records(records, seed=seed, hosts=hosts, equivalence=equivalence)


def sweep_run(
    samples: Sequence[Sample],
    metadata: RunMetadata | None,
    seed: int,
    conclusion: Conclusion,
    diagnoses: Sequence[DiagnosisRecord],
    tests: Mapping[str, int] | None = None,
) -> SweepRun:
    """The run as reported: metadata with the seed, the test counts and the sweep-level
    notes."""
    meta = replace(metadata) if metadata is not None else RunMetadata()
    meta.seed = seed
    if tests is not None:
        meta.tests = dict(tests)
    meta.notes = [
        *meta.notes,
        *(f"{v.code}: {v.message}" for v in conclusion.budget_ignored),
    ]
    return SweepRun(samples=list(samples), metadata=meta, seed=seed, diagnoses=list(diagnoses))


def write(
    run: SweepRun,
    directory: str,
    summaries: Mapping[float, SweepSummary],
    load_results: Sequence[LoadTestResult] = (),
    breakeven: Sequence[tuple[str, BreakEvenMap]] = (),
) -> str:
    """Write ``sweep.json`` and ``sweep.html`` (with any load results); the line saying where."""
    # the report writers load jsonschema: only when a report is written
    from pytest_ddtree.report import write_report

    try:
        paths = write_report(run, directory, summaries, load=load_results, breakeven=breakeven)
    except (OSError, ValueError) as exc:
        return f"ddtree: could not write the report to {directory}: {exc}"
    except Exception as exc:  # a renderer's bug must not take the run's output
        # (the failures, the summary, pytest-benchmark's JSON) down with it
        return (
            f"ddtree: could not write the report to {directory} (a bug in pytest-ddtree, "
            f"please report it): {type(exc).__name__}: {exc}"
        )
    what = (
        " (with the load results)"
        if load_results
        else " (with the break-even map)"
        if breakeven
        else ""
        if run.samples
        else " (nothing was timed: it says why)"
    )
    return f"ddtree: sweep report written{what}: {paths.json}, {paths.html}"
