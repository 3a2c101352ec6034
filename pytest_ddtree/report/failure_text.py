"""The failures of a timed benchmark or sweep, in words: the header and footer of each
``InvariantError`` the timing fixtures raise (a sampling check that found the sampler deaf, a
budget not lossless, a failed smoke request, invalid responses in a sweep)."""

from __future__ import annotations

from collections.abc import Callable

from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.core.violation import InvariantError, Violation, codes_of
from pytest_ddtree.measure.sweep import SweepSummary
from pytest_ddtree.measure.timed import Failure
from pytest_ddtree.wire.completion import Completion

__all__ = [
    "FIX_FIRST",
    "lossy_error",
    "sampling_error",
    "smoke_error",
    "sweep_error",
    "sweep_smoke_error",
]


def sampling_error(found: list[Violation], temperature: float) -> InvariantError:
    return InvariantError(
        found,
        header=f"sampling check before timing at temperature {temperature:g}: nothing timed",
        footer="diagnosis: serving stack - the request's sampling parameters did not reach "
        "the sampler; fix the server, or pass --ddtree-skip-check "
        f"{found[0].code} to time it anyway (a weakened run)",
    )


def lossy_error(budget: int | None, shown_by: str) -> InvariantError:
    return InvariantError(
        [
            Violation(
                "not-lossless",
                f"tree_budget {budget_label(budget)} changed the temperature-0 "
                "output earlier in this session, so its timings would measure a "
                "different computation: not timed",
                {"shown by": shown_by},
                "",
            )
        ],
        footer="diagnosis: speculative decoding - the tree verification must not "
        "change the output; fix it before timing this budget",
    )


#: what to fix first after a failed smoke request, by the layer its diagnosis blamed
FIX_FIRST = {
    "template": "fix the prompt, its expectations or the chat template first (the target-only "
    "baseline fails the same way)",
}


def smoke_error(
    failure: Failure,
    budget: int | None,
    footer: Callable[[Completion, list[Violation]], str],
    blame: str | None = None,
) -> tuple[str, InvariantError]:
    """The benchmark's failed smoke request: why the session's later benchmarks are skipped
    (to be completed with the test's id), and the error of this test. ``blame``: the layer
    the diagnosis blamed, which says what to fix first (the endpoint unless it is the
    prompt's)."""
    completion, violations = failure
    codes = codes_of(violations)
    sent = "the smallest budget" if budget is not None else "the server's default budget"
    fix = FIX_FIRST.get(blame or "", "fix the endpoint first")
    why = (
        f"({codes}; the smoke request is sent once per prompt, at {sent}, "
        f"tree_budget={budget_label(budget)}); {fix}"
    )
    header = (
        f"smoke request before timing (tree_budget={budget_label(budget)}, "
        f"prompt={completion.request.prompt_id}): {len(violations)} output-quality "
        "invariant(s) broken. No benchmark of this session will run until the "
        "outputs are valid"
    )
    return why, InvariantError(violations, header=header, footer=footer(*failure))


def sweep_smoke_error(
    failures: list[Failure], budget: int, footer: Callable[[Completion, list[Violation]], str]
) -> InvariantError:
    """The sweep's smoke requests broke invariants: nothing was timed."""
    bad = [v for _, violations in failures for v in violations]
    return InvariantError(
        bad,
        header=(
            f"smoke requests before the sweep (tree_budget={budget}): "
            f"{len(bad)} output-quality invariant(s) broken; nothing was timed"
        ),
        footer=footer(*failures[0]),
    )


def sweep_error(
    failures: list[Failure],
    summary: SweepSummary,
    footer: Callable[[Completion, list[Violation]], str],
) -> InvariantError:
    """Invalid responses in a sweep, by budget."""
    per_budget = ", ".join(
        f"{budget_label(b.tree_budget)}: {', '.join(sorted(b.codes))}"
        for b in summary.budgets
        if not b.all_valid
    )
    return InvariantError(
        [v for _, vs in failures for v in vs],
        header=f"sweep has invalid responses ({per_budget})",
        footer=footer(*failures[0]),
    )
