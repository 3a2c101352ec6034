"""pytest hooks and fixtures of pytest-ddtree: each one a short delegate.

The options come from ``core.options.OPTIONS``; the run's records and the
end-of-session analysis from the ``session`` object; the fixtures return the
typed objects of ``fixtures``; pytest-benchmark and pytest-xdist interop live
in ``integrations`` and are registered only when those plugins are active.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pluggy
import pytest

from pytest_ddtree.core.options import OPTIONS
from pytest_ddtree.core.settings import Settings, SettingsError
from pytest_ddtree.pytest_plugin import _guard
from pytest_ddtree.pytest_plugin.runtime import Runtime
from pytest_ddtree.pytest_plugin.session import (
    RUNTIME_KEY,
    SESSION_KEY,
    SETTINGS_KEY,
    DDTreeSession,
    configured_settings,
    ensure_runtime,
    needs_runtime,
)
from pytest_ddtree.wire.client import DDTreeClient, EndpointError

if TYPE_CHECKING:
    # the fixture objects pull in the sweep and the invariants: loaded when a test uses them
    from pytest_ddtree.measure.load.tester import LoadTester
    from pytest_ddtree.pytest_plugin import fixtures
    from pytest_ddtree.wire.tokens import TokenCounter

MARKER_HELP = (
    "ddtree(budgets=None, max_tokens=None, min_tokens=None, api=None, enable_thinking=None, "
    "skip_checks=None, rounds=None, warmup_rounds=None, lossless=None): per-test "
    "pytest-ddtree settings"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ddtree", "pytest-ddtree: speculative-decoding endpoints")
    for opt in OPTIONS:
        env = f" [env: {', '.join(opt.env)}]" if opt.env else ""
        default = f" [default: {opt.default}]" if opt.default is not None and not opt.flag else ""
        # argparse %-formats help strings: a literal % (goodput=95%) must be doubled
        text = f"{opt.help}{default}{env}".replace("%", "%%")
        if opt.flag:
            group.addoption(opt.cli, action="store_const", const=True, dest=opt.dest, help=text)
        elif opt.repeatable:
            group.addoption(opt.cli, action="append", dest=opt.dest, metavar=opt.metavar, help=text)
        else:
            group.addoption(opt.cli, dest=opt.dest, metavar=opt.metavar, help=text)
        if opt.repeatable:
            parser.addini(opt.ini, help=opt.help, type="linelist")
        elif opt.path:
            parser.addini(opt.ini, help=opt.help, type="paths")
        else:
            parser.addini(opt.ini, help=opt.help, type="string")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Declare the plugin's own hooks (``pytest_ddtree_check``)."""
    from pytest_ddtree.pytest_plugin import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


_BUNDLED_SUITE = pytest.StashKey[bool]()
# the run's ini file is the bundled suite's own (`pytest example_suite` in a clone)
_SUITE_INI_FILE = pytest.StashKey[bool]()


def pytest_load_initial_conftests(early_config: pytest.Config, args: list[str]) -> None:
    # `pytest --pyargs pytest_ddtree.suite` reads the user's ini file, not the suite's: the
    # suite's addopts go before the user's, as pytest puts an ini file's before the command's
    from pytest_ddtree.pytest_plugin import bundle

    ns = early_config.known_args_namespace
    inipath = early_config.inipath
    own_ini = inipath is not None and inipath.resolve() == bundle.SUITE_INI
    suite = not own_ini and bundle.targets_suite(
        ns.file_or_dir, ns.pyargs, early_config.invocation_params.dir
    )
    early_config.stash[_BUNDLED_SUITE] = suite
    early_config.stash[_SUITE_INI_FILE] = own_ini
    if suite:
        addopts = bundle.suite_addopts()
        early_config.pluginmanager.consider_preparse(addopts, exclude_only=True)
        args[:0] = addopts


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    if getattr(config.option, "help", False):
        # --help lists the options; a bad value in an ini file or the environment fails the
        # run that uses it, never the help of every project that installs the plugin
        return
    try:
        own_ini = config.stash.get(_SUITE_INI_FILE, False)
        if config.stash.get(_BUNDLED_SUITE, False) or own_ini:
            # the suite's settings are its defaults, under the environment, whether its
            # pytest.ini is read as the ini file (a clone) or beside the user's (--pyargs)
            from pytest_ddtree.pytest_plugin.bundle import suite_ini

            settings = configured_settings(config, suite_ini(), suite_is_ini=own_ini)
        else:
            settings = configured_settings(config)
    except SettingsError as exc:
        raise pytest.UsageError(str(exc)) from None
    if settings.report and not hasattr(config, "workerinput"):
        _check_report_dir(settings)
    settings = _check_adaptive_alone(config, settings)
    config.stash[SETTINGS_KEY] = settings
    _guard.install()  # SIGTERM like Ctrl-C: the partial artefacts are still written
    session = config.stash[SESSION_KEY] = DDTreeSession(config, settings)
    if not config.option.collectonly:
        session.probe_machine("before")
    from pytest_ddtree.pytest_plugin.integrations import register

    register(config, session)


def _check_adaptive_alone(config: pytest.Config, settings: Settings) -> Settings:
    """An adaptive sweep races in one process: xdist workers cannot share one race.

    The default (adaptive) becomes exhaustive under xdist; an adaptive sweep asked for
    explicitly there is a usage error.
    """
    workers = getattr(config.option, "numprocesses", None)
    if settings.sweep != "adaptive" or not (workers or hasattr(config, "workerinput")):
        return settings
    if settings.source_of("sweep") == "default":
        return settings.with_overrides(sweep="exhaustive")
    raise pytest.UsageError(
        f"invalid sweep 'adaptive' (from {settings.source_of('sweep')}): under "
        "pytest-xdist each worker would race on its own share of the requests, and the "
        "workers' requests compete for the server; run the adaptive sweep without -n, or "
        "use --ddtree-sweep exhaustive"
    )


def _check_report_dir(settings: Settings) -> None:
    """A report directory that cannot be written stops the run now, not after it."""
    from pytest_ddtree.report import ensure_writable_dir

    assert settings.report is not None
    problem = ensure_writable_dir(settings.report)
    if problem:
        raise pytest.UsageError(
            f"invalid report {settings.report!r} (from {settings.source_of('report')}): {problem}"
        )


def pytest_unconfigure(config: pytest.Config) -> None:
    _guard.restore()
    runtime = config.stash.get(RUNTIME_KEY, None)
    if runtime is not None:
        runtime.close()
        del config.stash[RUNTIME_KEY]


def pytest_report_header(config: pytest.Config) -> list[str]:
    from pytest_ddtree.pytest_plugin.summary import header_lines

    session = config.stash.get(SESSION_KEY, None)
    return [] if session is None else header_lines(session)


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if config.option.collectonly or not needs_runtime(session.items):
        return
    ddtree = config.stash[SESSION_KEY]
    runtime = ddtree.start()
    if runtime is None:  # a worker whose host cannot reach the endpoint: its tests skip
        return
    from pytest_ddtree.pytest_plugin import budgetfield

    budgetfield.watch(runtime, session)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not hasattr(config, "workerinput"):
        from pytest_ddtree.pytest_plugin.summary import collection_lines

        for line in collection_lines(ddtree, runtime, session.items):
            reporter.write_line(line)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "tree_budget" in metafunc.fixturenames:
        from pytest_ddtree.pytest_plugin.collection import parametrize_budgets

        parametrize_budgets(metafunc, metafunc.config.stash[SESSION_KEY])
    if "ddtree_temperature" in metafunc.fixturenames:
        from pytest_ddtree.pytest_plugin.collection import parametrize_temperatures

        parametrize_temperatures(metafunc, metafunc.config.stash[SETTINGS_KEY])
    if "ddtree_sweep_pass" in metafunc.fixturenames:
        from pytest_ddtree.pytest_plugin.collection import parametrize_passes

        parametrize_passes(metafunc, metafunc.config.stash[SESSION_KEY])


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from pytest_ddtree.pytest_plugin.collection import check_markers, order_benchmarks

    session = config.stash[SESSION_KEY]
    check_markers(items, session)
    order_benchmarks(items, session.settings)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a test that needs the endpoint once the session found it down (never answered)
    or stalled (the stall guard tripped on the session's endpoint), or when this worker's
    host cannot reach it."""
    if not needs_runtime([item]):
        return
    from pytest_ddtree.pytest_plugin import skips

    unreachable = item.config.stash[SESSION_KEY].unreachable()
    if unreachable is not None:
        skips.skip(unreachable, skips.UNREACHABLE)
    runtime = item.config.stash.get(RUNTIME_KEY, None)
    if runtime is not None and runtime.client.guard.stopped:
        guard = runtime.client.guard
        why = skips.ENDPOINT_DOWN if guard.dead else skips.ENDPOINT_STALLED
        skips.skip(f"ddtree: not run, {why}: {guard.reason}", why)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pluggy.Result[Any], None]:
    outcome = yield
    report = outcome.get_result()
    item.config.stash[SESSION_KEY].end_phase(item, report)
    if report.skipped:
        from pytest_ddtree.pytest_plugin.skips import mark as mark_skip

        mark_skip(report, call.excinfo)
    if report.failed:
        from pytest_ddtree.pytest_plugin.summary import short_crash_line

        short_crash_line(report, call.excinfo, str(item.config.getoption("tbstyle", "")), item.path)
        from pytest_ddtree.pytest_plugin.repeats import mark

        mark(report, call.excinfo)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, pluggy.Result[Any], None]:
    # before pytest-benchmark and JUnit finish: they report what this leaves
    session.config.stash[SESSION_KEY].finish(session)
    yield
    # after the terminal summary: a tripped --benchmark-compare-fail gate fails the run
    from pytest_ddtree.pytest_plugin.summary import gate_exit_status

    session.exitstatus = gate_exit_status(session.config, session.exitstatus)


@pytest.hookimpl(tryfirst=True)  # before pytest-benchmark's tables: the answer comes first
def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    from pytest_ddtree.pytest_plugin.summary import write_summary

    write_summary(terminalreporter, config.stash[SESSION_KEY])


@pytest.hookimpl(trylast=True, specname="pytest_terminal_summary")
def pytest_terminal_summary_answer(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """The run's answer, last: after pytest-benchmark's tables, before pytest's own summary."""
    from pytest_ddtree.pytest_plugin.summary import write_answer

    write_answer(terminalreporter, config.stash[SESSION_KEY])


@pytest.hookimpl(wrapper=True, tryfirst=True, specname="pytest_terminal_summary")
def pytest_terminal_summary_repeats(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> Generator[None, None, None]:
    """Before pytest prints the failures: a failure repeated across tests (same codes,
    prompt, budget and evidence) is printed whole once, the later ones refer back to it
    (the terminal only: JUnit XML and the reports keep each whole; -vv prints all)."""
    if int(config.getoption("verbose", 0) or 0) < 2:  # pytest 7.4 has no get_verbosity
        from pytest_ddtree.pytest_plugin.repeats import fold

        fold(terminalreporter)
    yield


@pytest.hookimpl(wrapper=True, specname="pytest_terminal_summary")
def pytest_terminal_summary_gate(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> Generator[None, None, None]:
    """A tripped ``--benchmark-compare-fail`` gate: one line per regression, no traceback."""
    from pytest_ddtree.pytest_plugin.summary import take_regressions, write_regressions

    regressions = take_regressions(config)
    yield
    write_regressions(terminalreporter, regressions)


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def ddtree_runtime(pytestconfig: pytest.Config) -> Runtime:
    """The session's servers, clients, tokenizer and model (started once)."""
    try:
        return ensure_runtime(pytestconfig)
    except EndpointError as exc:
        session = pytestconfig.stash[SESSION_KEY]
        if session.is_worker:  # this host's alone (DDTreeSession.start): an exit would
            session.start_error = str(exc)  # break the controller
            from pytest_ddtree.pytest_plugin import skips

            skips.skip(session.unreachable() or "", skips.UNREACHABLE)
        pytest.exit(f"ddtree: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


@pytest.fixture
def ddtree_settings(request: pytest.FixtureRequest, pytestconfig: pytest.Config) -> Settings:
    """Resolved settings with this test's ``@pytest.mark.ddtree`` overrides applied."""
    return pytestconfig.stash[SESSION_KEY].settings_for(request.node)


@pytest.fixture(scope="session")
def ddtree_endpoint(ddtree_runtime: Runtime) -> str:
    """Base URL (ending in /v1) of the endpoint under test."""
    return ddtree_runtime.endpoint


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
def ddtree_counter(ddtree_runtime: Runtime) -> TokenCounter:
    """The token counter (tokenizer.json, server /tokenize or approximation)."""
    return ddtree_runtime.counter


@pytest.fixture
def _ddtree_gate(
    request: pytest.FixtureRequest, ddtree_settings: Settings, ddtree_runtime: Runtime
) -> fixtures.Gate:
    from pytest_ddtree.pytest_plugin.fixtures import Gate

    return Gate(request.config.stash[SESSION_KEY], ddtree_runtime, ddtree_settings, request)


@pytest.fixture
def ddtree_breakeven(_ddtree_gate: fixtures.Gate) -> fixtures.DDTreeBreakEven:
    """A :class:`~pytest_ddtree.DDTreeBreakEven`: ``ddtree_breakeven()`` measures the
    break-even map (speedup over the target alone by prompt depth, ``--ddtree-context``)."""
    from pytest_ddtree.pytest_plugin.fixtures import DDTreeBreakEven

    return DDTreeBreakEven(_ddtree_gate)


@pytest.fixture
def ddtree_check(_ddtree_gate: fixtures.Gate) -> fixtures.DDTreeCheck:
    """A :class:`~pytest_ddtree.DDTreeCheck`: ``ddtree_check(completion, **expect)``."""
    from pytest_ddtree.pytest_plugin.fixtures import DDTreeCheck

    return DDTreeCheck(_ddtree_gate)


@pytest.fixture
def ddtree_lossless(_ddtree_gate: fixtures.Gate) -> fixtures.DDTreeLossless:
    """A :class:`~pytest_ddtree.DDTreeLossless`: ``ddtree_lossless(prompt, ...)``."""
    from pytest_ddtree.pytest_plugin.fixtures import DDTreeLossless

    return DDTreeLossless(_ddtree_gate)


@pytest.fixture
def ddtree_distribution(_ddtree_gate: fixtures.Gate) -> fixtures.DDTreeDistribution:
    """A :class:`~pytest_ddtree.DDTreeDistribution`: ``(prompt, temperature=0.7)``."""
    from pytest_ddtree.pytest_plugin.fixtures import DDTreeDistribution

    return DDTreeDistribution(_ddtree_gate)


@pytest.fixture
def ddtree_determinism(_ddtree_gate: fixtures.Gate) -> fixtures.DDTreeDeterminism:
    """A :class:`~pytest_ddtree.DDTreeDeterminism`: ``(prompt, other_prompt, ...)``."""
    from pytest_ddtree.pytest_plugin.fixtures import DDTreeDeterminism

    return DDTreeDeterminism(_ddtree_gate)


@pytest.fixture
def ddtree_cold_warm_batched(_ddtree_gate: fixtures.Gate) -> fixtures.DDTreeColdWarmBatched:
    """A :class:`~pytest_ddtree.DDTreeColdWarmBatched`: ``(messages, *, concurrency=None)``."""
    from pytest_ddtree.pytest_plugin.fixtures import DDTreeColdWarmBatched

    return DDTreeColdWarmBatched(_ddtree_gate)


@pytest.fixture
def ddtree_temperature() -> float:
    """The sampling temperature of a timed test: one of ``--ddtree-temperatures``, by which
    tests using ``ddtree_benchmark``, ``ddtree_sweep`` or ``ddtree_load`` are parametrised
    (``temperature=0.7`` in their ids); 0 when only 0 is asked for."""
    return 0.0


@pytest.fixture
def ddtree_sweep_pass() -> int:
    """The pass over the sweep prompts of a raced benchmark test (``pass=2`` in its id;
    ``--ddtree-sweep-passes``); 1 when benchmark tests are not collected per pass."""
    return 1


@pytest.fixture
def ddtree_benchmark(
    request: pytest.FixtureRequest,
    benchmark: Any,
    _ddtree_gate: fixtures.Gate,
    ddtree_temperature: float,
    ddtree_sweep_pass: int,
) -> fixtures.DDTreeBenchmark:
    """A :class:`~pytest_ddtree.DDTreeBenchmark`: ``ddtree_benchmark(prompt, ...)``."""
    from pytest_ddtree.pytest_plugin.fixtures import DDTreeBenchmark

    budget = (
        request.getfixturevalue("tree_budget") if "tree_budget" in request.fixturenames else None
    )
    return DDTreeBenchmark(
        _ddtree_gate, benchmark, budget, ddtree_temperature, pass_=ddtree_sweep_pass
    )


@pytest.fixture
def ddtree_sweep(_ddtree_gate: fixtures.Gate, ddtree_temperature: float) -> fixtures.DDTreeSweep:
    """A :class:`~pytest_ddtree.DDTreeSweep`: ``ddtree_sweep(prompts, ...)``."""
    from pytest_ddtree.pytest_plugin.fixtures import DDTreeSweep

    return DDTreeSweep(_ddtree_gate, ddtree_temperature)


@pytest.fixture
def ddtree_load(_ddtree_gate: fixtures.Gate, ddtree_temperature: float) -> LoadTester:
    """A :class:`~pytest_ddtree.LoadTester`: ``ddtree_load(prompts, concurrencies=...)``."""
    from pytest_ddtree.pytest_plugin.fixtures.load import load_tester

    return load_tester(_ddtree_gate, ddtree_temperature)
