"""The token counts of two answers to one request (streamed and plain): compared only when
both come from the same source.

A count is the server's ``usage`` when it sent one, else a local count of the text
(``Completion.token_count_source`` says which). The two differ by design: usage counts what
a local count of the content cannot see (a tool call's arguments, the matched stop
sequence, an end-of-sequence token), so a streamed answer counted locally against a plain
one counted by the server says nothing about either. Such a pair is "not comparable" and
no verdict is drawn; a pair counted by one source that disagrees on the same text is a
``usage-mismatch``.

No pytest here.
"""

from __future__ import annotations

from pytest_ddtree.checks.comparable import is_whole
from pytest_ddtree.core.violation import Violation
from pytest_ddtree.wire.completion import Completion

__all__ = ["check_counts", "count_source", "counts_not_comparable"]

#: ``Completion.token_count_source`` of a count the server reported
USAGE = "usage"
#: ``Completion.token_count_source`` of an answer nothing counted
NONE = "none"


def count_source(completion: Completion) -> str:
    """Where the answer's token count came from, in words."""
    source = completion.token_count_source
    if source == USAGE:
        return "the server's usage"
    if source == NONE or completion.completion_tokens is None:
        return "not counted"
    return f"counted locally ({source})"


def counts_not_comparable(first: Completion, second: Completion) -> str | None:
    """Why the token counts of ``first`` and ``second`` cannot be compared, or None when both
    come from one source (both the server's usage, or both the same local counter)."""
    a, b = first.token_count_source, second.token_count_source
    if a == b and a != NONE and None not in (first.completion_tokens, second.completion_tokens):
        return None
    return (
        f"not comparable: the streamed count is {count_source(first)}, the plain one "
        f"{count_source(second)} (usage counts what a local count of the content does not: "
        "tool-call arguments, a matched stop, the end-of-sequence token)"
    )


def check_counts(first: Completion, second: Completion) -> list[Violation]:
    """``usage-mismatch`` when two whole answers to one request, counted by one source, give
    different token counts for the same text; nothing when their counts are not comparable
    (``counts_not_comparable``), either did not arrive whole, or their texts differ (the
    determinism check judges that)."""
    if not (is_whole(first) and is_whole(second)) or counts_not_comparable(first, second):
        return []
    if (first.text, first.reasoning_text) != (second.text, second.reasoning_text):
        return []
    n, m = first.completion_tokens, second.completion_tokens
    if n == m:
        return []
    return [
        Violation(
            "usage-mismatch",
            f"the same answer counts {n} tokens streamed and {m} plain",
            {
                "streamed": n,
                "plain": m,
                "counted_by": count_source(first),
                "content": first.text[:80],
            },
            request=first.request.describe(),
        )
    ]
