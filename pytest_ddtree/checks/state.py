"""Determinism and state leaks: identical temperature-0 requests must agree.

``run_state_check`` sends one prompt in a series around another and
``check_state`` tells a ``nondeterministic`` server from one whose state (a
drafter cache, say) leaks from one request into the next.

No pytest here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_ddtree.checks.blame import NOT_WHOLE_ADVICE
from pytest_ddtree.checks.comparable import (
    NOT_COMPARABLE,
    why_not_whole,
)
from pytest_ddtree.checks.invariants import check_determinism
from pytest_ddtree.checks.lossless import Unjudged, first_divergence, not_comparable_diagnosis
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.wire.client import DDTreeClient
from pytest_ddtree.wire.completion import Completion


def state_footer(violations: Sequence[Violation]) -> str:
    """The diagnosis lines of a determinism test whose answers could not be compared."""
    return not_comparable_diagnosis(
        [Unjudged(v.message, NOT_WHOLE_ADVICE) for v in violations]
    ).render()


def check_state(
    first: Completion,
    repeat: Completion,
    after_other: Completion,
    before: Completion | None = None,
) -> list[Violation]:
    """Identical temperature-0 requests must agree, whatever ran before them.

    ``first`` and ``repeat`` are back-to-back identical requests (``first``
    itself following an identical one): when they differ the server is
    ``nondeterministic``. When they agree but the same request right after a
    different one (``after_other``, and ``before``, which followed whatever
    the session sent earlier) comes out changed, state such as a drafter cache
    is not reset between requests: ``state-leak``. An answer that did not
    arrive whole is compared with nothing: ``not-comparable``, no verdict.
    """
    unjudged = state_unjudged(first, repeat, after_other, before)
    if unjudged:
        return unjudged
    found = check_determinism(first, repeat)
    if found:
        return found
    if first.request.temperature != 0:
        return []
    out: list[Violation] = []
    for label, other in (("after another request", after_other), ("first of a series", before)):
        if other is None or first.text == other.text:
            continue
        div = first_divergence(first.text, other.text)
        assert div is not None
        out.append(
            Violation(
                code="state-leak",
                message=(
                    "the same temperature-0 request gave different output right after a "
                    f"different request (first difference at character {div.char_offset}); "
                    "identical back-to-back repeats agree"
                ),
                evidence={"repeat": div.reference_excerpt, label: div.actual_excerpt},
                request=other.request.describe(),
            )
        )
        break
    return out


def state_unjudged(
    first: Completion,
    repeat: Completion,
    after_other: Completion,
    before: Completion | None = None,
) -> list[Violation]:
    """``not-comparable`` for each answer of a determinism check that did not arrive whole."""
    runs = {
        "first of a series": before,
        "first run": first,
        "repeat": repeat,
        "run after another request": after_other,
    }
    out: list[Violation] = []
    for label, comp in runs.items():
        why = None if comp is None else why_not_whole(comp)
        if comp is not None and why is not None:
            out.append(
                Violation(
                    NOT_COMPARABLE,
                    f"the {label} did not arrive whole ({why}): the identical requests were "
                    "not compared",
                    {},
                    comp.request.describe(),
                )
            )
    return out


def run_state_check(
    client: DDTreeClient, prompt: Any, other_prompt: Any, **kw: Any
) -> list[Violation]:
    """Run ``prompt`` twice, ``other_prompt``, then ``prompt`` again (see ``check_state``)."""
    kw = {**kw, "temperature": 0.0}
    before = client.request(prompt, **kw)  # follows whatever the session sent last
    first = client.request(prompt, **kw)
    repeat = client.request(prompt, **kw)
    client.request(other_prompt, **kw)
    after = client.request(prompt, **kw)
    return check_state(first, repeat, after, before)
