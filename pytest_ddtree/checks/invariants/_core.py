"""``check`` and ``assert_valid``: every single-completion check in one call."""

from __future__ import annotations

from typing import Any

from pytest_ddtree.checks.invariants._accounting import (
    check_early_stop,
    check_empty,
    check_finish,
    check_usage,
    overrun_after_eos,
)
from pytest_ddtree.checks.invariants._context import Context
from pytest_ddtree.checks.invariants._logprobs import check_logprobs
from pytest_ddtree.checks.invariants._schema import check_schema
from pytest_ddtree.checks.invariants._stats import check_stats
from pytest_ddtree.checks.invariants._stops import check_stop_sequences
from pytest_ddtree.checks.invariants._structured import check_response_format, check_tool_calls
from pytest_ddtree.checks.invariants._text import (
    check_degenerate,
    check_non_printable,
    check_reasoning,
    check_role_leak,
    check_special_tokens,
)
from pytest_ddtree.checks.invariants._transport import check_encoding, check_http, check_stream
from pytest_ddtree.core.expectation import DEFAULT_EXPECTATION, Expectation
from pytest_ddtree.core.violation import InvariantError, Violation, Withheld, codes_of
from pytest_ddtree.wire.completion import Completion
from pytest_ddtree.wire.tokens import TokenCounter

_CONTENT_CODES = frozenset(
    {
        "empty",
        "early-stop",
        "finish-reason",
        "finish-lie",
        "overrun",
        "usage-mismatch",
        "role-leak",
        "special-token-leak",
        "reasoning-leak",
        "reasoning-only",
        "degenerate",
        "non-printable",
        "stop-sequence",
        "budget-mismatch",
        "stats-inconsistent",
        "stats-inflated",
        "schema",
        "encoding",
        "json-schema",
        "json-object",
        "tool-call",
        "json-cut",
        "logprobs",
    }
)


def _expectation(expectation: Expectation | None, expect: dict[str, Any]) -> Expectation:
    base = expectation if expectation is not None else DEFAULT_EXPECTATION
    if not isinstance(base, Expectation):
        raise TypeError(f"expectation must be an Expectation, got {type(base).__name__}")
    return base.replace(**expect) if expect else base


class Findings(list[Violation]):
    """The violations ``check`` found (a list), and the checks it withheld.

    ``withheld`` has one ``Withheld`` (its code and why) per check that was not judged:
    a check that compares the server's figures with the client's timings, on a request
    during whose decode the client itself stalled (``str()`` of one reads
    ``[stats-inflated] withheld: client stalled 0.11 s of a 0.17 s decode (...)``).
    Withheld is neither a pass nor a verdict.
    """

    withheld: tuple[Withheld, ...] = ()


def check(
    completion: Completion,
    expectation: Expectation | None = None,
    *,
    counter: TokenCounter | None = None,
    **expect: Any,
) -> Findings:
    """Every single-completion invariant; an empty list means the output is valid.

    ``expect`` overrides fields of ``expectation`` (``check(c, min_tokens=64)``);
    an unknown name raises ``TypeError``. ``counter`` gives exact local token
    counts and the tokenizer's special tokens; without it the completion's own
    ``local_completion_tokens`` is used. A request that did not complete (non-2xx,
    transport error, in-band error event) is judged on the exchange only: its
    partial content is not.
    Violations come in a fixed order: exchange, schema, accounting, text, stats.
    The result is a list (``Findings``) whose ``withheld`` names the checks that were
    not judged because the client itself stalled during the decode.
    """
    e = _expectation(expectation, expect)
    ctx = Context(completion, e, counter)
    skip = e.skip
    found: list[Violation] = []
    stream_found = list(check_stream(ctx))
    found.extend(stream_found)
    found.extend(check_http(ctx, stream_explained=bool(stream_found)))
    # Partial content of an aborted exchange would only produce follow-on noise.
    aborted = not completion.ok or bool(completion.stream and completion.stream.error_events)
    if not aborted and not skip.issuperset(_CONTENT_CODES):
        content: list[Violation] = []
        try:
            _content_checks(ctx, skip, content)
        except RecursionError:
            content.append(
                ctx.violation(
                    "schema",
                    "the response is nested too deep to check (recursion limit reached)",
                )
            )
        found.extend(content)
    if skip:
        found = [v for v in found if v.code not in skip]
    out = Findings(found)
    out.withheld = tuple(ctx.withheld)
    return out


def _content_checks(ctx: Context, skip: frozenset[str], found: list[Violation]) -> None:
    found.extend(check_encoding(ctx))
    if "schema" not in skip:
        found.extend(check_schema(ctx))
    found.extend(check_empty(ctx))
    found.extend(check_response_format(ctx))
    found.extend(check_tool_calls(ctx))
    found.extend(check_reasoning(ctx))
    found.extend(check_early_stop(ctx))
    found.extend(check_finish(ctx))
    found.extend(check_stop_sequences(ctx))
    # decoded with replacement characters, the text is not what the server counted
    if not getattr(ctx.completion, "encoding_error", None):
        found.extend(check_usage(ctx))
    found.extend(check_role_leak(ctx))
    found.extend(check_special_tokens(ctx, exclude_eos=overrun_after_eos(ctx)))
    found.extend(check_degenerate(ctx))
    found.extend(check_non_printable(ctx))
    found.extend(check_stats(ctx))
    found.extend(check_logprobs(ctx))


def assert_valid(
    completion: Completion,
    expectation: Expectation | None = None,
    *,
    counter: TokenCounter | None = None,
    **expect: Any,
) -> None:
    """Raise ``InvariantError`` listing every violation (with evidence) of ``check``."""
    __tracebackhide__ = True
    violations = check(completion, expectation, counter=counter, **expect)
    if violations:
        codes = codes_of(violations)
        raise InvariantError(
            violations,
            header=f"{len(violations)} output-quality invariant(s) broken ({codes})",
        )
