"""pytest wiring of load mode (``ddtree_load``): xdist shares, merging, terminal and report.

Under pytest-xdist with ``--dist each`` every worker runs each load test and sends its
share of the load (``LoadPoint.split``); the workers hand their *raw* samples to the
controller, which merges them and computes the percentiles once. Without ``--dist each``
a load test runs whole on whichever process collects it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_ddtree.settings import Settings

if TYPE_CHECKING:
    from pytest_ddtree.load.metrics import ClientHealth, LoadSample, PointStats
    from pytest_ddtree.load.recommend import Schedule
    from pytest_ddtree.load.tester import LoadResult, LoadTester
    from pytest_ddtree.runtime import Runtime

WORKER_OUTPUT_KEY = "ddtree_load"
DIST_KEY = "ddtree_load_dist"
PLUGIN_NAME = "ddtree-load"


def load_share(config: pytest.Config) -> tuple[int, int, str]:
    """``(share, shares, worker id)`` of this process in a load run."""
    winput = getattr(config, "workerinput", None)
    if not isinstance(winput, Mapping):
        return 0, 1, "main"
    worker = str(winput.get("workerid", "gw0"))
    # workers run with dist "no": the controller tells them its mode (pytest_configure_node)
    if winput.get(DIST_KEY) != "each":
        return 0, 1, worker
    try:
        index = int(worker.removeprefix("gw"))
    except ValueError:
        index = 0
    return index, max(1, int(winput.get("workercount", 1))), worker


class LoadHooks:
    """Session state of load mode: results per test, merged on the controller."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        # one entry per ddtree_load call: nodeid, shares, raw samples and client health
        self.calls: list[dict[str, Any]] = []
        self.merged: list[tuple[str, int, tuple[PointStats, ...], Schedule, Any]] = []
        self.lines: list[str] = []

    # ---------------------------------------------------------------- collecting

    def record(self, nodeid: str, result: LoadResult, slo: Any) -> None:
        """Sink of a ``LoadTester``: keep the raw samples (never summaries)."""
        self.calls.append(
            {
                "nodeid": nodeid,
                "shares": result.shares,
                "partial": result.partial,
                "slo": str(slo) if slo is not None else None,
                "samples": [s.to_json() for s in result.samples],
                "health": [
                    [point.to_json(), budget, h.to_json()]
                    for (point, budget), h in result.health.items()
                ],
            }
        )

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Controller side of xdist: tell each worker how tests are distributed."""
        node.workerinput[DIST_KEY] = str(getattr(self.config.option, "dist", "no"))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Controller side of xdist: take a finished worker's raw load samples."""
        payload = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT_KEY)
        if isinstance(payload, list):
            self.calls.extend(c for c in payload if isinstance(c, dict))

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        settings: Settings | None = _settings(config)
        if settings is None:
            return []
        explicit = any(
            settings.source_of(a) != "default"
            for a in ("slo", "load_concurrency", "load_rate", "load_requests")
        )
        if not explicit and getattr(config.option, "dist", "no") != "each":
            return []  # stated after collection instead, if a test uses ddtree_load
        return [self._load_line(config, settings)]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        config = session.config
        settings = _settings(config)
        if settings is None or hasattr(config, "workerinput") or config.option.collectonly:
            return
        if self.pytest_report_header(config):
            return  # already in the header
        if not any("ddtree_load" in getattr(i, "fixturenames", ()) for i in session.items):
            return
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(self._load_line(config, settings))

    def _load_line(self, config: pytest.Config, settings: Settings) -> str:
        tx = getattr(config.option, "tx", None) or []
        n = getattr(config.option, "numprocesses", None)
        workers = int(n) if isinstance(n, int) else sum(_tx_count(t) for t in tx)
        total = ",".join(map(str, settings.load_concurrency)) or "-"
        rates = ",".join(f"{r:g}" for r in settings.load_rate)
        load = f"total concurrency {total}" + (f"; total rate {rates}/s" if rates else "")
        if workers > 1 and getattr(config.option, "dist", "no") == "each":
            where = f"split over {workers} xdist workers, merged from raw samples"
            if settings.endpoint is None:
                where += (
                    "; WARNING: each worker starts its own embedded server, so the merged "
                    "load is not on one server: give --ddtree-endpoint"
                )
        elif workers > 1:
            where = "each load test runs whole on one worker (use --dist each to split it)"
        else:
            where = "one process"
        return f"ddtree load: {load} ({where})"

    # ---------------------------------------------------------------- finishing

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        config = session.config
        if hasattr(config, "workerinput"):
            config.workeroutput[WORKER_OUTPUT_KEY] = self.calls  # type: ignore[attr-defined]
            return
        if not self.calls:
            return
        self.merged = merge_calls(self.calls, _settings(config))
        settings = _settings(config)
        if settings is not None and settings.report:
            try:
                self._write_report(Path(settings.report))
            except (OSError, ValueError) as exc:
                self.lines.append(f"ddtree: could not add the load results to the report: {exc}")

    def _write_report(self, directory: Path) -> None:
        from pytest_ddtree.load.html import render_load_section
        from pytest_ddtree.report._atomic import write_text_atomic

        doc_path, html_path = directory / "sweep.json", directory / "sweep.html"
        if doc_path.exists():
            doc = json.loads(doc_path.read_text(encoding="utf-8"))
        else:  # no sweep in this session: an empty sweep document carries the load section
            from pytest_ddtree import __version__
            from pytest_ddtree.report.jsonfile import SCHEMA_VERSION

            settings = _settings(self.config)
            doc = {
                "schema_version": SCHEMA_VERSION,
                "generator": f"pytest-ddtree {__version__}",
                "seed": settings.sweep_seed if settings is not None else 0,
                "metadata": {},
                "samples": [],
            }
        doc["load"] = load_json(self.merged, self.calls)
        write_text_atomic(doc_path, json.dumps(doc, indent=2, allow_nan=False) + "\n")
        section = render_load_section(self.merged)
        if html_path.exists():
            page = html_path.read_text(encoding="utf-8")
            at = page.rfind("<footer>")
            page = page[:at] + section + page[at:] if at >= 0 else page + section
        else:
            page = f"<!DOCTYPE html>\n<html><body><main>{section}</main></body></html>\n"
        write_text_atomic(html_path, page)
        self.lines.append(f"ddtree: load results added to {doc_path} and {html_path}")

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        if hasattr(config, "workerinput") or not self.merged:
            for line in self.lines:
                terminalreporter.write_line(line)
            return
        from pytest_ddtree.load.tester import render_table

        terminalreporter.write_sep("-", "pytest-ddtree load")
        partial = {c["nodeid"] for c in self.calls if c.get("partial")}
        for nodeid, shares, stats, schedule, workers in self.merged:
            where = f"{shares} processes ({', '.join(workers)})" if shares > 1 else "1 process"
            cut = " (interrupted: partial results)" if nodeid in partial else ""
            terminalreporter.write_line(f"{nodeid}: merged from {where}; total load per point{cut}")
            for line in render_table(stats, schedule).splitlines():
                terminalreporter.write_line("  " + line)
            if any(s.unreliable for s in stats):
                terminalreporter.write_line(
                    "  UNRELIABLE points: the client was saturated there; its own queueing "
                    "is in those latencies (spread the load with -n K --dist each)",
                    yellow=True,
                )
        for line in self.lines:
            terminalreporter.write_line(line)


def _tx_count(spec: str) -> int:
    head = spec.split("*", 1)
    return int(head[0]) if len(head) == 2 and head[0].isdigit() else 1


def _settings(config: pytest.Config) -> Settings | None:
    from pytest_ddtree.session import SETTINGS_KEY

    return config.stash.get(SETTINGS_KEY, None)


def merge_calls(
    calls: list[dict[str, Any]], settings: Settings | None
) -> list[tuple[str, int, tuple[PointStats, ...], Schedule, Any]]:
    """One analysis per test from the raw samples of every process that ran it."""
    from pytest_ddtree.load.arrivals import LoadPoint
    from pytest_ddtree.load.metrics import ClientHealth, LoadSample
    from pytest_ddtree.load.slo import parse_slo
    from pytest_ddtree.load.tester import analyse

    by_test: dict[str, list[dict[str, Any]]] = {}
    for call in calls:
        by_test.setdefault(str(call["nodeid"]), []).append(call)
    out = []
    seed = settings.sweep_seed if settings is not None else 0
    for nodeid, group in by_test.items():
        samples: list[LoadSample] = []
        health: dict[tuple[LoadPoint, int | None], list[ClientHealth]] = {}
        for call in group:
            samples.extend(LoadSample.from_json(s) for s in call["samples"])
            for point, budget, h in call["health"]:
                key = (LoadPoint.from_json(point), budget)
                health.setdefault(key, []).append(ClientHealth.from_json(h))
        if not samples:
            continue
        raw_slo = group[0].get("slo")
        slo = parse_slo(raw_slo, "load run") if raw_slo else None
        stats, schedule = analyse(samples, health, slo=slo, seed=seed)
        workers = sorted({s.worker for s in samples})
        out.append((nodeid, max(int(c.get("shares", 1)) for c in group), stats, schedule, workers))
    return out


def load_json(
    merged: list[tuple[str, int, tuple[PointStats, ...], Schedule, Any]],
    calls: list[dict[str, Any]],
) -> dict[str, Any]:
    """The ``load`` part of sweep.json: per test, the statistics, the schedule, raw samples."""
    raw: dict[str, list[Any]] = {}
    for call in calls:
        raw.setdefault(str(call["nodeid"]), []).extend(call["samples"])
    return {
        "tests": [
            {
                "nodeid": nodeid,
                "processes": shares,
                "workers": workers,
                "partial": any(c.get("partial") for c in calls if c["nodeid"] == nodeid),
                "points": [s.to_json() for s in stats],
                "schedule": schedule.to_json(),
                "samples": raw.get(nodeid, []),
            }
            for nodeid, shares, stats, schedule, workers in merged
        ]
    }


def make_tester(request: pytest.FixtureRequest, settings: Settings, runtime: Runtime) -> LoadTester:
    """The ``LoadTester`` for one test: the session's endpoint, invariants and options."""
    from pytest_ddtree.invariants import check
    from pytest_ddtree.load.runner import Endpoint
    from pytest_ddtree.load.tester import LoadTester
    from pytest_ddtree.runtime import expectation_kwargs

    config = request.config
    hooks = config.pluginmanager.get_plugin(PLUGIN_NAME)
    share, shares, worker = load_share(config)
    endpoint = Endpoint(
        runtime.endpoint,
        model=runtime.model,
        api=settings.api,
        api_key=settings.api_key,
        budget_mode=settings.budget_mode,
        budget_field=settings.budget_field,
        budget_endpoints=settings.budget_endpoints,
        timeout=settings.timeout,
        enable_thinking=settings.enable_thinking,
    )
    kwargs = expectation_kwargs(settings, {}, runtime.counter)
    counter = runtime.counter

    def judge(completion: Any, **expect: Any) -> list[Any]:
        return check(completion, counter=counter, **{**kwargs, **expect})

    budgets: tuple[int | None, ...] = (
        (None,) if settings.budget_mode == "none" else tuple(settings.budgets)
    )
    nodeid = request.node.nodeid
    slo = settings.slo

    def sink(result: LoadResult) -> None:
        if isinstance(hooks, LoadHooks):
            hooks.record(nodeid, result, slo)

    return LoadTester(
        endpoint,
        judge=judge,
        tree_budgets=budgets,
        concurrencies=settings.load_concurrency,
        rates=settings.load_rate,
        burstiness=settings.load_burstiness,
        requests=settings.load_requests,
        max_tokens=settings.max_tokens,
        slo=slo,
        seed=settings.sweep_seed,
        dialect=runtime.dialect if runtime.dialect not in ("", "none") else "auto",
        stats_map=settings.stats_map,
        counter=counter,
        share=share,
        shares=shares,
        worker=worker,
        sink=sink,
    )


def register(config: pytest.Config) -> LoadHooks:
    """Register the hooks once (called from the plugin's ``pytest_configure``)."""
    existing = config.pluginmanager.get_plugin(PLUGIN_NAME)
    if isinstance(existing, LoadHooks):
        return existing
    hooks = LoadHooks(config)
    config.pluginmanager.register(hooks, PLUGIN_NAME)
    return hooks
