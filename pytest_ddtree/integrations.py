"""Optional integrations, each a hook class registered only when its plugin is active.

- :class:`BenchmarkIntegration` (pytest-benchmark loaded): keeps failed,
  interrupted and lossy timings out of its JSON and tables, describes the
  endpoint in ``machine_info`` and sorts budget groups numerically. Every read
  of pytest-benchmark's internals is here.
- :class:`XdistIntegration` (pytest-xdist spreading the run): the controller
  tells each worker its ``--dist`` mode (load tests are split under ``each``)
  and merges each worker's :class:`WorkerPayload`, the one typed record a
  worker hands over (sweep samples and load records alike; serialised and
  merged here only).
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pluggy
import pytest

from pytest_ddtree.bench import discard_timings, keep_passed, machine_info_extra, strip_budgets
from pytest_ddtree.session import DIST_KEY, DDTreeSession
from pytest_ddtree.sweep import DiagnosisRecord, RunMetadata, SweepSample, merge_samples

if TYPE_CHECKING:
    from pytest_ddtree.load import LoadRecord


def _group_sort_key(name: object) -> tuple[int, str]:
    # "tree_budget=64" (possibly followed by other group-by parts) sorts by 64.
    text = str(name or "")
    if text.startswith("tree_budget="):
        head = text.split(" ")[0].split("=", 1)[1]
        if head.isdigit():
            return (int(head), text)
    return (-1, text)


class BenchmarkIntegration:
    """pytest-benchmark interop (registered only when pytest-benchmark is loaded)."""

    def __init__(self, session: DDTreeSession) -> None:
        self.session = session

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pluggy.Result[Any], None]:
        """A failed test's benchmark loses its rounds (table, compare, JSON)."""
        outcome = yield
        if outcome.get_result().failed:
            fixture = getattr(item, "funcargs", {}).get("benchmark")
            if fixture is not None:
                discard_timings(fixture)

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_sessionfinish(
        self, session: pytest.Session
    ) -> Generator[None, pluggy.Result[Any], None]:
        """Before pytest-benchmark writes its JSON: drop empty and not-passed gated benchmarks.

        A benchmark interrupted by Ctrl-C has no rounds (it would crash the JSON
        writer); one of a failed gated test must not count.
        """
        bench_session = getattr(session.config, "_benchmarksession", None)
        benches = getattr(bench_session, "benchmarks", None)
        if isinstance(benches, list):
            keep, gated = self.session.outcomes.kept, self.session.outcomes.gated
            benches[:] = [
                b
                for b in benches
                if _has_rounds(b)
                and (
                    getattr(b, "fullname", None) in keep
                    or getattr(b, "fullname", None) not in gated
                )
            ]
        yield

    @pytest.hookimpl(optionalhook=True)
    def pytest_benchmark_update_json(
        self, config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]
    ) -> None:
        """Keep only benchmarks of tests that passed, and none of a lossy budget."""
        keep_passed(output_json, self.session.outcomes.kept)
        if self.session.lossy:
            strip_budgets(output_json, self.session.lossy)

    @pytest.hookimpl(optionalhook=True)
    def pytest_benchmark_update_machine_info(
        self, config: pytest.Config, machine_info: dict[str, Any]
    ) -> None:
        """Add the endpoint (no secrets), model, dialect and the server's model list."""
        settings = self.session.settings
        runtime = self.session.runtime
        if (
            runtime is None
            and config.getoption("benchmark_compare", None)
            and not self.session.xdist
        ):
            # Comparing needs the same description as the saved run, which was
            # written with the endpoint up: start it now instead of on first use.
            runtime = self.session.ensure_runtime()
        models: Any = None
        if runtime is not None:
            try:
                models = [{"id": m} for m in runtime.client.list_models()]
            except Exception:
                # machine_info is descriptive; a failed probe must not fail the run.
                models = None
        machine_info["ddtree"] = machine_info_extra(
            endpoint=runtime.endpoint if runtime is not None else settings.endpoint,
            model=runtime.model if runtime is not None else settings.model,
            # The configured dialect: the detected one is known only after the
            # first response, which would make saved and current runs differ.
            dialect=settings.dialect,
            server_models=models,
            embedded=settings.endpoint is None,
            embedded_setup={
                "reference_latency": settings.reference_latency,
                "reference_slowdown": settings.reference_slowdown,
                "faults": ",".join(settings.reference_faults) or "none",
            },
        )

    @pytest.hookimpl(hookwrapper=True, optionalhook=True)
    def pytest_benchmark_group_stats(
        self, config: pytest.Config, benchmarks: Any, group_by: str
    ) -> Generator[None, pluggy.Result[Any], None]:
        """Show budget groups in numeric order (16, 32, ..., 1024), not as strings."""
        outcome = yield
        groups = outcome.get_result()
        if isinstance(groups, list):
            outcome.force_result(sorted(groups, key=lambda pair: _group_sort_key(pair[0])))


def _has_rounds(bench: Any) -> bool:
    try:
        return bool(bench.stats.stats.data)
    except AttributeError:
        return True  # not the shape we know: leave it to pytest-benchmark


#: Key of the payload a pytest-xdist worker hands to the controller.
WORKER_OUTPUT_KEY = "ddtree_sweep"


@dataclass
class WorkerPayload:
    """What one xdist worker recorded, as the controller receives it."""

    samples: list[SweepSample] = field(default_factory=list)
    metadata: RunMetadata | None = None
    failed: list[str] = field(default_factory=list)
    lossy: dict[int | None, str] = field(default_factory=dict)
    diagnoses: list[DiagnosisRecord] = field(default_factory=list)
    #: raw samples of each ddtree_load call: the controller computes the percentiles once
    load: list[LoadRecord] = field(default_factory=list)

    @classmethod
    def of(cls, session: DDTreeSession) -> WorkerPayload:
        """The payload of this worker's session."""
        return cls(
            samples=list(session.samples),
            metadata=session.metadata,
            failed=sorted(session.outcomes.failed),
            lossy=dict(session.lossy),
            diagnoses=list(session.diagnoses),
            load=list(session.load_records),
        )

    def to_json(self) -> dict[str, Any]:
        """Plain JSON (what execnet can carry)."""
        doc = {
            "samples": [s.to_json() for s in self.samples],
            "metadata": None if self.metadata is None else self.metadata.to_json(),
            "failed": self.failed,
            "lossy": [[b, n] for b, n in self.lossy.items()],
            "diagnoses": [d.to_json() for d in self.diagnoses],
            "load": [r.to_json() for r in self.load],
        }
        return dict(json.loads(json.dumps(doc, default=str)))

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> WorkerPayload:
        """Read :meth:`to_json` output (a bad sample raises a one-line ``ValueError``)."""
        meta = doc.get("metadata")
        load: list[LoadRecord] = []
        if doc.get("load"):  # the load package is loaded only when a load test ran
            from pytest_ddtree.load.record import LoadRecord

            load = [LoadRecord.from_json(r) for r in doc["load"]]
        return cls(
            samples=[SweepSample.from_json(s, source="xdist worker") for s in doc["samples"]],
            metadata=RunMetadata.from_json(meta) if isinstance(meta, Mapping) else None,
            failed=[str(n) for n in doc.get("failed", [])],
            lossy={b: str(n) for b, n in doc.get("lossy", [])},
            diagnoses=[DiagnosisRecord.from_json(d) for d in doc.get("diagnoses", [])],
            load=load,
        )

    def store(self, config: pytest.Config) -> None:
        """Worker side: leave the payload for the controller."""
        config.workeroutput[WORKER_OUTPUT_KEY] = self.to_json()  # type: ignore[attr-defined]

    def merge_into(self, session: DDTreeSession) -> None:
        """Controller side: add this worker's records to the session's."""
        session.samples = merge_samples(session.samples, self.samples)
        if session.metadata is None and self.metadata is not None:
            session.metadata = self.metadata
        session.outcomes.failed.update(self.failed)
        for budget, nodeid in self.lossy.items():
            session.mark_lossy(budget, nodeid)
        session.diagnoses.extend(self.diagnoses)
        session.load_records.extend(self.load)


class XdistIntegration:
    """pytest-xdist interop (registered only when the run is spread over workers)."""

    def __init__(self, session: DDTreeSession) -> None:
        self.session = session

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        """Say once that pytest-benchmark is off under xdist, and what happens instead."""
        if config.pluginmanager.hasplugin("benchmark"):
            return [
                "ddtree: pytest-benchmark disables itself under pytest-xdist; gated benchmarks "
                "still validate every round, and their timings are reported as concurrent"
            ]
        return []

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Controller side: tell each worker how tests are distributed (it runs with "no")."""
        node.workerinput[DIST_KEY] = str(getattr(self.session.config.option, "dist", "no"))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Controller side: take over a finished worker's records."""
        doc = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT_KEY)
        if isinstance(doc, Mapping):
            WorkerPayload.from_json(doc).merge_into(self.session)


def register(config: pytest.Config, session: DDTreeSession) -> None:
    """Register each integration whose plugin is active (once)."""
    manager = config.pluginmanager
    if manager.hasplugin("benchmark") and not manager.has_plugin("ddtree-benchmark"):
        manager.register(BenchmarkIntegration(session), "ddtree-benchmark")
    if session.xdist and not manager.has_plugin("ddtree-xdist"):
        manager.register(XdistIntegration(session), "ddtree-xdist")
