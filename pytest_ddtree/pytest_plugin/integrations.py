"""Optional integrations, each a hook class registered only when its plugin is active.

- :class:`BenchmarkIntegration` (pytest-benchmark loaded): keeps failed,
  interrupted and lossy timings out of its JSON and tables, describes the
  endpoint in ``machine_info`` and sorts budget groups numerically. Every read
  of pytest-benchmark's internals is here.
- :class:`XdistIntegration` (pytest-xdist spreading the run): the controller
  tells each worker its ``--dist`` mode (load tests are split under ``each``)
  and forwards each finished worker's output (plain JSON) to the session,
  which owns the payload and the merge (``session.WorkerPayload``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy
import pytest

from pytest_ddtree.core.budget import group_order
from pytest_ddtree.measure.bench import (
    differing_keys,
    discard_timings,
    keep_passed,
    machine_info_extra,
    strip_budgets,
)
from pytest_ddtree.pytest_plugin.session import DIST_KEY, WORKER_OUTPUT_KEY, DDTreeSession

if TYPE_CHECKING:
    from pytest_ddtree.measure.load.hosts import Hosts


def _group_sort_key(name: object) -> tuple[int, str]:
    # "tree_budget=64" (possibly followed by other group-by parts) sorts by 64.
    return (group_order(name), str(name or ""))


class BenchmarkIntegration:
    """pytest-benchmark interop (registered only when pytest-benchmark is loaded)."""

    def __init__(self, session: DDTreeSession) -> None:
        self.session = session
        # pytest-benchmark makes its storage directory when it starts (its configure runs
        # after this one), saved into or not: a run that saved nothing leaves it empty
        storage = _file_storage(session.config)
        self.made_storage = storage if storage is not None and not storage.exists() else None

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Remove the storage directory pytest-benchmark made for this run, if nothing was
        saved in it (an empty ``.benchmarks/`` left in the user's directory)."""
        made = self.made_storage
        if made is None:
            return
        for directory in (*sorted(made.glob("*"), reverse=True), made):
            with contextlib.suppress(OSError):  # not empty (or gone): it stays as it is
                directory.rmdir()

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
                **_slowdown_setup(settings.reference_slowdown_after),
            },
        )
        # the probe's output and the server's /version: what `--benchmark-compare` shows
        if runtime is not None:
            with contextlib.suppress(Exception):
                self.session.describe_server(runtime)
        machine_info["ddtree"].update(self.session.machine_state())

    @pytest.hookimpl(hookwrapper=True, optionalhook=True)
    def pytest_benchmark_compare_machine_info(
        self,
        config: pytest.Config,
        benchmarksession: Any,
        machine_info: Mapping[str, Any],
        compared_benchmark: Mapping[str, Any],
    ) -> Generator[None, pluggy.Result[Any], None]:
        """pytest-benchmark's warning, both descriptions whole (thousands of characters),
        becomes one line naming the keys that differ."""
        logger: Any = getattr(benchmarksession, "logger", None)
        original = getattr(logger, "warning", None)
        saved = compared_benchmark.get("machine_info")
        if original is None or not isinstance(saved, Mapping):
            yield
            return
        keys = differing_keys(machine_info, saved)

        def warning(text: Any, *args: Any, **kwargs: Any) -> Any:
            if "machine_info is different" in str(text):
                shown = ", ".join(keys[:8]) + (
                    f" and {len(keys) - 8} more" if len(keys) > 8 else ""
                )
                text = (
                    f"Benchmark machine_info differs from the saved run's in: {shown or 'order'} "
                    "(the saved JSON has both in full)"
                )
            return original(text, *args, **kwargs)

        logger.warning = warning
        try:
            yield
        finally:
            del logger.warning  # the bound method again

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
        """Controller side: tell each worker how tests are distributed (it runs with "no");
        check its host's version and read its clock (``remote``)."""
        node.workerinput[DIST_KEY] = str(getattr(self.session.config.option, "dist", "no"))
        from pytest_ddtree.pytest_plugin import remote

        remote.node_up(self._hosts(), node)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Controller side: take over a finished worker's records; its host's clock at the
        end, or why it went down."""
        doc = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT_KEY)
        start_error = doc.get("start_error") if isinstance(doc, Mapping) else None
        from pytest_ddtree.pytest_plugin import remote

        remote.node_down(self._hosts(), node, error, start_error)
        if isinstance(doc, Mapping):
            self.session.merge_worker(doc)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Controller side: a worker has finished a test; no run of a split load test
        waits for it there (``remote.test_done``)."""
        node = getattr(report, "node", None)
        if report.when == "teardown" and node is not None and not self.session.is_worker:
            from pytest_ddtree.pytest_plugin import remote

            remote.test_done(self._hosts(), str(node.gateway.id), report.nodeid)

    def _hosts(self) -> Hosts:
        if self.session.hosts is None:
            from pytest_ddtree.measure.load.hosts import Hosts

            self.session.hosts = Hosts()
        return self.session.hosts


def _file_storage(config: pytest.Config) -> Path | None:
    """pytest-benchmark's ``--benchmark-storage`` directory (``file://./.benchmarks`` by
    default, relative to the working directory), None for another kind of storage."""
    storage = str(config.getoption("benchmark_storage", None) or "")
    if "://" not in storage:
        storage = "file://" + storage
    if not storage.startswith("file://") or storage == "file://":
        return None
    return Path(storage[len("file://") :]).resolve()


def register(config: pytest.Config, session: DDTreeSession) -> None:
    """Register each integration whose plugin is active (once)."""
    manager = config.pluginmanager
    if manager.hasplugin("benchmark") and not manager.has_plugin("ddtree-benchmark"):
        manager.register(BenchmarkIntegration(session), "ddtree-benchmark")
    if session.xdist and not manager.has_plugin("ddtree-xdist"):
        manager.register(XdistIntegration(session), "ddtree-xdist")
        if not session.is_worker:
            from pytest_ddtree.pytest_plugin import remote

            remote.configure(config)


def _slowdown_setup(slowdown: tuple[int, float] | None) -> dict[str, str]:
    """``--ddtree-reference-slowdown-after`` in the embedded setup (nothing when not given)."""
    return {} if slowdown is None else {"slowdown_after": f"{slowdown[0]}:{slowdown[1]:g}"}
