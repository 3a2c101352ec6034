"""The sweep per sampling temperature: one summary, table and recommendation for each.

Acceptance, and with it the best budget, changes with the temperature, so
samples of different temperatures are never pooled or compared: each
temperature gets its own :class:`~pytest_ddtree.measure.sweep.SweepSummary`. A run at
temperature 0 alone reads as it always did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pytest_ddtree.core.settings import temperature_label
from pytest_ddtree.measure.sample import Sample
from pytest_ddtree.measure.sweep.statistics import SweepSummary, summarize

#: the codes of a server found to ignore sampling parameters (see ``pytest_ddtree.checks.sampling``)
SAMPLING_CODES = ("temperature-ignored", "seed-ignored")


def by_temperature(samples: Sequence[Sample]) -> dict[float, list[Sample]]:
    """The samples grouped by temperature, lowest first."""
    groups: dict[float, list[Sample]] = {}
    for s in samples:
        groups.setdefault(s.temperature, []).append(s)
    return {t: groups[t] for t in sorted(groups)}


def summarize_temperatures(
    samples: Sequence[Sample], *, seed: int = 0
) -> dict[float, SweepSummary]:
    """One summary per temperature, lowest first (empty without samples)."""
    return {t: summarize(group, seed=seed) for t, group in by_temperature(samples).items()}


def zero_only(summaries: Mapping[float, SweepSummary]) -> bool:
    """True when the run has temperature 0 alone: reports keep their one-table layout."""
    return all(t == 0.0 for t in summaries)


def only_summary(summaries: Mapping[float, SweepSummary], *, seed: int = 0) -> SweepSummary:
    """The one summary of a run at temperature 0 alone (:func:`zero_only`), the empty
    summary of a run without samples; ValueError for a run at several temperatures."""
    if not zero_only(summaries):
        raise ValueError(f"one summary per temperature: {sorted(summaries)}, not one")
    return summaries[0.0] if summaries else summarize((), seed=seed)


#: what a report is given: one summary per temperature, or the one of a run at temperature 0
Summaries = Mapping[float, SweepSummary] | SweepSummary


def summaries_of(
    samples: Sequence[Sample],
    given: Summaries | None = None,
    *,
    seed: int = 0,
) -> dict[float, SweepSummary]:
    """The per-temperature summaries of a run's ``samples``: ``given`` when a mapping,
    computed when None. A single summary stands for the run at temperature 0 alone; for a
    run at several temperatures it is not one of them, so each is summarised."""
    if isinstance(given, SweepSummary):
        if all(s.temperature == 0.0 for s in samples):
            return {0.0: given}
        given = None
    if given is None:
        return summarize_temperatures(samples, seed=seed)
    return dict(given)


def heading(temperature: float) -> str:
    """The heading of one temperature's table: ``temperature 0.7``."""
    return f"temperature {temperature_label(temperature)}"


def sampling_problems(samples: Sequence[Sample]) -> list[str]:
    """The distinct messages of samples that found the server ignoring temperature or seed."""
    found: dict[str, None] = {}
    for s in samples:
        for code, message in zip(s.codes, s.messages, strict=False):
            if code in SAMPLING_CODES:
                found.setdefault(f"[{code}] {message}")
    return list(found)
