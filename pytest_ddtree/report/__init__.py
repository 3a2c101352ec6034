"""Sweep reports: the terminal table, ``sweep.json`` and a self-contained ``sweep.html``."""

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
