"""pytest hooks and fixtures of pytest-ddtree.

Only wiring lives here: options come from ``settings.OPTIONS``, the session's
servers and clients from ``runtime``, the checks from ``invariants``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from pytest_ddtree import _guard
from pytest_ddtree.client import DDTreeClient, EndpointError
from pytest_ddtree.completion import Completion
from pytest_ddtree.runtime import Runtime, expectation_kwargs, start_runtime
from pytest_ddtree.settings import (
    OPTIONS,
    Settings,
    SettingsError,
    apply_marker,
    budget_id,
    resolve,
)
from pytest_ddtree.violation import InvariantError, Violation

if TYPE_CHECKING:
    # diagnose pulls in the invariants and their schemas: loaded only when a test uses them,
    # so a pytest run that never touches an endpoint does not pay for them
    from pytest_ddtree.diagnose import LosslessResult

SETTINGS_KEY = pytest.StashKey[Settings]()
RUNTIME_KEY = pytest.StashKey[Runtime]()
MARKED_KEY = pytest.StashKey[Settings]()

# Fixtures whose use means a test talks to the endpoint (so the runtime starts).
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
    }
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ddtree", "pytest-ddtree: speculative-decoding endpoints")
    for opt in OPTIONS:
        env = f" [env: {', '.join(opt.env)}]" if opt.env else ""
        default = f" [default: {opt.default}]" if opt.default is not None and not opt.flag else ""
        text = f"{opt.help}{default}{env}"
        if opt.flag:
            group.addoption(opt.cli, action="store_const", const=True, dest=opt.dest, help=text)
        elif opt.repeatable:
            group.addoption(opt.cli, action="append", dest=opt.dest, metavar=opt.metavar, help=text)
        else:
            group.addoption(opt.cli, dest=opt.dest, metavar=opt.metavar, help=text)
        if opt.repeatable:
            parser.addini(opt.ini, help=opt.help, type="linelist")
        else:
            parser.addini(opt.ini, help=opt.help, type="string")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "ddtree(budgets=None, max_tokens=None, min_tokens=None, api=None, enable_thinking=None, "
        "skip_checks=None, rounds=None, warmup_rounds=None, lossless=None): per-test "
        "pytest-ddtree settings",
    )
    cli = {opt.dest: config.getoption(opt.dest) for opt in OPTIONS}
    ini = {opt.ini: config.getini(opt.ini) for opt in OPTIONS}
    try:
        settings = resolve(cli, ini, os.environ)
        _check_codes(settings.skip_checks, settings.source_of("skip_checks"))
    except SettingsError as exc:
        raise pytest.UsageError(str(exc)) from None
    if settings.report_dir and not hasattr(config, "workerinput"):
        _check_report_dir(settings)
    config.stash[SETTINGS_KEY] = settings
    _guard.install()  # SIGTERM like Ctrl-C: the partial artefacts are still written
    from pytest_ddtree._bench_hooks import register as register_bench_hooks

    register_bench_hooks(config)


def _check_report_dir(settings: Settings) -> None:
    """A report directory that cannot be written stops the run now, not after it."""
    from pytest_ddtree.report import ensure_writable_dir

    assert settings.report_dir is not None
    problem = ensure_writable_dir(settings.report_dir)
    if problem:
        raise pytest.UsageError(
            f"invalid report {settings.report_dir!r} (from {settings.source_of('report_dir')}): "
            f"{problem}"
        )


def _check_codes(codes: tuple[str, ...], source: str) -> None:
    if not codes:
        return
    from pytest_ddtree.invariants import CODES

    for code in codes:
        if code not in CODES:
            raise SettingsError(
                f"invalid skip-check {code!r} (from {source}): known codes are "
                f"{', '.join(sorted(CODES))}"
            )


def pytest_unconfigure(config: pytest.Config) -> None:
    _guard.restore()
    runtime = config.stash.get(RUNTIME_KEY, None)
    if runtime is not None:
        runtime.close()
        del config.stash[RUNTIME_KEY]


def pytest_report_header(config: pytest.Config) -> list[str]:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        return []
    if settings.endpoint is None:
        where = "embedded reference server (started on first use"
        where += ", one per xdist worker)" if _xdist_active(config) else ")"
        if settings.reference_faults:
            where += f", faults: {','.join(settings.reference_faults)}"
    else:
        where = settings.endpoint
    budgets = (
        "server default (budget-mode none)"
        if settings.budget_mode == "none"
        else ",".join(map(str, settings.budgets)) + f" via {settings.budget_mode}"
    )
    lines = [
        f"ddtree: endpoint {where}; model {settings.model or 'first listed'}; "
        f"dialect {settings.dialect}; budgets {budgets}; tokenizer {settings.tokenizer}"
    ]
    if settings.skip_checks:
        lines.append(f"ddtree: WEAKENED run, checks skipped: {', '.join(settings.skip_checks)}")
    return lines


def _xdist_active(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) or hasattr(config, "workerinput")


def _needs_runtime(items: list[pytest.Item]) -> bool:
    return any(ENDPOINT_FIXTURES.intersection(getattr(i, "fixturenames", ())) for i in items)


def _ensure_runtime(config: pytest.Config) -> Runtime:
    runtime = config.stash.get(RUNTIME_KEY, None)
    if runtime is None:
        runtime = start_runtime(config.stash[SETTINGS_KEY])
        config.stash[RUNTIME_KEY] = runtime
    return runtime


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if config.option.collectonly or not _needs_runtime(session.items):
        return
    try:
        runtime = _ensure_runtime(config)
    except EndpointError as exc:
        raise pytest.UsageError(f"ddtree: {exc}") from None
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not hasattr(config, "workerinput"):
        reporter.write_line(
            f"ddtree: serving {runtime.settings.endpoint} model {runtime.model}; "
            f"tokenizer {runtime.tokenizer_source}"
            + (f"; baseline {runtime.settings.baseline_endpoint}" if runtime.baseline else "")
        )
        for note in runtime.notes:
            reporter.write_line(f"ddtree: {note}")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "tree_budget" not in metafunc.fixturenames:
        return
    try:
        settings = _marked_settings(metafunc.config, metafunc.definition)
    except pytest.UsageError:
        # reported once, cleanly, by pytest_collection_modifyitems
        settings = metafunc.config.stash[SETTINGS_KEY]
    if settings.budget_mode == "none":
        budgets: list[int | None] = [None]
    else:
        budgets = list(settings.budgets)
        if settings.budget_mode == "endpoints":
            budgets = [b for b in budgets if b in settings.budget_endpoints]
    metafunc.parametrize("tree_budget", budgets, ids=[budget_id(b) for b in budgets])


def _marked_settings(config: pytest.Config, node: pytest.Item) -> Settings:
    settings = config.stash[SETTINGS_KEY]
    runtime = config.stash.get(RUNTIME_KEY, None)
    if runtime is not None:
        settings = runtime.settings
    marker = node.get_closest_marker("ddtree")
    if marker is None:
        return settings
    if marker.args:
        raise pytest.UsageError(
            f"ddtree: @pytest.mark.ddtree takes keyword arguments only ({node.nodeid})"
        )
    # name the test function, not one of its parametrised instances
    where = node.nodeid.split("[", 1)[0]
    try:
        marked = apply_marker(settings, marker.kwargs, where)
        if "skip_checks" in marker.kwargs:
            _check_codes(marked.skip_checks, f"@pytest.mark.ddtree on {where}")
        return marked
    except SettingsError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # validate every marker once, at collection, so a typo stops the run up front
    for item in items:
        if item.get_closest_marker("ddtree") is not None:
            marked = _marked_settings(config, item)
            item.stash[MARKED_KEY] = marked
            if marked.budget_mode == "endpoints":
                missing = [b for b in marked.budgets if b not in marked.budget_endpoints]
                if missing:
                    raise pytest.UsageError(
                        f"ddtree: budgets {missing} of @pytest.mark.ddtree on {item.nodeid} "
                        "have no --ddtree-budget-endpoint"
                    )


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is not None and settings.skip_checks:
        terminalreporter.write_sep("-", "pytest-ddtree: weakened run", yellow=True)
        terminalreporter.write_line(
            f"checks skipped (--ddtree-skip-check): {', '.join(settings.skip_checks)}; "
            "results do not prove these invariants hold"
        )
    runtime = config.stash.get(RUNTIME_KEY, None)
    if runtime is None or settings is None or not runtime.client.requests_sent:
        return
    if settings.dialect == "auto":
        found = runtime.client.detected_dialect or "none (no speculation statistics seen)"
        terminalreporter.write_line(f"ddtree: statistics dialect detected: {found}")
    elif settings.dialect != "none" and not runtime.client.stats_seen:
        terminalreporter.write_line(
            f"ddtree: WARNING: --ddtree-dialect {settings.dialect} (from "
            f"{settings.source_of('dialect')}) found no statistics in "
            f"{runtime.client.requests_sent} response(s): the stats and budget checks did not "
            "run; try --ddtree-dialect auto",
            yellow=True,
        )
    for line in _guard.transport_lines(runtime):  # retries, 429s, counter failures
        terminalreporter.write_line(line, yellow=True)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def ddtree_runtime(pytestconfig: pytest.Config) -> Runtime:
    """The session's servers, clients, tokenizer and model (started once)."""
    try:
        return _ensure_runtime(pytestconfig)
    except EndpointError as exc:
        pytest.exit(f"ddtree: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


@pytest.fixture
def ddtree_settings(request: pytest.FixtureRequest, pytestconfig: pytest.Config) -> Settings:
    """Resolved settings with this test's ``@pytest.mark.ddtree`` overrides applied."""
    node: pytest.Item = request.node
    runtime = pytestconfig.stash.get(RUNTIME_KEY, None)
    marked = node.stash.get(MARKED_KEY, None)
    if marked is not None:
        return _marked_settings(pytestconfig, node) if runtime is not None else marked
    return runtime.settings if runtime is not None else pytestconfig.stash[SETTINGS_KEY]


@pytest.fixture(scope="session")
def ddtree_endpoint(ddtree_runtime: Runtime) -> str:
    """Base URL (ending in /v1) of the endpoint under test."""
    assert ddtree_runtime.settings.endpoint is not None
    return ddtree_runtime.settings.endpoint


@pytest.fixture(scope="session")
def ddtree_model(ddtree_runtime: Runtime) -> str:
    """The model id requests use."""
    return ddtree_runtime.model


@pytest.fixture(scope="session")
def ddtree_client(ddtree_runtime: Runtime) -> DDTreeClient:
    """The session's pooled client for the endpoint under test."""
    return ddtree_runtime.client


@pytest.fixture(scope="session")
def ddtree_baseline_client(ddtree_runtime: Runtime) -> DDTreeClient | None:
    """A client for the target-only baseline server, or None when there is none."""
    return ddtree_runtime.baseline


@pytest.fixture(scope="session")
def ddtree_counter(ddtree_runtime: Runtime) -> Any:
    """The token counter (tokenizer.json, server /tokenize or approximation)."""
    return ddtree_runtime.counter


@pytest.fixture
def ddtree_check(
    request: pytest.FixtureRequest, ddtree_settings: Settings, ddtree_runtime: Runtime
) -> Callable[..., None]:
    """``ddtree_check(completion, **expect)``: assert every invariant, with marker defaults.

    On failure the request is replayed once on the target-only baseline and
    the verdict (prompt/template or speculative decoding) is appended to the
    message and recorded as the JUnit property ``ddtree_diagnosis``.
    """
    from pytest_ddtree.invariants import check as run_checks

    def check(completion: Completion, **expect: Any) -> None:
        __tracebackhide__ = True
        kwargs = expectation_kwargs(ddtree_settings, dict(expect), ddtree_runtime.counter)
        violations = run_checks(completion, counter=ddtree_runtime.counter, **kwargs)
        if violations:
            _fail_with_diagnosis(request, ddtree_runtime, completion, violations, kwargs)

    return check


def _fail_with_diagnosis(
    request: pytest.FixtureRequest,
    runtime: Runtime,
    completion: Completion,
    violations: list[Violation],
    kwargs: dict[str, Any],
) -> None:
    __tracebackhide__ = True
    from pytest_ddtree.invariants import check as run_checks

    def judge(other: Completion) -> list[Violation]:
        return run_checks(other, counter=runtime.counter, **kwargs)

    diagnosis = runtime.diagnose(completion, violations, judge, nodeid=request.node.nodeid)
    request.node.user_properties.append(("ddtree_diagnosis", diagnosis.verdict))
    request.node.user_properties.append(
        ("ddtree_codes", ",".join(sorted({v.code for v in violations})))
    )
    codes = list(dict.fromkeys(v.code for v in violations))
    count = (
        f"{len(violations)} output-quality invariant(s) broken"
        if len(codes) == len(violations)
        else f"{len(violations)} violations of {len(codes)} output-quality invariant(s)"
    )
    raise InvariantError(
        violations, header=f"{count}: {', '.join(codes)}", footer=diagnosis.render()
    )


@pytest.fixture
def ddtree_lossless(
    request: pytest.FixtureRequest, ddtree_settings: Settings, ddtree_runtime: Runtime
) -> Callable[..., LosslessResult]:
    """``ddtree_lossless(prompt, *, max_tokens=None, prompt_id=None, budgets=None)``.

    Runs ``prompt`` at temperature 0 at every budget and on the baseline (or,
    without one, takes the lowest budget as the reference) and fails with the
    first divergence. ``--ddtree-lossless prefix:N`` tolerates divergence
    after N tokens; ``off`` skips the test.
    """

    def run(
        prompt: Any,
        *,
        max_tokens: int | None = None,
        prompt_id: str | None = None,
        budgets: list[int] | None = None,
        **extra: Any,
    ) -> LosslessResult:
        __tracebackhide__ = True
        from pytest_ddtree.diagnose import lossless_advice, run_lossless

        settings = ddtree_settings
        if settings.lossless.mode == "off":
            pytest.skip("losslessness not checked (--ddtree-lossless off)")
        points: list[int | None] = (
            [None] if settings.budget_mode == "none" else list(budgets or settings.budgets)
        )
        result, violations = run_lossless(
            ddtree_runtime.client,
            ddtree_runtime.baseline,
            prompt,
            points,
            settings.lossless,
            max_tokens=max_tokens or settings.max_tokens,
            counter=ddtree_runtime.counter,
            prompt_id=prompt_id,
            **extra,
        )
        if result is None:
            raise InvariantError(violations)
        if result.tolerated:
            request.node.user_properties.append(
                ("ddtree_lossless_tolerated", ",".join(map(str, result.tolerated)))
            )
        if violations:
            for budget in result.divergences:
                ddtree_runtime.lossy_budgets.setdefault(budget, request.node.nodeid)
                ddtree_runtime.diagnoses.append(
                    {
                        "nodeid": request.node.nodeid,
                        "tree_budget": budget,
                        "prompt_id": prompt_id,
                        "codes": ["not-lossless"],
                        "verdict": "speculation",
                        "title": "speculative decoding",
                        "reason": f"the output differs from the {result.reference_label}",
                        "advice": lossless_advice(ddtree_runtime.baseline is not None),
                    }
                )
            request.node.user_properties.append(("ddtree_diagnosis", "speculation"))
            raise InvariantError(
                violations,
                header=f"not lossless: {len(result.divergences)} of {len(result.outputs)} "
                f"budget(s) change the temperature-0 output (reference: {result.reference_label})",
                footer="diagnosis: speculative decoding - "
                + lossless_advice(ddtree_runtime.baseline is not None),
            )
        return result

    return run


@pytest.fixture
def ddtree_determinism(ddtree_settings: Settings, ddtree_runtime: Runtime) -> Callable[..., None]:
    """``ddtree_determinism(prompt, other_prompt, *, tree_budget=None, max_tokens=None)``.

    Sends ``prompt`` twice, then ``other_prompt``, then ``prompt`` again, all
    at temperature 0: every run of ``prompt`` must give the same output
    (``nondeterministic`` / ``state-leak`` otherwise).
    """

    def run(
        prompt: Any,
        other_prompt: Any,
        *,
        tree_budget: int | None = None,
        max_tokens: int | None = None,
        **extra: Any,
    ) -> None:
        __tracebackhide__ = True
        from pytest_ddtree.diagnose import run_state_check

        violations = run_state_check(
            ddtree_runtime.client,
            prompt,
            other_prompt,
            max_tokens=max_tokens or ddtree_settings.max_tokens,
            tree_budget=tree_budget,
            **extra,
        )
        if violations:
            raise InvariantError(violations)

    return run
