"""``sweep.json``: the sweep's raw samples, statistics and recommendation.

The file carries ``"schema_version": 1``. Raw per-request samples are stored
so that another tool (``python -m pytest_ddtree.report.compare``) can re-run the
statistics, merge files or test differences; the statistics stored beside
them are a convenience for readers and are recomputed on load.

Version 1 layout::

    {
      "schema_version": 1,
      "generator": "pytest-ddtree 0.1.0",
      "created": "2026-01-01T00:00:00+00:00",
      "seed": 0,
      "metadata": {"endpoint": ..., "model": ..., "dialect": ..., ...},
      "samples": [Sample.to_json(), ...],
      "diagnoses": [{"nodeid", "tree_budget", "prompt_id", "codes", "verdict", ...}],
      "budgets": [ArmStats.to_json(), ...],
      "recommendation": Recommendation.to_json(),
      "load": {"tests": [LoadTestResult.to_json(), ...]}   (only when load tests ran)
    }

A run above temperature 0 has no top-level ``budgets`` and ``recommendation``: it has
``"temperatures": [{"temperature": 0.7, "budgets": [...], "recommendation": {...},
"sampling": ["[seed-ignored] ..."]}, ...]``, one entry per temperature, and every
sample carries its ``temperature`` (a sample without one, from an older file, is at 0).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema

from pytest_ddtree.core import __version__
from pytest_ddtree.core.settings import budget_label
from pytest_ddtree.measure.arm import ArmStats
from pytest_ddtree.measure.sweep import DiagnosisRecord, RunMetadata, Sample, SweepRun
from pytest_ddtree.measure.sweep.race import RaceRecord
from pytest_ddtree.measure.sweep.statistics import SweepSummary
from pytest_ddtree.measure.sweep.temperature import (
    Summaries,
    only_summary,
    sampling_problems,
    summaries_of,
    zero_only,
)
from pytest_ddtree.report import race_text
from pytest_ddtree.report._atomic import write_text_atomic
from pytest_ddtree.report.arm_text import verdict_text
from pytest_ddtree.report.decision_text import drift_line, sweep_answer

if TYPE_CHECKING:
    from pytest_ddtree.measure.breakeven import BreakEvenMap
    from pytest_ddtree.measure.load import LoadTestResult

SCHEMA_VERSION = 1

#: JSON Schema of ``sweep.json`` version 1 (what :func:`read_sweep_json` enforces).
SWEEP_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "pytest-ddtree sweep report",
    "type": "object",
    "required": ["schema_version", "seed", "metadata", "samples"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "generator": {"type": "string"},
        "created": {"type": "string"},
        "seed": {"type": "integer"},
        "metadata": {"type": "object"},
        "samples": {"type": "array", "items": Sample.json_schema()},
        "diagnoses": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "nodeid": {"type": "string"},
                    "verdict": {"type": "string"},
                    "codes": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
        "budgets": {"type": "array", "items": {"type": "object"}},
        "recommendation": {"type": ["object", "null"]},
        "temperatures": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["temperature", "budgets", "recommendation"],
                "properties": {"temperature": {"type": "number", "minimum": 0}},
            },
        },
        "load": {
            "type": "object",
            "required": ["tests"],
            "properties": {"tests": {"type": "array", "items": {"type": "object"}}},
        },
    },
}


@lru_cache(maxsize=1)
def _validator() -> Any:
    # Built once: schema compilation costs far more than validating one file.
    cls = jsonschema.validators.validator_for(SWEEP_JSON_SCHEMA)
    return cls(SWEEP_JSON_SCHEMA)


def _summary_json(summary: SweepSummary) -> dict[str, Any]:
    """A summary's JSON, with the recommendation's human text (worded by the report)."""
    doc = summary.to_json()
    doc["recommendation"]["message"] = sweep_answer(summary)
    pairs = zip(doc["budgets"], summary.budgets, strict=True)
    doc["budgets"] = [_with_verdict(entry, st) for entry, st in pairs]
    if summary.race is not None:
        _word_race(doc["race"], summary.race)
    for check, entry in zip(summary.drift, doc.get("drift", ()), strict=True):
        entry["message"] = drift_line(check)
    return doc


def _inserted(doc: dict[str, Any], after: str, key: str, value: Any) -> dict[str, Any]:
    """``doc`` with ``key`` placed after ``after`` (at the end without it): where older
    files have it."""
    items = list(doc.items())
    at = next((i + 1 for i, (k, _) in enumerate(items) if k == after), len(items))
    return dict([*items[:at], (key, value), *items[at:]])


def _with_verdict(entry: dict[str, Any], st: ArmStats) -> dict[str, Any]:
    """An arm's JSON with its verdict cell in words (after ``concurrent``)."""
    return _inserted(entry, "concurrent", "verdict", verdict_text(st))


def _word_race(doc: dict[str, Any], race: RaceRecord[int | None]) -> None:
    """Each standing's and exit's ``reason`` in words, beside its ``why`` (the data)."""
    for entry, s in zip(doc["standings"], race.judgement.standings, strict=True):
        entry["reason"] = race_text.reason(s.why)
    for entry, e in zip(doc["exits"], race.exits, strict=True):
        leader = "the leader" if e.leader is None else f"tree_budget={budget_label(e.leader)}"
        entry["reason"] = race_text.reason(e.why, leader)


def _load_json(load: Sequence[LoadTestResult]) -> dict[str, Any]:
    """The load part, with each raced point's race in one line (worded by the report)."""
    from pytest_ddtree.measure.load.record import load_json
    from pytest_ddtree.report.load_text import none_text, race_line, schedule_text, unraced_text

    doc = load_json(load)
    for test, entry in zip(load, doc["tests"], strict=True):
        points = zip(entry["points"], test.stats, strict=True)
        entry["points"] = [_with_verdict(e, st) for e, st in points]
        entry["note"] = unraced_text(test.note)
        entry["schedule"] = {"schedule": schedule_text(test.schedule), **entry["schedule"]}
        for choice, point in zip(test.schedule.choices, entry["schedule"]["points"], strict=True):
            point["why_none"] = None if choice.why_none is None else none_text(choice.why_none)
            if choice.race is not None:
                race = point["race"]
                for row, x in zip(race["left"], choice.race.left, strict=True):
                    row["reason"] = race_text.reason(x.why)
                for row, (*_, why) in zip(race["standing"], choice.race.standing, strict=True):
                    row["reason"] = race_text.reason(why)
                point["race"] = _inserted(race, "discarded_runs", "verdict", race_line(choice.race))
    return doc


def sweep_to_json(
    run: SweepRun,
    summaries: Summaries | None = None,
    *,
    load: Sequence[LoadTestResult] = (),
    breakeven: Sequence[tuple[str, BreakEvenMap]] = (),
) -> dict[str, Any]:
    """The ``sweep.json`` document for ``run``.

    ``summaries`` (one per temperature, computed if not given; a single summary for a run at
    temperature 0): above temperature 0 the statistics are written per temperature.
    """
    summaries = summaries_of(run.samples, summaries, seed=run.seed)
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "generator": f"pytest-ddtree {__version__}",
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seed": run.seed,
        "metadata": run.metadata.to_json(),
        "samples": [s.to_json() for s in run.samples],
        "diagnoses": [d.to_json() for d in run.diagnoses],
    }
    if zero_only(summaries):
        doc.update(_summary_json(only_summary(summaries, seed=run.seed)))
    else:
        doc["temperatures"] = [
            {
                "temperature": t,
                **_summary_json(s),
                "sampling": sampling_problems([x for x in run.samples if x.temperature == t]),
            }
            for t, s in summaries.items()
        ]
    if load:
        doc["load"] = _load_json(load)
    if breakeven:
        from pytest_ddtree.report.breakeven_text import breakeven_answer

        doc["breakeven"] = [
            {"nodeid": nodeid, **m.to_json(), "message": breakeven_answer(m)}
            for nodeid, m in breakeven
        ]
    return doc


def write_sweep_json(
    run: SweepRun,
    path: str | os.PathLike[str],
    summaries: Summaries | None = None,
    *,
    load: Sequence[LoadTestResult] = (),
    breakeven: Sequence[tuple[str, BreakEvenMap]] = (),
) -> Path:
    """Write ``sweep.json`` atomically (temporary file, then rename)."""
    doc = sweep_to_json(run, summaries, load=load, breakeven=breakeven)
    text = json.dumps(doc, indent=2, sort_keys=False, allow_nan=False) + "\n"
    return write_text_atomic(path, text)


def sweep_from_json(doc: Any, *, source: str = "sweep.json") -> SweepRun:
    """Rebuild a :class:`SweepRun` from a parsed document; one-line ``ValueError`` if bad."""
    if not isinstance(doc, dict):
        raise ValueError(f"{source}: expected a JSON object, got {type(doc).__name__}")
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ValueError(
            f"{source}: unsupported schema_version {version!r}"
            f" (this version reads {SCHEMA_VERSION})"
        )
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(root)"
        raise ValueError(f"{source}: {where}: {first.message}")
    samples = [
        Sample.from_json(item, source=f"{source}: samples[{i}]")
        for i, item in enumerate(doc["samples"])
    ]
    return SweepRun(
        samples=samples,
        metadata=RunMetadata.from_json(doc["metadata"]),
        seed=int(doc["seed"]),
        diagnoses=[DiagnosisRecord.from_json(d) for d in doc.get("diagnoses", [])],
    )


def read_sweep_json(path: str | os.PathLike[str]) -> SweepRun:
    """Load a ``sweep.json`` file; errors name the file and what is wrong in one line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{p}: cannot read sweep report ({exc.strerror or exc})") from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: not valid JSON (line {exc.lineno}: {exc.msg})") from exc
    return sweep_from_json(doc, source=str(p))
