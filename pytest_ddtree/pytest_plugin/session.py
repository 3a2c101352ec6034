"""The pytest session of pytest-ddtree: stash keys, the runtime, and one object for the run.

:class:`DDTreeSession` is created at configure time and stored in the config's
stash. It owns everything the run records (sweep samples, load records, test
outcomes, diagnoses, lossy budgets, run metadata) and its :meth:`~DDTreeSession.finish`
does the end-of-session analysis. The hooks in ``plugin`` delegate to it; the
optional integrations (pytest-benchmark, pytest-xdist) in ``integrations``
read it and forward to it. Under pytest-xdist a worker's session hands its
records over as one :class:`WorkerPayload` (plain JSON) and the controller's
session merges it: both sides live here. Nothing here imports ``plugin`` or
``integrations``.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.core.options import OPTIONS, apply_marker, check_reference_faults, resolve
from pytest_ddtree.core.settings import Settings, SettingsError
from pytest_ddtree.pytest_plugin.runtime import Runtime, start_runtime
from pytest_ddtree.wire.client import EndpointError

if TYPE_CHECKING:
    from pytest_ddtree.core.violation import Violation
    from pytest_ddtree.measure.breakeven import BreakEvenMap
    from pytest_ddtree.measure.load import LoadRecord, LoadTestResult
    from pytest_ddtree.measure.load.hosts import Hosts
    from pytest_ddtree.measure.machine import ProbeResult
    from pytest_ddtree.measure.sweep import DiagnosisRecord, RunMetadata, Sample, SweepSummary
    from pytest_ddtree.measure.sweep.benchrace import BenchRace
    from pytest_ddtree.measure.sweep.race import RaceRecord

SETTINGS_KEY = pytest.StashKey[Settings]()
RUNTIME_KEY = pytest.StashKey[Runtime]()
MARKED_KEY = pytest.StashKey[Settings]()
#: ``workerinput`` key of the controller's ``--dist`` mode (load tests split under ``each``)
DIST_KEY = "ddtree_dist"
#: ``workerinput`` key of the name of the worker's host, as the controller calls it
HOST_KEY = "ddtree_host"
#: ``workeroutput`` key of the payload a pytest-xdist worker hands to the controller.
WORKER_OUTPUT_KEY = "ddtree_sweep"

#: Fixtures whose use means a test talks to the endpoint (so the runtime starts).
ENDPOINT_FIXTURES = frozenset(
    {
        "ddtree_runtime",
        "ddtree_endpoint",
        "ddtree_model",
        "ddtree_client",
        "ddtree_baseline_client",
        "ddtree_counter",
        "ddtree_check",
        "ddtree_benchmark",
        "ddtree_lossless",
        "ddtree_determinism",
        "ddtree_distribution",
        "ddtree_cold_warm_batched",
        "ddtree_load",
    }
)


def settings_of(config: pytest.Config) -> Settings:
    """The run's resolved settings, for a ``conftest.py`` that parametrises at collection
    time (fixtures are not available there; tests use the ``ddtree_settings`` fixture)."""
    return config.stash[SETTINGS_KEY]


def configured_settings(
    config: pytest.Config, suite: Mapping[str, str] | None = None, *, suite_is_ini: bool = False
) -> Settings:
    """Resolve and validate every option (``SettingsError`` names the bad value).

    ``suite``: the bundled suite's ini keys, when the run is that suite (see ``bundle``);
    ``suite_is_ini``: the run's ini file is the suite's own, whose keys are then the suite's
    layer only (under the environment), not an ini file's.
    """
    cli = {opt.dest: config.getoption(opt.dest) for opt in OPTIONS}
    ini = {} if suite_is_ini else {opt.ini: config.getini(opt.ini) for opt in OPTIONS}
    settings = resolve(cli, ini, os.environ, suite)
    check_codes(settings.skip_checks, settings.source_of("skip_checks"))
    if settings.reference_faults:
        # the catalogue lives with the reference server: loaded only when faults are asked for
        from pytest_ddtree.reference.faults import FAULTS

        check_reference_faults(settings, list(FAULTS))
    return settings


def check_codes(codes: tuple[str, ...], source: str) -> None:
    """Every ``--ddtree-skip-check`` code must be a known violation code."""
    if not codes:
        return
    from pytest_ddtree.checks.invariants import CODES

    for code in codes:
        if code not in CODES:
            raise SettingsError(
                f"invalid skip-check {code!r} (from {source}): known codes are "
                f"{', '.join(sorted(CODES))}"
            )


def ensure_runtime(config: pytest.Config) -> Runtime:
    """The session's runtime, started on first use (``EndpointError`` when it cannot start)."""
    runtime = config.stash.get(RUNTIME_KEY, None)
    if runtime is None:
        from pytest_ddtree.pytest_plugin import features

        runtime = start_runtime(config.stash[SETTINGS_KEY])
        features.watch(runtime)  # a feature the deployment refuses skips its tests
        config.stash[RUNTIME_KEY] = runtime
    return runtime


def needs_runtime(items: list[pytest.Item]) -> bool:
    """True when a collected test uses a fixture that talks to the endpoint."""
    return any(ENDPOINT_FIXTURES.intersection(getattr(i, "fixturenames", ())) for i in items)


@dataclass
class Outcomes:
    """Which tests passed, failed and used ``ddtree_benchmark`` (node ids)."""

    passed: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    gated: set[str] = field(default_factory=set)

    @property
    def kept(self) -> set[str]:
        """Tests whose timings count: passed and never failed (setup or teardown)."""
        return self.passed - self.failed


class DDTreeSession:
    """The run's records and the end-of-session analysis (one per pytest process)."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.samples: list[Sample] = []
        # samples of the test phase running now; kept only once the phase ends,
        # so a test interrupted by Ctrl-C leaves nothing half-measured behind
        self.pending: list[Sample] = []
        self.outcomes = Outcomes()
        self.diagnoses: list[DiagnosisRecord] = []
        # budgets whose temperature-0 output differed from the reference, and where:
        # their timings measure a different computation and are never recommended
        self.lossy: dict[int | None, str] = {}
        self.metadata: RunMetadata | None = None
        self.smoked: dict[str, list[Violation]] = {}
        self.smoke_failure: str | None = None
        #: why the runtime did not start (the run then stops before any test)
        self.start_error: str | None = None
        self.interrupted = False
        #: one summary per temperature, lowest first (empty when no sample counted; the
        #: run at temperature 0 alone has ``summaries[0.0]``)
        self.summaries: dict[float, SweepSummary] = {}
        #: what the sampling check found at each temperature above 0
        #: (``pytest_ddtree.checks.sampling``)
        self.sampling: dict[float, Any] = {}
        # the adaptive sweeps' races (who left when, and why), for the end-of-session report
        # (the races of each temperature)
        self.races: dict[float, list[RaceRecord[int | None]]] = {}
        # the races of the parametrised benchmark tests, one per test function and temperature
        self.bench_races: dict[tuple[str, float], BenchRace] = {}
        self.budget_ignored: list[Violation] = []
        self.report_lines: list[str] = []
        # one record of raw samples per ddtree_load call (and process); merged in finish()
        self.load_records: list[LoadRecord] = []
        self.load_results: list[LoadTestResult] = []
        #: each ddtree_breakeven call's map, by test (``measure.breakeven``)
        self.breakeven: list[tuple[str, BreakEvenMap]] = []
        #: the controller's load hosts of a run over xdist gateways (``pytest_plugin.remote``)
        self.hosts: Hosts | None = None
        # the machine's and the server's state (--ddtree-probe, /version): descriptive only
        self.probes: list[ProbeResult] = []
        self.server_info: dict[str, Any] | None = None

    # ------------------------------------------------------------ environment

    @property
    def runtime(self) -> Runtime | None:
        """The runtime, when it has started."""
        return self.config.stash.get(RUNTIME_KEY, None)

    @property
    def is_worker(self) -> bool:
        """True in a pytest-xdist worker process."""
        return hasattr(self.config, "workerinput")

    @property
    def xdist(self) -> bool:
        """True when the run is spread over pytest-xdist workers (either side)."""
        option = self.config.option
        spread = bool(getattr(option, "tx", None)) and getattr(option, "dist", "no") != "no"
        return bool(getattr(option, "numprocesses", None)) or spread or self.is_worker

    @property
    def worker_id(self) -> str | None:
        """This worker's id (``gw0``...), None outside a worker."""
        winput = getattr(self.config, "workerinput", None)
        return str(winput.get("workerid")) if isinstance(winput, Mapping) else None

    @property
    def worker_count(self) -> int:
        """How many workers share the endpoint (1 outside xdist)."""
        winput = getattr(self.config, "workerinput", None)
        return int(winput.get("workercount", 1)) if isinstance(winput, Mapping) else 1

    def ensure_runtime(self) -> Runtime:
        """Start the runtime now; an endpoint problem stops the run as a usage error."""
        try:
            return ensure_runtime(self.config)
        except EndpointError as exc:
            self.start_error = str(exc)
            raise pytest.UsageError(f"ddtree: {exc}") from None

    def start(self) -> Runtime | None:
        """Start the runtime before the first test. An endpoint problem stops the run as a
        usage error, but on an xdist worker it is this host's alone (the other hosts may
        reach the endpoint, and a worker that ends its session early breaks the controller):
        it is kept, each test that needs the endpoint is skipped with it (``unreachable``),
        and the controller names the host."""
        if not self.is_worker:
            return self.ensure_runtime()
        try:
            return ensure_runtime(self.config)
        except EndpointError as exc:
            self.start_error = str(exc)
            return None

    def unreachable(self) -> str | None:
        """Why this worker runs no test that needs the endpoint: its host could not reach
        it (None: it did, or the runtime has not started yet)."""
        if self.start_error is None or not self.is_worker:
            return None
        winput = getattr(self.config, "workerinput", {})
        host = winput.get(HOST_KEY, "this host")
        return (
            f"ddtree: not run, host {host} ({self.worker_id}) cannot reach the endpoint: "
            f"{self.start_error}"
        )

    def settings_for(self, node: pytest.Item) -> Settings:
        """The settings with the node's ``@pytest.mark.ddtree`` applied (validated once)."""
        marked = node.stash.get(MARKED_KEY, None)
        if marked is not None:
            return marked
        marker = node.get_closest_marker("ddtree")
        if marker is None:
            return self.settings
        if marker.args:
            raise pytest.UsageError(
                f"ddtree: @pytest.mark.ddtree takes keyword arguments only ({node.nodeid})"
            )
        # name the test function, not one of its parametrised instances
        where = node.nodeid.split("[", 1)[0]
        try:
            marked = apply_marker(self.settings, marker.kwargs, where)
            if "skip_checks" in marker.kwargs:
                check_codes(marked.skip_checks, f"@pytest.mark.ddtree on {where}")
        except SettingsError as exc:
            raise pytest.UsageError(str(exc)) from None
        node.stash[MARKED_KEY] = marked
        return marked

    # ------------------------------------------------------------ recording

    def record(self, sample: Sample) -> None:
        """Keep a sample of the running test phase (committed when the phase ends)."""
        self.pending.append(sample)

    def record_diagnosis(self, record: DiagnosisRecord) -> None:
        """Keep which layer was found at fault for a failing test."""
        self.diagnoses.append(record)

    def record_load(self, record: LoadRecord) -> None:
        """Keep the raw samples of one ``ddtree_load`` call (an interrupted one too)."""
        self.load_records.append(record)

    def mark_lossy(self, budget: int | None, nodeid: str) -> None:
        """A budget changed the temperature-0 output in ``nodeid``: never time or recommend it."""
        self.lossy.setdefault(budget, nodeid)

    def note_runtime(self, runtime: Runtime) -> None:
        """Describe the run once, from the first test that measures."""
        if self.metadata is not None:
            return
        from pytest_ddtree.pytest_plugin.analysis import describe

        self.metadata = describe(runtime, workers=self.worker_count if self.xdist else None)
        self.metadata.server_info = self.describe_server(runtime) or None

    def probe_machine(self, when: str) -> None:
        """Run ``--ddtree-probe`` now (controller only); a failure is a one-line warning."""
        if self.settings.probe is None or self.is_worker:
            return
        from pytest_ddtree.measure.machine import run_probe

        result = run_probe(self.settings.probe, when, secrets=[self.settings.api_key])
        self.probes.append(result)
        warning = result.warning()
        if warning:
            self.report_lines.append(warning)

    def describe_server(self, runtime: Runtime) -> dict[str, Any]:
        """The server's ``/version`` or ``/get_server_info``, read once (API key masked)."""
        if self.server_info is None:
            from pytest_ddtree.measure.machine import server_info

            info = server_info(
                runtime.client.http, runtime.client.root_url, secrets=[self.settings.api_key]
            )
            self.server_info = info.to_json()
            self.report_lines.extend(f"ddtree: WARNING: {p}" for p in info.problems)
        return self.server_info

    def machine_state(self) -> dict[str, Any]:
        """The probe runs and the server's description, as JSON ({} when there is neither)."""
        state: dict[str, Any] = {}
        if self.probes:
            state["probe"] = [p.to_json() for p in self.probes]
        if self.server_info:
            state["server_info"] = self.server_info
        return state

    def end_phase(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """Commit the phase's samples; a failed test leaves no timing behind."""
        if report.failed:
            # timings of a test that failed (even after its benchmark) do not count; its
            # invalid requests stay, drawn apart in the report with their codes
            self.pending = [p for p in self.pending if not p.valid]
            self.outcomes.failed.add(item.nodeid)
        self.samples.extend(self.pending)
        self.pending.clear()
        if report.when == "call" and report.passed:
            self.outcomes.passed.add(item.nodeid)

    # ------------------------------------------------------------ the end

    def finish(self, session: pytest.Session) -> None:
        """Hand the records to the controller (xdist worker), or check and report the sweep."""
        from pytest_ddtree.measure.sweep.race import RaceRule
        from pytest_ddtree.pytest_plugin import _guard, analysis

        self.pending.clear()
        # a signal counts even when a second one muddled pytest's exit status
        if session.exitstatus == pytest.ExitCode.INTERRUPTED or _guard.interrupted():
            self.interrupted = True
            self.metadata = analysis.mark_interrupted(self.metadata)
        runtime = self.runtime
        if runtime is not None and self.metadata is not None:
            self.metadata.dialect = runtime.dialect
            # retries, 429s and counter failures: never hidden
            _guard.transport_metadata(self.metadata, runtime)
            if runtime.server_metrics is not None:
                from pytest_ddtree.report.terminal import shared_caveat_notes

                log = runtime.server_metrics
                self.metadata.extra["server_counters"] = log.to_json()
                # the warnings and the caveat on the recommendation go with sweep.json
                self.metadata.notes.extend(shared_caveat_notes(log.shared_budgets()))
                if log.reader.warning:
                    self.metadata.notes.append(log.reader.warning)
        if self.is_worker:
            output: dict[str, Any] = self.config.workeroutput  # type: ignore[attr-defined]
            output[WORKER_OUTPUT_KEY] = WorkerPayload.of(self).to_json()
            return
        if self.probes:  # the probe ran before the session (not under --collect-only)
            self.probe_machine("after")
        if self.metadata is not None and self.probes:
            self.metadata.probes = [p.to_json() for p in self.probes]
        for (_, temperature), bench in self.bench_races.items():
            bench.race.finish()
            self.races.setdefault(temperature, []).append(bench.race.record())
        if self.metadata is not None:  # the terminal and the report say what was raced from it
            self.metadata.races = sum(len(records) for records in self.races.values())
        if self.hosts is not None and self.hosts.none_reached and self.start_error is None:
            self.start_error = self.hosts.unreachable()[0][1]  # the report says why, below
        seed, report = self.settings.sweep_seed, self.settings.report
        outcome = analysis.conclude(
            self.samples,
            self.lossy,
            seed=seed,
            rule=RaceRule(equivalence=self.settings.equivalence),
            races=self.races,
            skip_checks=self.settings.skip_checks,
            interrupted=self.interrupted,
        )
        self.samples, self.summaries = outcome.samples, dict(outcome.summaries)
        self.budget_ignored = outcome.budget_ignored
        # the load tests: merged from the raw samples of every process, analysed once
        self.load_results = analysis.conclude_load(
            self.load_records, seed=seed, equivalence=self.settings.equivalence, hosts=self.hosts
        )
        if self.budget_ignored:
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            self._report_sweep_failure(self.budget_ignored)
        self._report_unreachable_hosts(session)
        if report and not self.config.option.collectonly:
            tests = {"passed": len(self.outcomes.kept), "failed": len(self.outcomes.failed)}
            run = analysis.sweep_run(
                self.samples, self.metadata, seed, outcome, self.diagnoses, tests
            )
            summaries: Mapping[float, SweepSummary] = self.summaries
            if not (self.summaries or self.load_results or self.breakeven):  # says why, still
                why = analysis.untimed_reason(
                    start_error=self.start_error,
                    interrupted=self.interrupted,
                    runtime=runtime,
                    smoke_failure=self.smoke_failure,
                )
                run, summaries = analysis.untimed_run(run, self.settings, why)
            self.report_lines.append(
                analysis.write(run, report, summaries, self.load_results, self.breakeven)
            )

    def merge_worker(self, doc: Mapping[str, Any]) -> None:
        """Controller side: add the records of one worker (its ``WorkerPayload`` JSON)."""
        WorkerPayload.from_json(doc).merge_into(self)

    def _report_sweep_failure(self, violations: list[Violation]) -> None:
        """Log a failed pseudo-test ``ddtree::sweep``."""
        from pytest_ddtree.core.violation import InvariantError

        self._report_failure("sweep", InvariantError(violations).render())

    def _report_unreachable_hosts(self, session: pytest.Session) -> None:
        """A host whose workers could not reach the endpoint ran none of their tests (each
        skipped with the reason): it fails as a pseudo-test ``ddtree::hosts[NAME]`` in one
        line; the run is a usage error, as without workers, when no host reached it."""
        hosts = self.hosts
        if hosts is None:
            return
        for host, line in hosts.unreachable():
            self._report_failure(f"hosts[{host}]", line)
            if hosts.none_reached:
                session.exitstatus = pytest.ExitCode.USAGE_ERROR
            elif session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _report_failure(self, name: str, longrepr: str) -> None:
        """Log a failed pseudo-test ``ddtree::NAME``, so the failure reaches the final
        counts and JUnit XML (CI dashboards read those, not the exit code alone)."""
        report = pytest.TestReport(
            nodeid=f"ddtree::{name}",
            location=("ddtree", None, name),
            keywords={},
            outcome="failed",
            longrepr=longrepr,
            when="call",
            duration=0.0,
        )
        self.config.hook.pytest_runtest_logreport(report=report)


SESSION_KEY = pytest.StashKey[DDTreeSession]()


@dataclass
class WorkerPayload:
    """What one xdist worker recorded, as the controller receives it."""

    samples: list[Sample] = field(default_factory=list)
    metadata: RunMetadata | None = None
    failed: list[str] = field(default_factory=list)
    lossy: dict[int | None, str] = field(default_factory=dict)
    diagnoses: list[DiagnosisRecord] = field(default_factory=list)
    #: raw samples of each ddtree_load call: the controller computes the percentiles once
    load_records: list[LoadRecord] = field(default_factory=list)
    #: why the worker's runtime did not start (its host could not reach the endpoint)
    start_error: str | None = None

    @classmethod
    def of(cls, session: DDTreeSession) -> WorkerPayload:
        """The payload of this worker's session."""
        return cls(
            samples=list(session.samples),
            metadata=session.metadata,
            failed=sorted(session.outcomes.failed),
            lossy=dict(session.lossy),
            diagnoses=list(session.diagnoses),
            load_records=list(session.load_records),
            start_error=session.start_error,
        )

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (what execnet can carry)."""
        _payload_form()
        return dict(json.loads(json.dumps(jsonmodel.to_json(self), default=str)))

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> WorkerPayload:
        """Read :meth:`to_json` output (a bad record raises a one-line ``ValueError``)."""
        _payload_form()
        return jsonmodel.from_json(cls, doc, source="xdist worker")

    def merge_into(self, session: DDTreeSession) -> None:
        """Controller side: add this worker's records to the session's."""
        from pytest_ddtree.measure.sweep import merge_samples

        session.samples = merge_samples(session.samples, self.samples)
        if session.metadata is None and self.metadata is not None:
            session.metadata = self.metadata
        session.outcomes.failed.update(self.failed)
        for budget, nodeid in self.lossy.items():
            session.mark_lossy(budget, nodeid)
        session.diagnoses.extend(self.diagnoses)
        session.load_records.extend(self.load_records)


def _read_load(doc: Any, _: Any) -> list[LoadRecord]:
    if not doc:  # the load package is loaded only when a load test ran
        return []
    from pytest_ddtree.measure.load.record import LoadRecord

    return jsonmodel.converter.structure(doc, list[LoadRecord])


@functools.cache
def _payload_form() -> None:
    """Register :class:`WorkerPayload` with the converter, once, on first use (its record
    types are imported then): lossy budgets as ``[budget, nodeid]`` pairs."""
    from pytest_ddtree.measure.sweep import DiagnosisRecord, RunMetadata, Sample

    jsonmodel.register(
        WorkerPayload,
        localns={
            "Sample": Sample,
            "RunMetadata": RunMetadata,
            "DiagnosisRecord": DiagnosisRecord,
            "LoadRecord": Any,
        },
        lossy=jsonmodel.override(
            unstruct_hook=lambda lossy: [[b, n] for b, n in lossy.items()],
            struct_hook=lambda pairs, _: dict(
                jsonmodel.converter.structure(pairs, list[tuple[int | None, str]])
            ),
        ),
        # the JSON key stays "load": what the controllers and workers of earlier versions sent
        load_records=jsonmodel.override(
            rename="load",
            unstruct_hook=lambda records: [jsonmodel.to_json(r) for r in records],
            struct_hook=_read_load,
        ),
        # written only when set: a payload of a worker that reached its endpoint is unchanged
        start_error=jsonmodel.override(omit_if_default=True),
    )
