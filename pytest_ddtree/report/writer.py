"""Write the whole report directory (``sweep.json`` and ``sweep.html``) at once."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_ddtree.measure.sweep import SweepRun
from pytest_ddtree.measure.sweep.temperature import Summaries, summaries_of
from pytest_ddtree.report.html import write_sweep_html
from pytest_ddtree.report.jsonfile import write_sweep_json

if TYPE_CHECKING:
    from pytest_ddtree.measure.breakeven import BreakEvenMap
    from pytest_ddtree.measure.load import LoadTestResult


@dataclass(frozen=True)
class ReportPaths:
    """Where :func:`write_report` put the files."""

    json: Path
    html: Path


def write_report(
    run: SweepRun,
    directory: str | os.PathLike[str],
    summaries: Summaries | None = None,
    *,
    load: Sequence[LoadTestResult] = (),
    breakeven: Sequence[tuple[str, BreakEvenMap]] = (),
) -> ReportPaths:
    """Write ``sweep.json`` and ``sweep.html`` into ``directory`` (created if missing).

    The statistics are computed once (or taken from ``summaries``) and shared,
    so both files agree exactly. ``load``: the merged load tests, written into
    both files in the same write (a run with load tests and no sweep still
    writes a valid ``sweep.json``, with no samples). ``summaries``: one per
    temperature (computed when not given); a run above temperature 0 gets a
    table and a recommendation per temperature.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    summaries = summaries_of(run.samples, summaries, seed=run.seed)
    json_path = write_sweep_json(run, out / "sweep.json", summaries, load=load, breakeven=breakeven)
    html_path = write_sweep_html(run, out / "sweep.html", summaries, load=load, breakeven=breakeven)
    return ReportPaths(json=json_path, html=html_path)
