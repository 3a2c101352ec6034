"""pytest wiring of the gated benchmarks, the budget sweep and its report.

One object, :class:`BenchHooks`, registered by the plugin at configure time,
holds the session's sweep samples and provides:

- the ``ddtree_benchmark`` fixture (wraps pytest-benchmark's ``benchmark``,
  validates every round inside the timed target, smoke-checks each prompt
  once before timing it);
- the ``ddtree_sweep`` fixture (a whole interleaved sweep in one test,
  without pytest-benchmark);
- the pytest-benchmark hooks (strip failed tests from its JSON, add the
  endpoint to ``machine_info``);
- the xdist transport of samples from workers to the controller;
- the end-of-session table, the budget-ignored check and ``--ddtree-report``.

The logic lives in ``bench``, ``sweep`` and ``report``; this module only
connects it to pytest.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from pytest_ddtree import _guard
from pytest_ddtree.bench import (
    discard_timings,
    group_name,
    keep_passed,
    machine_info_extra,
    run_gated,
    strip_budgets,
    strip_failed,
)
from pytest_ddtree.completion import Completion
from pytest_ddtree.settings import Settings
from pytest_ddtree.sweep import (
    SweepPlan,
    SweepRun,
    SweepSample,
    SweepSummary,
    budget_label,
    merge_samples,
    redact_endpoint,
    run_sweep,
    summarize,
)
from pytest_ddtree.violation import InvariantError, Violation

#: Key of the plain-JSON payload a pytest-xdist worker hands to the controller.
WORKER_OUTPUT_KEY = "ddtree_sweep"

_UNSET: Any = object()


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _worker_id(config: pytest.Config) -> str | None:
    winput = getattr(config, "workerinput", None)
    if isinstance(winput, Mapping):
        return str(winput.get("workerid"))
    return None


def _worker_count(config: pytest.Config) -> int:
    winput = getattr(config, "workerinput", None)
    if isinstance(winput, Mapping):
        return int(winput.get("workercount", 1))
    return 1


def _xdist_active(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) or _is_worker(config)


def _prompt_key(prompt: Any, max_tokens: int | None, api: str | None, expect: Any) -> str:
    return json.dumps([prompt, max_tokens, api, expect], sort_keys=True, default=repr)


def _group_sort_key(name: Any) -> tuple[int, str]:
    # "tree_budget=64" (possibly followed by other group-by parts) sorts by 64.
    text = str(name or "")
    if text.startswith("tree_budget="):
        head = text.split(" ")[0].split("=", 1)[1]
        if head.isdigit():
            return (int(head), text)
    return (-1, text)


def _default_prompt_id(request: pytest.FixtureRequest) -> str:
    # Readable ids: the test's own parameters minus the budget, else its name.
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None:
        parts = [p for p in str(callspec.id).split("-") if not p.startswith("budget=")]
        if parts:
            return "-".join(parts)
    return str(getattr(request.node, "originalname", request.node.name))


class BenchHooks:
    """Session state and hooks of the gated benchmarks and the sweep report."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.samples: list[SweepSample] = []
        # samples of the test phase running now; kept only once the phase ends,
        # so a test interrupted by Ctrl-C leaves nothing half-measured behind
        self.pending: list[SweepSample] = []
        self.metadata: dict[str, Any] = {}
        self.failed: set[str] = set()
        self.passed: set[str] = set()
        self.gated: set[str] = set()  # tests that used ddtree_benchmark
        self.lossy: dict[int | None, str] = {}
        self.interrupted = False
        self.smoked: dict[str, list[Violation]] = {}
        self.smoke_failure: str | None = None
        self.budget_ignored: list[Violation] = []
        self.report_lines: list[str] = []
        self.diagnoses: list[dict[str, Any]] = []
        self.summary: SweepSummary | None = None

    # ------------------------------------------------------------ helpers

    def _settings(self) -> Settings | None:
        from pytest_ddtree import plugin

        runtime = self.config.stash.get(plugin.RUNTIME_KEY, None)
        if runtime is not None:
            return runtime.settings
        return self.config.stash.get(plugin.SETTINGS_KEY, None)

    def _runtime(self) -> Any:
        from pytest_ddtree import plugin

        return self.config.stash.get(plugin.RUNTIME_KEY, None)

    def _note_runtime(self, runtime: Any) -> None:
        settings: Settings = runtime.settings
        endpoint = settings.endpoint or ""
        self.metadata.update(
            {
                "endpoint": (
                    f"embedded reference server ({redact_endpoint(endpoint)})"
                    if settings.embedded
                    else redact_endpoint(endpoint)
                ),
                "model": runtime.model,
                "dialect": runtime.dialect,
                "embedded_setup": (
                    f"simulated_latency={settings.reference_latency}, "
                    f"faults={','.join(settings.reference_faults) or 'none'}"
                    if settings.embedded
                    else None
                ),
                "api": settings.api,
                "budgets": list(settings.budgets)
                if settings.budget_mode != "none"
                else ["server default"],
                "budget_mode": settings.budget_mode,
                "max_tokens": settings.max_tokens,
                "configured_rounds": settings.rounds,
                "configured_warmup_rounds": settings.warmup_rounds,
                "order": settings.sweep_order,
                "tokenizer": runtime.tokenizer_source,
            }
        )
        # Descriptive only: a failed probe must not fail a benchmark.
        with contextlib.suppress(Exception):
            self.metadata["server_models"] = list(runtime.client.list_models())
        if settings.skip_checks:
            self.metadata["notes"] = [
                f"Weakened run: checks skipped: {', '.join(settings.skip_checks)}."
            ]
        if _xdist_active(self.config):
            self.metadata["workers"] = _worker_count(self.config)

    def _record(self, sample: SweepSample) -> None:
        self.pending.append(sample)

    def _validator(
        self, runtime: Any, settings: Settings, expect: dict[str, Any]
    ) -> Callable[[Completion], list[Violation]]:
        from pytest_ddtree import invariants
        from pytest_ddtree.runtime import expectation_kwargs

        kwargs = expectation_kwargs(settings, dict(expect), runtime.counter)

        def validate(completion: Completion) -> list[Violation]:
            return list(invariants.check(completion, counter=runtime.counter, **kwargs))

        return validate

    def _diagnoser(
        self, runtime: Any, validate: Callable[[Completion], list[Violation]], nodeid: str
    ) -> Callable[[Completion, list[Violation]], str]:
        """Replay a failing request on the baseline and say which layer is at fault."""

        def diagnose(completion: Completion, violations: list[Violation]) -> str:
            method = getattr(runtime, "diagnose", None)
            if method is None:
                return ""
            try:
                return str(method(completion, violations, validate, nodeid=nodeid).render())
            except Exception as exc:  # the failure itself must still be reported
                return f"diagnosis unavailable: {type(exc).__name__}: {exc}"

        return diagnose

    def _smoke(
        self,
        key: str,
        send: Callable[[int | None], Completion],
        validate: Callable[[Completion], list[Violation]],
        budget: int | None,
        nodeid: str,
        benchmark: Any,
        diagnose: Callable[[Completion, list[Violation]], str],
    ) -> None:
        """One untimed request per distinct prompt before any timing of it."""
        __tracebackhide__ = True
        if self.smoke_failure is not None:
            pytest.skip(f"benchmarks not run: {self.smoke_failure}")
        if key in self.smoked:
            return
        completion = send(budget)
        violations = validate(completion)
        self.smoked[key] = violations
        if violations:
            codes = ", ".join(dict.fromkeys(v.code for v in violations))
            self.smoke_failure = (
                f"the smoke request before timing failed in {nodeid} ({codes} at "
                f"tree_budget={budget_label(budget)}); fix the endpoint first"
            )
            self._record(SweepSample.from_completion(completion, violations, round=-1))
            error = InvariantError(
                violations,
                header=(
                    f"smoke request before timing (tree_budget={budget_label(budget)}, "
                    f"prompt={completion.request.prompt_id}): {len(violations)} output-quality "
                    "invariant(s) broken. No benchmark of this session will run until the "
                    "outputs are valid"
                ),
                footer=diagnose(completion, violations),
            )

            def fail() -> None:
                raise error

            # Raised through pedantic() so pytest-benchmark records an errored,
            # empty benchmark (never saved or shown) instead of warning that the
            # fixture was not used.
            with contextlib.suppress(InvariantError):
                benchmark.pedantic(fail, rounds=1, warmup_rounds=0, iterations=1)
            # A fresh traceback: the user's test line, not pytest-benchmark's frames.
            raise error.with_traceback(None)

    # ------------------------------------------------------------ fixtures

    @pytest.fixture
    def ddtree_benchmark(
        self,
        request: pytest.FixtureRequest,
        benchmark: Any,
        ddtree_runtime: Any,
        ddtree_settings: Settings,
    ) -> Callable[..., Completion]:
        """``ddtree_benchmark(prompt_or_messages, **kw) -> Completion``: a gated timing.

        Wraps pytest-benchmark's ``benchmark``: ``benchmark.pedantic`` runs
        ``warmup_rounds`` + ``rounds`` requests (defaults from
        ``--ddtree-rounds`` / ``--ddtree-warmup-rounds`` or the ``ddtree``
        marker) and every response is validated inside the timed call, so an
        invalid response fails the test and records no timing. The tree budget
        is the test's ``tree_budget`` parameter when it has one.
        pytest-benchmark times one test at a time, so the rounds of one budget
        run back to back; the budgets of a test are visited in the seeded
        sweep order (``--ddtree-sweep-order fixed`` keeps the configured one).
        For rounds interleaved across budgets, use ``ddtree_sweep``. Keyword
        arguments: ``max_tokens``, ``rounds``, ``warmup_rounds``,
        ``prompt_id``, ``tree_budget``, ``temperature``, ``api``, ``stream``
        (default True; a plain request has no TTFT or decode rate, only its
        end-to-end time), ``headers``, ``request_extra`` (extra JSON body
        fields); any other keyword is an expectation for the invariants
        (e.g. ``min_tokens=64``).
        Before the first timing of a prompt, one smoke request at the
        smallest budget is validated; if it fails, this test fails with the
        diagnosis and every later benchmark of the session is skipped.
        """
        runtime = ddtree_runtime
        settings = ddtree_settings
        self.gated.add(request.node.nodeid)
        if not self.metadata:
            self._note_runtime(runtime)
        default_budget = (
            request.getfixturevalue("tree_budget")
            if "tree_budget" in request.fixturenames
            else None
        )
        worker = _worker_id(self.config)
        concurrent = _worker_count(self.config) > 1

        def run(
            prompt: Any,
            *,
            max_tokens: int | None = None,
            rounds: int | None = None,
            warmup_rounds: int | None = None,
            prompt_id: str | None = None,
            tree_budget: int | None = _UNSET,
            temperature: float = 0.0,
            api: str | None = None,
            stream: bool = True,
            headers: Mapping[str, str] | None = None,
            request_extra: Mapping[str, Any] | None = None,
            **expect: Any,
        ) -> Completion:
            __tracebackhide__ = True
            budget = default_budget if tree_budget is _UNSET else tree_budget
            pid = prompt_id or _default_prompt_id(request)
            mt = settings.max_tokens if max_tokens is None else max_tokens

            def send(b: int | None) -> Completion:
                return runtime.client.request(  # type: ignore[no-any-return]
                    prompt,
                    api=api or settings.api,
                    max_tokens=mt,
                    temperature=temperature,
                    tree_budget=b,
                    stream=stream,
                    prompt_id=pid,
                    headers=headers,
                    **dict(request_extra or {}),
                )

            lossy_at = getattr(runtime, "lossy_budgets", {}).get(budget)
            if lossy_at is not None:
                lossy_error = InvariantError(
                    [
                        Violation(
                            "not-lossless",
                            f"tree_budget {budget_label(budget)} changed the temperature-0 "
                            "output earlier in this session, so its timings would measure a "
                            "different computation: not timed",
                            {"shown by": lossy_at},
                            "",
                        )
                    ],
                    footer="diagnosis: speculative decoding - the tree verification must not "
                    "change the output; fix it before timing this budget",
                )

                def refuse() -> None:
                    raise lossy_error

                # through pedantic(): an errored, empty benchmark, never saved, and no
                # "fixture was not used" warning
                with contextlib.suppress(InvariantError):
                    benchmark.pedantic(refuse, rounds=1, warmup_rounds=0, iterations=1)
                raise lossy_error.with_traceback(None)
            validate = self._validator(runtime, settings, expect)
            smoke_budget = (
                min(settings.budgets)
                if settings.budget_mode != "none" and settings.budgets
                else None
            )
            key = _prompt_key(prompt, mt, api, [expect, request_extra, dict(headers or {}), stream])
            diagnose = self._diagnoser(runtime, validate, request.node.nodeid)
            self._smoke(key, send, validate, smoke_budget, request.node.nodeid, benchmark, diagnose)
            result = run_gated(
                benchmark,
                lambda: send(budget),
                validate,
                rounds=settings.rounds if rounds is None else rounds,
                warmup_rounds=settings.warmup_rounds if warmup_rounds is None else warmup_rounds,
                group=group_name(budget),
                extra_info_base={
                    "tree_budget": budget,
                    "prompt_id": pid,
                    "model": runtime.model,
                    "max_tokens": mt,
                },
                on_sample=self._record,
                worker=worker,
                concurrent=concurrent,
                diagnose=diagnose,
            )
            return result.completion

        return run

    @pytest.fixture
    def ddtree_sweep(
        self, request: pytest.FixtureRequest, ddtree_runtime: Any, ddtree_settings: Settings
    ) -> Callable[..., SweepSummary]:
        """``ddtree_sweep(prompts, **kw) -> SweepSummary``: one interleaved sweep, one test.

        ``prompts`` maps a prompt id to a prompt string or chat messages (a plain
        list of prompt strings gets the ids ``p0``, ``p1``, ...). Each
        round visits every budget (``budgets=`` or the configured ones) in a
        seeded shuffled order (``--ddtree-sweep-order fixed`` keeps it), after
        ``warmup_rounds`` validated warm-up rounds; a smoke request per prompt
        runs first. Every response is validated; the samples join the
        session's report. Raises :class:`InvariantError` listing what broke
        when any request was invalid; otherwise returns the statistics and
        the recommendation. Other keywords: ``max_tokens``, ``rounds``,
        ``warmup_rounds``, ``seed``, ``order``, ``headers``, and expectations
        for the invariants.
        """
        runtime = ddtree_runtime
        settings = ddtree_settings
        if not self.metadata:
            self._note_runtime(runtime)
        worker = _worker_id(self.config)
        concurrent = _worker_count(self.config) > 1

        def sweep(
            prompts: Mapping[str, Any] | Sequence[str],
            *,
            budgets: Sequence[int] | None = None,
            max_tokens: int | None = None,
            rounds: int | None = None,
            warmup_rounds: int | None = None,
            seed: int | None = None,
            order: str | None = None,
            headers: Mapping[str, str] | None = None,
            **expect: Any,
        ) -> SweepSummary:
            __tracebackhide__ = True
            if isinstance(prompts, str):
                prompts = [prompts]
            if not isinstance(prompts, Mapping):
                if not all(isinstance(p, str) for p in prompts):
                    raise TypeError(
                        "ddtree_sweep takes {prompt_id: prompt} or a list of prompt strings"
                    )
                # ids from the list position, stable across runs and workers
                prompts = {f"p{i}": p for i, p in enumerate(prompts)}
            plan = SweepPlan(
                budgets=tuple(budgets if budgets is not None else settings.budgets),
                prompts=tuple(prompts),
                rounds=settings.rounds if rounds is None else rounds,
                warmup_rounds=settings.warmup_rounds if warmup_rounds is None else warmup_rounds,
                seed=settings.sweep_seed if seed is None else seed,
                order=(order or settings.sweep_order),  # type: ignore[arg-type]
            )
            mt = settings.max_tokens if max_tokens is None else max_tokens
            validate = self._validator(runtime, settings, expect)

            def send(budget: int, pid: str) -> Completion:
                return runtime.client.request(  # type: ignore[no-any-return]
                    prompts[pid],
                    max_tokens=mt,
                    tree_budget=budget,
                    stream=True,
                    prompt_id=pid,
                    headers=headers,
                )

            diagnose = self._diagnoser(runtime, validate, request.node.nodeid)
            smoke = min(plan.budgets)
            bad: list[Violation] = []
            first_bad: tuple[Completion, list[Violation]] | None = None
            for pid in plan.prompts:
                completion = send(smoke, pid)
                violations = validate(completion)
                if violations:
                    self._record(SweepSample.from_completion(completion, violations, round=-1))
                    bad.extend(violations)
                    first_bad = first_bad or (completion, violations)
            if first_bad is not None:
                raise InvariantError(
                    bad,
                    header=(
                        f"smoke requests before the sweep (tree_budget={smoke}): "
                        f"{len(bad)} output-quality invariant(s) broken; nothing was timed"
                    ),
                    footer=diagnose(*first_bad),
                )
            invalid: list[Violation] = []
            failures: list[tuple[Completion, list[Violation]]] = []

            def checked(completion: Completion) -> list[Violation]:
                violations = list(validate(completion))
                if violations:
                    failures.append((completion, violations))
                    invalid.extend(violations)
                return violations

            samples = run_sweep(
                plan,
                send,
                checked,
                worker=worker,
                concurrent=concurrent,
                on_sample=self._record,
            )
            summary = summarize(samples, seed=plan.seed)
            if failures:
                per_budget = ", ".join(
                    f"{budget_label(b.tree_budget)}: {', '.join(sorted(b.codes))}"
                    for b in summary.budgets
                    if not b.all_valid
                )
                raise InvariantError(
                    invalid,
                    header=f"sweep has invalid responses ({per_budget})",
                    footer=diagnose(*failures[0]),
                )
            return summary

        return sweep

    # ------------------------------------------------------------ pytest hooks

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        """Say once that pytest-benchmark is off under xdist, and what happens instead."""
        if _xdist_active(config) and config.pluginmanager.hasplugin("benchmark"):
            return [
                "ddtree: pytest-benchmark disables itself under pytest-xdist; gated benchmarks "
                "still validate every round, and their timings are reported as concurrent"
            ]
        return []

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[Any]) -> None:
        """Visit each benchmark test's budgets in the seeded sweep order."""
        settings = self._settings()
        if settings is None or settings.sweep_order == "fixed" or len(settings.budgets) < 2:
            return
        order = SweepPlan(settings.budgets, ("-",), seed=settings.sweep_seed).budget_order(0)
        rank = {b: i for i, b in enumerate(order)}

        def family(item: Any) -> Any:
            if "ddtree_benchmark" not in getattr(item, "fixturenames", ()):
                return None
            callspec = getattr(item, "callspec", None)
            if callspec is None or "tree_budget" not in callspec.params:
                return None
            return (item.parent, getattr(item, "originalname", item.name))

        start = 0
        while start < len(items):
            fam = family(items[start])
            end = start + 1
            while end < len(items) and fam is not None and family(items[end]) == fam:
                end += 1
            if fam is not None and end - start > 1:
                block = items[start:end]
                block.sort(key=lambda it: rank.get(it.callspec.params["tree_budget"], len(rank)))
                items[start:end] = block
            start = end

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Generator[None, Any, None]:
        """A failed test leaves no timing behind (table, compare, JSON)."""
        outcome = yield
        report = outcome.get_result()
        if report.failed:
            # timings of a test that failed (even after its benchmark) do not count; its
            # invalid requests stay, drawn apart in the report with their codes
            self.pending = [p for p in self.pending if not p.valid]
        self.samples.extend(self.pending)
        self.pending.clear()
        if report.when == "call" and report.passed:
            self.passed.add(item.nodeid)
        if report.failed:
            self.failed.add(item.nodeid)
            fixture = getattr(item, "funcargs", {}).get("benchmark")
            if fixture is not None:
                discard_timings(fixture)

    @pytest.hookimpl(optionalhook=True)
    def pytest_benchmark_update_json(
        self, config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]
    ) -> None:
        """Keep only benchmarks of tests that passed (not failed, not interrupted)."""
        strip_failed(output_json, self.failed)
        keep_passed(output_json, self.passed - self.failed)
        runtime = self._runtime()
        lossy = {**self.lossy, **getattr(runtime, "lossy_budgets", {})}
        if lossy:
            strip_budgets(output_json, lossy)

    @pytest.hookimpl(optionalhook=True)
    def pytest_benchmark_update_machine_info(
        self, config: pytest.Config, machine_info: dict[str, Any]
    ) -> None:
        """Add the endpoint (no secrets), model, dialect and the server's model list."""
        settings = self._settings()
        if settings is None:
            return
        runtime = self._runtime()
        if (
            runtime is None
            and config.getoption("benchmark_compare", None)
            and not _xdist_active(config)
        ):
            # Comparing needs the same description as the saved run, which was
            # written with the endpoint up: start it now instead of on first use.
            from pytest_ddtree import plugin
            from pytest_ddtree.client import EndpointError

            try:
                runtime = plugin._ensure_runtime(config)
            except EndpointError as exc:
                raise pytest.UsageError(f"ddtree: {exc}") from None
        models: Any = None
        model = settings.model
        if runtime is not None:
            model = runtime.model
            try:
                models = [{"id": m} for m in runtime.client.list_models()]
            except Exception:
                # machine_info is descriptive; a failed probe must not fail the run.
                models = None
        machine_info["ddtree"] = machine_info_extra(
            endpoint=settings.endpoint,
            model=model,
            # The configured dialect: the detected one is known only after the
            # first response, which would make saved and current runs differ.
            dialect=settings.dialect,
            server_models=models,
            embedded=settings.embedded or settings.endpoint is None,
            embedded_setup={
                "simulated_latency": settings.reference_latency,
                "faults": ",".join(settings.reference_faults) or "none",
            },
        )

    @pytest.hookimpl(hookwrapper=True, optionalhook=True)
    def pytest_benchmark_group_stats(
        self, config: pytest.Config, benchmarks: Any, group_by: str
    ) -> Generator[None, Any, None]:
        """Show budget groups in numeric order (16, 32, ..., 1024), not as strings."""
        outcome = yield
        groups = outcome.get_result()
        if isinstance(groups, list):
            outcome.force_result(sorted(groups, key=lambda pair: _group_sort_key(pair[0])))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """Controller side of xdist: take over a finished worker's samples."""
        payload = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT_KEY)
        if not isinstance(payload, Mapping):
            return
        got = [SweepSample.from_json(s, source="xdist worker") for s in payload.get("samples", [])]
        self.samples = merge_samples(self.samples, got)
        meta = payload.get("metadata")
        if isinstance(meta, Mapping) and not self.metadata:
            self.metadata = dict(meta)
        self.failed.update(str(n) for n in payload.get("failed", []))
        for item in payload.get("lossy", []):
            if isinstance(item, list) and len(item) == 2:
                self.lossy.setdefault(item[0], str(item[1]))
        self.diagnoses.extend(
            dict(d) for d in payload.get("diagnoses", []) if isinstance(d, Mapping)
        )

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_sessionfinish(
        self, session: pytest.Session, exitstatus: int
    ) -> Generator[None, Any, None]:
        """Before pytest-benchmark and JUnit finish: prune timings, then check and report.

        pytest-benchmark writes its JSON in a hook wrapper of its own; this one
        runs first, so a benchmark interrupted by Ctrl-C (no rounds: it would
        crash the JSON writer) or belonging to a failed gated test is gone by then.
        """
        self._prune_benchmarks(session.config)
        self._finish_session(session)
        yield

    def _prune_benchmarks(self, config: pytest.Config) -> None:
        bench_session = getattr(config, "_benchmarksession", None)
        benches = getattr(bench_session, "benchmarks", None)
        if not isinstance(benches, list):
            return
        keep = self.passed - self.failed

        def has_rounds(bench: Any) -> bool:
            try:
                return bool(bench.stats.stats.data)
            except AttributeError:
                return True  # not the shape we know: leave it to pytest-benchmark

        benches[:] = [
            b
            for b in benches
            if has_rounds(b)
            and (
                getattr(b, "fullname", None) in keep
                or getattr(b, "fullname", None) not in self.gated
            )
        ]

    def _finish_session(self, session: pytest.Session) -> None:
        """Hand samples to the controller (worker) or check and report the sweep."""
        config = session.config
        self.pending.clear()
        # a signal counts even when a second one muddled pytest's exit status
        if session.exitstatus == pytest.ExitCode.INTERRUPTED or _guard.interrupted():
            self.interrupted = True
            self.metadata["interrupted"] = True
            notes = list(self.metadata.get("notes", []))
            notes.append(
                "interrupted: this is a partial run; tests that did not finish are left out "
                "and the recommendation is not final"
            )
            self.metadata["notes"] = notes
        runtime = self._runtime()
        if runtime is not None and self.metadata:
            self.metadata["dialect"] = runtime.dialect
        if runtime is not None:  # retries, 429s and counter failures: never hidden
            _guard.transport_metadata(self.metadata, runtime)
        if runtime is not None:
            self.diagnoses.extend(
                dict(d) for d in getattr(runtime, "diagnoses", []) if isinstance(d, Mapping)
            )
            self.lossy.update(getattr(runtime, "lossy_budgets", {}))
        if _is_worker(config):
            config.workeroutput[WORKER_OUTPUT_KEY] = {  # type: ignore[attr-defined]
                "lossy": [[b, str(n)] for b, n in self.lossy.items()],
                "samples": [s.to_json() for s in self.samples],
                "metadata": self.metadata,
                "failed": sorted(self.failed),
                "diagnoses": json.loads(json.dumps(self.diagnoses, default=str)),
            }
            return
        if self.lossy:
            # a budget shown lossy and therefore never timed still belongs in the report
            timed = {s.tree_budget for s in self.samples}
            for budget, where in self.lossy.items():
                if budget not in timed:
                    self.samples.append(
                        SweepSample(
                            tree_budget=budget,
                            prompt_id="(losslessness)",
                            round=0,
                            valid=False,
                            codes=("not-lossless",),
                            messages=(f"not timed: the output changed at this budget ({where})",),
                        )
                    )
        if not self.samples:
            settings = self._settings()
            if settings is not None and settings.report_dir and self.passed | self.failed:
                self.report_lines.append(
                    f"ddtree: no sweep report in {settings.report_dir}: no timed request "
                    "counted in this run"
                )
            return
        if self.lossy:
            # a budget shown lossy anywhere in the session is invalid for the sweep
            self.samples = [
                replace(s, valid=False, codes=(*s.codes, "not-lossless"))
                if s.tree_budget in self.lossy and "not-lossless" not in s.codes
                else s
                for s in self.samples
            ]
        self.budget_ignored = self._check_budget_ignored()
        if self.budget_ignored:
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            self._report_sweep_failure(config, self.budget_ignored)
        settings = self._settings()
        seed = settings.sweep_seed if settings is not None else 0
        self.summary = summarize(self.samples, seed=seed)
        if self.interrupted:
            rec = self.summary.recommendation
            self.summary = replace(
                self.summary,
                recommendation=replace(
                    rec, partial=True, message=f"Partial run (interrupted): {rec.message}"
                ),
            )
        if settings is not None and settings.report_dir:
            # the report writers load jsonschema: only when a report is written
            from pytest_ddtree.report import write_report

            run = self._run(settings)
            try:
                paths = write_report(run, settings.report_dir, self.summary)
            except (OSError, ValueError) as exc:
                self.report_lines.append(
                    f"ddtree: could not write the report to {settings.report_dir}: {exc}"
                )
            else:
                self.report_lines.append(
                    f"ddtree: sweep report written: {paths.json}, {paths.html}"
                )

    def _report_sweep_failure(self, config: pytest.Config, violations: list[Violation]) -> None:
        """Log a failed pseudo-test ``ddtree::sweep``, so the failure reaches the final
        counts and JUnit XML (CI dashboards read those, not the exit code alone)."""
        report = pytest.TestReport(
            nodeid="ddtree::sweep",
            location=("ddtree", None, "sweep"),
            keywords={},
            outcome="failed",
            longrepr=InvariantError(violations).render(),
            when="call",
            duration=0.0,
        )
        config.hook.pytest_runtest_logreport(report=report)

    def _run(self, settings: Settings) -> SweepRun:
        meta = dict(self.metadata)
        meta["seed"] = settings.sweep_seed
        notes = list(meta.get("notes", []))
        notes.extend(f"{v.code}: {v.message}" for v in self.budget_ignored)
        if notes:
            meta["notes"] = notes
        return SweepRun(
            samples=list(self.samples),
            metadata=meta,
            seed=settings.sweep_seed,
            diagnoses=json.loads(json.dumps(self.diagnoses, default=str)),
        )

    def _check_budget_ignored(self) -> list[Violation]:
        try:
            from pytest_ddtree.invariants import BudgetSample, check_budget_ignored
        except ImportError:
            return []
        settings = self._settings()
        if settings is not None and "budget-ignored" in settings.skip_checks:
            return []
        usable = [
            BudgetSample(
                tree_budget=s.tree_budget,
                decode_tokens_per_second=s.decode_tokens_per_second,
                mean_acceptance_length=s.mean_acceptance_length,
                prompt_id=s.prompt_id,
                echoed_tree_budget=s.echoed_tree_budget,
            )
            for s in self.samples
            if s.valid and s.tree_budget is not None and s.round >= 0
        ]
        return list(check_budget_ignored(usable))

    def pytest_terminal_summary(
        self, terminalreporter: Any, exitstatus: int, config: pytest.Config
    ) -> None:
        """The sweep table, the recommendation, and any sweep-level violation."""
        if _is_worker(config):
            return
        if not self.samples:
            for line in self.report_lines:
                terminalreporter.write_line(line)
            return
        summary = self.summary
        if summary is None:
            settings = self._settings()
            seed = settings.sweep_seed if settings is not None else 0
            summary = summarize(self.samples, seed=seed)
        terminalreporter.write_sep("-", "pytest-ddtree budget sweep")
        notes: list[str] = []
        if self.interrupted:
            notes.append("interrupted: partial run, the recommendation is not final")
        if self.smoke_failure:
            notes.append(f"benchmarks skipped: {self.smoke_failure}")
        from pytest_ddtree.report import table_lines

        for line in table_lines(summary, notes=notes):
            terminalreporter.write_line(line)
        for v in self.budget_ignored:
            terminalreporter.write_line(f"FAILED sweep: [{v.code}] {v.message}", red=True)
        for line in self.report_lines:
            terminalreporter.write_line(line)


def register(config: pytest.Config) -> BenchHooks:
    """Register the hooks once (called from the plugin's ``pytest_configure``)."""
    existing = config.pluginmanager.get_plugin("ddtree-bench")
    if isinstance(existing, BenchHooks):
        return existing
    hooks = BenchHooks(config)
    config.pluginmanager.register(hooks, "ddtree-bench")
    return hooks
