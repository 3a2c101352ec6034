"""Write the whole report directory (``sweep.json`` and ``sweep.html``) at once."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pytest_ddtree.report.html import write_sweep_html
from pytest_ddtree.report.jsonfile import write_sweep_json
from pytest_ddtree.sweep import SweepRun, SweepSummary


@dataclass(frozen=True)
class ReportPaths:
    """Where :func:`write_report` put the files."""

    json: Path
    html: Path


def write_report(
    run: SweepRun, directory: str | os.PathLike[str], summary: SweepSummary | None = None
) -> ReportPaths:
    """Write ``sweep.json`` and ``sweep.html`` into ``directory`` (created if missing).

    The statistics are computed once (or taken from ``summary``) and shared,
    so both files agree exactly.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    summary = summary or run.summary()
    json_path = write_sweep_json(run, out / "sweep.json", summary)
    html_path = write_sweep_html(run, out / "sweep.html", summary)
    return ReportPaths(json=json_path, html=html_path)
