"""``sweep.json`` across versions: an older version's file reads, and writes back the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.measure.sample import FORMER_LOAD_NAMES, Sample
from pytest_ddtree.report.compare import main as compare_main
from pytest_ddtree.report.jsonfile import read_sweep_json, sweep_to_json, write_sweep_json

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sweep_json"
OLD = sorted(FIXTURES.glob("v*.json"))

#: what a rewrite may change: when and by which version it was written
STAMPS = ("created", "generator")


#: what a rewrite adds to what an older version wrote: the one rule's typed decision, and
#: each race standing's and exit's reason as data (beside its words, ``reason``, unchanged)
ADDED = ("status", "decision")
RACE_ADDED = ("why",)


def _without(doc: dict[str, Any], *keys: str) -> dict[str, Any]:
    doc = {k: v for k, v in doc.items() if k not in keys}
    for summary in (doc, *doc.get("temperatures", ())):
        if isinstance(summary.get("recommendation"), dict):
            rec = summary["recommendation"]
            summary["recommendation"] = {k: v for k, v in rec.items() if k not in ADDED}
        race = summary.get("race")
        if isinstance(race, dict):
            for part in ("standings", "exits"):
                race[part] = [
                    {k: v for k, v in row.items() if k not in RACE_ADDED} for row in race[part]
                ]
    return doc


def test_there_are_old_files() -> None:
    assert len(OLD) >= 2


@pytest.mark.parametrize("path", OLD, ids=lambda p: p.stem)
def test_an_old_file_reads_and_writes_back_the_same(path: Path) -> None:
    old = json.loads(path.read_text())
    run = read_sweep_json(path)
    assert len(run.samples) == len(old["samples"]) > 0
    # the statistics are recomputed from the raw samples, and come out as stored
    new = sweep_to_json(run)
    assert _without(new, *STAMPS) == _without(old, *STAMPS, "load")


@pytest.mark.parametrize("path", OLD, ids=lambda p: p.stem)
def test_a_rewritten_file_is_byte_for_byte_the_same_part(path: Path, tmp_path: Path) -> None:
    run = read_sweep_json(path)
    again = write_sweep_json(run, tmp_path / "sweep.json")
    assert read_sweep_json(again) == run
    old, new = json.loads(path.read_text()), json.loads(again.read_text())
    for key in ("samples", "diagnoses", "metadata"):
        assert json.dumps(new[key], indent=2) == json.dumps(old[key], indent=2)


@pytest.mark.parametrize("path", OLD, ids=lambda p: p.stem)
def test_the_whole_rewritten_document_keeps_its_key_order(path: Path) -> None:
    # the statistics are written by the converter: key for key, in the old order
    old = _without(json.loads(path.read_text()), *STAMPS, "load")
    new = _without(sweep_to_json(read_sweep_json(path)), *STAMPS)
    assert json.dumps(new, indent=2) == json.dumps(old, indent=2)


def test_old_load_samples_read_under_their_former_names() -> None:
    doc = json.loads((FIXTURES / "v0.1.0-32c2eab-load.json").read_text())
    (test,) = doc["load"]["tests"]
    for raw in test["samples"]:
        sample = Sample.from_json(raw)
        for key, value in raw.items():
            name = FORMER_LOAD_NAMES.get(key, key)
            assert jsonmodel.converter.unstructure(getattr(sample, name)) == value, key
        # written today under today's names, and read back the same
        assert not FORMER_LOAD_NAMES.keys() & sample.to_json().keys()
        assert Sample.from_json(sample.to_json()) == sample


def test_compare_reads_two_old_files(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "v0.1.0-32c2eab-load.json"
    code = compare_main([str(path), str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "16" in out and "64" in out


@pytest.mark.parametrize("blame", ["template", "server", "speculation", "undetermined", "near-tie"])
def test_a_diagnosis_reads_its_blame_from_the_key_older_files_have(blame: str) -> None:
    from pytest_ddtree.measure.sweep import DiagnosisRecord

    record = DiagnosisRecord.from_json({"nodeid": "t.py::a", "verdict": blame})
    assert record.blame == blame and record.to_json()["verdict"] == blame


def test_a_diagnosis_with_a_blame_outside_its_literal_is_refused_in_one_line() -> None:
    from pytest_ddtree.measure.sweep import DiagnosisRecord

    refused = r"^diagnosis: field 'verdict': the budget not in .*'near-tie'"
    with pytest.raises(ValueError, match=refused) as info:
        DiagnosisRecord.from_json({"nodeid": "t.py::a", "verdict": "the budget"})
    assert "\n" not in str(info.value)
