"""Violation: one broken output-quality invariant, with its evidence; Withheld: a check
not judged, and why."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_ddtree.core import jsonmodel


@dataclass(frozen=True)
class Violation:
    """One broken invariant.

    ``code`` is stable (``early-stop``, ``role-leak``, ...) and is what tests,
    ``--ddtree-skip-check`` and reports key on; ``message`` is one human line;
    ``evidence`` holds the offending excerpt (match marked) and the counts
    compared; ``request`` is the one-line description of the request that
    produced it.
    """

    code: str
    message: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    request: str = ""

    def format(self) -> str:
        """Multi-line rendering used in failure messages."""
        lines = [f"[{self.code}] {self.message}"]
        for key, value in self.evidence.items():
            lines.append(f"    {key}: {value}")
        if self.request:
            lines.append(f"    request: {self.request}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form for reports and xdist transport (evidence values made plain)."""
        return jsonmodel.to_json(self)


@dataclass(frozen=True)
class Withheld:
    """One check that was not judged, and why (neither a pass nor a verdict).

    ``code`` is the check's stable code (``stats-inflated``); ``reason`` is one human
    line (``client stalled 0.11 s of a 0.17 s decode (...)``). ``client_stalled``: the
    reason is the client's own stall during the decode (its timing is no evidence), not
    the request or the answer (a schema that is not one, an echo, ...). ``str()`` is the
    line shown for it: ``[stats-inflated] withheld: client stalled ...``.
    """

    code: str
    reason: str
    client_stalled: bool = False

    def __str__(self) -> str:
        return f"[{self.code}] withheld: {self.reason}"


def _evidence(evidence: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _jsonable(v) for k, v in evidence.items()}


def codes_of(violations: Iterable[Violation]) -> str:
    """The violations' codes, each once, in the order found (``"early-stop, degenerate"``)."""
    return ", ".join(dict.fromkeys(v.code for v in violations))


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return repr(value)


jsonmodel.register(Violation, evidence=jsonmodel.override(unstruct_hook=_evidence))


class InvariantError(AssertionError):
    """Raised when a completion breaks invariants; carries the violations."""

    # failure blocks name it as users import it, whatever folder defines it
    __module__ = "pytest_ddtree"

    def __init__(self, violations: list[Violation], header: str = "", footer: str = "") -> None:
        self.violations = violations
        self.header = header or f"{len(violations)} output-quality invariant(s) broken"
        self.footer = footer
        super().__init__(self.render())

    def render(self) -> str:
        """Header, every violation with its evidence, then the footer (e.g. a diagnosis)."""
        body = "\n".join(v.format() for v in self.violations)
        text = f"{self.header}\n{body}"
        return f"{text}\n{self.footer}" if self.footer else text

    @property
    def coded_message(self) -> str:
        """The message with the codes in front: what pytest's short test summary shows.

        The summary is cut at the terminal's width after the test's id, so the codes
        come first, before the count, and the class is not named.
        """
        return f"[{', '.join(self.codes)}] {self.render()}"

    @property
    def codes(self) -> list[str]:
        """The distinct codes, in order of first appearance."""
        seen: list[str] = []
        for v in self.violations:
            if v.code not in seen:
                seen.append(v.code)
        return seen
