"""The reports: the terminal tables, ``sweep.json`` and a self-contained ``sweep.html``.

- ``terminal``: the sweep table and the lines about the server's counters;
- ``jsonfile``: ``sweep.json``, its schema version, reading it back;
- ``html``, ``load_html``, ``depth_chart``, ``counters_html``: the parts of ``sweep.html``;
- ``charts``: the one chart engine every chart of ``sweep.html`` is drawn by (one size and
  font scale, one palette);
- ``writer``: both files written from one set of statistics, atomically (``_atomic``);
- ``compare``: ``ddtree-compare``, two ``sweep.json`` files side by side.

May import: ``core``, ``wire``, ``checks`` and ``measure``. Must not import the pytest layer,
the servers (``reference``, ``engines``), nor pytest.
"""

from __future__ import annotations

from pytest_ddtree.report._atomic import ensure_writable_dir
from pytest_ddtree.report.html import render_html, write_sweep_html
from pytest_ddtree.report.jsonfile import (
    SCHEMA_VERSION,
    read_sweep_json,
    sweep_to_json,
    write_sweep_json,
)
from pytest_ddtree.report.terminal import table_lines
from pytest_ddtree.report.writer import ReportPaths, write_report

__all__ = [
    "SCHEMA_VERSION",
    "ReportPaths",
    "ensure_writable_dir",
    "read_sweep_json",
    "render_html",
    "sweep_to_json",
    "table_lines",
    "write_report",
    "write_sweep_html",
    "write_sweep_json",
]
