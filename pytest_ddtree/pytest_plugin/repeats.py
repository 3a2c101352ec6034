"""A failure repeated across tests, printed whole once: the terminal refers back to it.

The bundled suite sends one prompt at one budget from several tests (``test_smoke``,
``test_invariants``, ``test_streaming``): a server that breaks an invariant there fails
each of them with the same evidence. The terminal prints that evidence once, at the first
test that showed it, and each later test with the same codes, prompt, budget and evidence
in one line naming that test. Only the terminal is shortened: every report keeps its whole
failure, so JUnit XML, a JSON report and ``--ddtree-report`` carry each test's evidence
(a CI reader opens one test's entry). ``-vv`` prints every failure whole.

The key is taken where the exception is (``mark``, in the test's process) and travels
with the report, so under pytest-xdist the controller folds failures from different
workers alike; the first is the first the controller printed.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass
from typing import Any

import pytest

#: the report attributes ``mark`` sets (plain strings: they cross xdist's wire)
KEY = "ddtree_evidence_key"
HEAD = "ddtree_evidence_head"

# a worker's embedded server has its own port, and a test may send temperature 0 as an
# int: neither makes the failure another one
_HOST = re.compile(r"\bhttps?://[^/\s]+")
_TEMPERATURE = re.compile(r"\btemperature=([-+0-9.eE]+)")


def evidence_key(exc: BaseException) -> str | None:
    """What makes two failures the same (codes, messages, evidence, the request's prompt,
    budget and settings, the diagnosis), or None for a failure that is not an invariant's
    or whose violations do not name their request."""
    from pytest_ddtree.core.violation import InvariantError

    if not isinstance(exc, InvariantError) or not exc.violations:
        return None
    if not all(v.request for v in exc.violations):
        return None  # which prompt at which budget is unknown: never folded
    text = _HOST.sub("<endpoint>", exc.render())
    text = _TEMPERATURE.sub(lambda m: f"temperature={_number(m.group(1))}", text)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _number(text: str) -> str:
    try:
        return f"{float(text):g}"
    except ValueError:
        return text


def mark(report: pytest.TestReport, excinfo: pytest.ExceptionInfo[BaseException] | None) -> None:
    """Put the failure's key and first line on its report (for the terminal, and xdist)."""
    if excinfo is None:
        return
    key = evidence_key(excinfo.value)
    if key is None:
        return
    setattr(report, KEY, key)
    setattr(report, HEAD, getattr(excinfo.value, "coded_message", "").split("\n", 1)[0])


@dataclass(frozen=True)
class _Crash:
    """The short test summary's message of a repeat (``reprcrash``'s shape)."""

    path: str
    lineno: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.lineno}: {self.message}"

    def toterminal(self, tw: Any) -> None:
        tw.line(str(self))


@dataclass(frozen=True)
class _Repeat:
    """A repeated failure's body in the terminal: where it failed and which test shows it."""

    location: str | None
    head: str
    first: str
    reprcrash: _Crash

    def toterminal(self, tw: Any) -> None:
        if self.location:
            tw.line(self.location)
        tw.line(f"E   {self.head}", red=True, bold=True)
        tw.line(
            f"E   the same failure (codes, prompt, budget and evidence) as {self.first} above: "
            "its evidence is printed there (JUnit XML has it for this test too; -vv prints "
            "it here)",
            red=True,
            bold=True,
        )

    def __str__(self) -> str:
        return f"{self.head}\nthe same failure as {self.first}"


def fold(tr: pytest.TerminalReporter) -> int:
    """Replace each later report of an already shown failure, in the terminal's lists only,
    by a copy that refers back to the first; the count of folded reports."""
    first: dict[str, str] = {}
    folded = 0
    for which in ("error", "failed"):  # the order the terminal prints them
        reports = tr.stats.get(which, [])
        for i, report in enumerate(reports):
            key = getattr(report, KEY, None)
            if not isinstance(key, str) or getattr(report, "when", None) not in (
                "setup",
                "call",
                "teardown",
            ):
                continue
            if key not in first:
                first[key] = report.nodeid
                continue
            reports[i] = _folded(report, first[key])
            folded += 1
    return folded


def _folded(report: pytest.TestReport, first: str) -> pytest.TestReport:
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    path = str(getattr(crash, "path", report.location[0]))
    lineno = int(getattr(crash, "lineno", (report.location[1] or 0) + 1))
    head = str(getattr(report, HEAD, "") or "invariants broken")
    short = f"{head.split(']', 1)[0]}] the same failure as {first}" if "]" in head else head
    twin = copy.copy(report)
    twin.longrepr = _Repeat(_location(longrepr), head, first, _Crash(path, lineno, short))  # type: ignore[assignment]
    return twin


def _location(longrepr: Any) -> str | None:
    """``path:line: in test``: the test's own line of the traceback, where shown."""
    entries = getattr(getattr(longrepr, "reprtraceback", None), "reprentries", None) or []
    for entry in entries:
        loc = getattr(entry, "reprfileloc", None)
        if loc is not None:
            return f"{loc.path}:{loc.lineno}: {loc.message}"
    return None
