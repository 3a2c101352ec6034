"""Collection: the budget points of a test, marker checks and the seeded visiting order."""

from __future__ import annotations

import pytest

from pytest_ddtree.core.settings import Settings, budget_id, temperature_id
from pytest_ddtree.pytest_plugin.session import DDTreeSession

#: The parameter (and fixture) of a timed test's sampling temperature.
TEMPERATURE_PARAM = "ddtree_temperature"
#: The parameter (and fixture) of a benchmark test's pass over the sweep prompts.
PASS_PARAM = "ddtree_sweep_pass"


def parametrize_budgets(metafunc: pytest.Metafunc, session: DDTreeSession) -> None:
    """One test per budget: ``tree_budget=64``, or ``tree_budget=server-default``."""
    try:
        settings = session.settings_for(metafunc.definition)
    except pytest.UsageError:
        settings = session.settings  # reported once, cleanly, at collection's end
    budgets = list(settings.requested_budgets)
    metafunc.parametrize("tree_budget", budgets, ids=[budget_id(b) for b in budgets])


def parametrize_temperatures(metafunc: pytest.Metafunc, settings: Settings) -> None:
    """One timed test per temperature (``temperature=0.7``) when more than 0 is asked for.

    With ``--ddtree-temperatures 0`` (the default) nothing is parametrised: ids and
    pytest-benchmark groups stay as they were, so saved benchmarks still compare.
    """
    if settings.temperatures == (0.0,):
        return
    temps = list(settings.temperatures)
    metafunc.parametrize(TEMPERATURE_PARAM, temps, ids=[temperature_id(t) for t in temps])


def racing_passes(settings: Settings) -> int:
    """The passes a benchmark test of these settings is collected for (1: not parametrised).

    Only an adaptive sweep of two budgets or more races its benchmark tests, and only a
    race can use a second pass: it runs for the budgets still racing.
    """
    races = settings.sweep == "adaptive" and len(settings.requested_budgets) >= 2
    return settings.sweep_passes if races else 1


def parametrize_passes(metafunc: pytest.Metafunc, session: DDTreeSession) -> None:
    """Benchmark tests of a race, once per pass over the sweep prompts (``pass=2``).

    A test of a later pass runs only while its budget is racing (see
    :mod:`~pytest_ddtree.measure.sweep.benchrace`); with one pass nothing is
    parametrised and ids stay as they were.
    """
    if "tree_budget" not in metafunc.fixturenames:
        return
    try:
        settings = session.settings_for(metafunc.definition)
    except pytest.UsageError:
        settings = session.settings  # reported once, cleanly, at collection's end
    passes = racing_passes(settings)
    if passes > 1:
        numbers = list(range(1, passes + 1))
        metafunc.parametrize(PASS_PARAM, numbers, ids=[f"pass={n}" for n in numbers])


def check_markers(items: list[pytest.Item], session: DDTreeSession) -> None:
    """Validate every marker once, at collection, so a typo stops the run up front."""
    for item in items:
        if item.get_closest_marker("ddtree") is None:
            continue
        marked = session.settings_for(item)
        if marked.budget_mode == "endpoints":
            missing = [b for b in marked.budgets if b not in marked.budget_endpoints]
            if missing:
                raise pytest.UsageError(
                    f"ddtree: budgets {missing} of @pytest.mark.ddtree on {item.nodeid} "
                    "have no --ddtree-budget-endpoint"
                )


def prompt_of(item: pytest.Item) -> str:
    """A benchmark test's parameters other than its budget and pass (its prompt, in a
    sweep)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return ""
    own = ("tree_budget=", "pass=")
    return "-".join(p for p in str(callspec.id).split("-") if not p.startswith(own))


def _pass_of(params: dict[str, object]) -> int:
    """A benchmark test's pass over the sweep prompts (1 when not collected per pass)."""
    value = params.get(PASS_PARAM, 1)
    return value if isinstance(value, int) else 1


def order_benchmarks(items: list[pytest.Item], settings: Settings) -> None:
    """Visit each benchmark test's budgets in the seeded sweep order (in place).

    With ``--ddtree-sweep adaptive`` a test function's benchmarks also go pass by
    pass, and within a pass prompt by prompt (every budget of one parameter set, then
    the next), as the race takes them (:mod:`~pytest_ddtree.measure.sweep.benchrace`).
    """
    adaptive = settings.sweep == "adaptive"
    if (settings.sweep_order == "fixed" and not adaptive) or len(settings.budgets) < 2:
        return
    from pytest_ddtree.measure.sweep import SweepPlan

    order = SweepPlan(settings.budgets, ("-",), seed=settings.sweep_seed).budget_order(0)
    rank: dict[object, int] = {b: i for i, b in enumerate(order)}

    def family(item: pytest.Item) -> tuple[object, str] | None:
        if not isinstance(item, pytest.Function) or "ddtree_benchmark" not in item.fixturenames:
            return None
        callspec = getattr(item, "callspec", None)
        if callspec is None or "tree_budget" not in callspec.params:
            return None
        return (item.parent, item.originalname)

    temps: dict[object, int] = {t: i for i, t in enumerate(settings.temperatures)}

    def budget_rank(item: pytest.Item) -> tuple[int, int, int]:
        # one temperature's budgets together, in the configured temperature order, and
        # within it one pass over the prompts after the other
        assert isinstance(item, pytest.Function)
        params = item.callspec.params
        fixed = settings.sweep_order == "fixed"  # sorted() is stable: the configured order stays
        return (
            temps.get(params.get(TEMPERATURE_PARAM, 0.0), 0),
            _pass_of(params),
            0 if fixed else rank.get(params["tree_budget"], len(rank)),
        )

    def prompt_rank(block: list[pytest.Item]) -> dict[str, int]:
        firsts: dict[str, int] = {}
        for item in block:
            firsts.setdefault(prompt_of(item), len(firsts))
        return firsts

    start = 0
    while start < len(items):
        fam = family(items[start])
        end = start + 1
        while end < len(items) and fam is not None and family(items[end]) == fam:
            end += 1
        if fam is not None and end - start > 1:
            block = items[start:end]
            if adaptive:
                prompts = prompt_rank(block)
                block.sort(
                    key=lambda it: (*budget_rank(it)[:2], prompts[prompt_of(it)], budget_rank(it))
                )
            else:
                block.sort(key=budget_rank)
            items[start:end] = block
        start = end
