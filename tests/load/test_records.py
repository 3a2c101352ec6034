"""Load records: raw samples per call, carried from xdist workers, merged once on the controller."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ddtree.core import jsonmodel
from pytest_ddtree.measure.load import (
    SLO,
    ClientHealth,
    LoadPoint,
    LoadRecord,
    Sample,
    analyse,
    merge_records,
)
from pytest_ddtree.pytest_plugin.session import WorkerPayload

from ._samples import load_sample

POINT = LoadPoint("concurrency", 4)


def _samples(worker: str, n: int, seed: int) -> tuple[Sample, ...]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ttft = rng.uniform(0.002, 0.01)
        gaps = tuple(rng.uniform(0.001, 0.004) for _ in range(5))
        out.append(
            load_sample(
                point=POINT,
                tree_budget=(16, 64)[i % 2],
                start=1000.0 + i * 0.05,
                end_to_end=ttft + sum(gaps),
                ttft=ttft,
                gaps=gaps,
                completion_tokens=18,
                valid=i != 3,
                codes=() if i != 3 else ("early-stop",),
                evidence="" if i != 3 else "[early-stop] stopped at 2 tokens",
                prompt_id=f"p{i % 2}",
                worker=worker,
            )
        )
    return tuple(out)


def _health(requests: int) -> ClientHealth:
    return ClientHealth(
        cpu_seconds=0.05,
        wall_seconds=1.0,
        requests=requests,
        tokens=18 * requests,
        lag_p99=0.001,
        lag_max=0.002,
        lag_samples=100,
    )


def _record(worker: str, seed: int) -> LoadRecord:
    return LoadRecord(
        nodeid="test_load.py::test_load",
        samples=_samples(worker, 10, seed),
        health=((POINT, 16, _health(5)), (POINT, 64, _health(5))),
        shares=2,
        slo=SLO(e2e=0.5, goodput=0.9),
    )


def test_record_round_trips_through_the_worker_payload() -> None:
    records = [_record("gw0", 1), _record("gw1", 2)]
    payload = WorkerPayload(load_records=records)
    again = WorkerPayload.from_json(payload.to_json())
    assert again.load_records == records
    assert WorkerPayload.from_json(WorkerPayload().to_json()).load_records == []


def test_merge_equals_one_analysis_of_every_raw_sample() -> None:
    records = [_record("gw0", 1), _record("gw1", 2)]
    (merged,) = merge_records(records, seed=0)
    samples = records[0].samples + records[1].samples
    health = {
        (POINT, 16): [_health(5), _health(5)],
        (POINT, 64): [_health(5), _health(5)],
    }
    stats, schedule = analyse(samples, health, slo=SLO(e2e=0.5, goodput=0.9), seed=0)
    assert [jsonmodel.to_json(s) for s in merged.stats] == [jsonmodel.to_json(s) for s in stats]
    assert merged.schedule.to_json() == schedule.to_json()
    assert merged.processes == 2 and merged.workers == ("gw0", "gw1")
    assert merged.where == "2 processes (gw0, gw1)"
    # the invalid requests are counted, not dropped
    assert sum(s.invalid for s in merged.stats) == 2
    doc = merged.to_json()
    assert len(doc["samples"]) == 20 and doc["processes"] == 2
    assert all(p["client"]["workers"] == 2 for p in doc["points"])


def test_a_record_without_samples_leaves_no_test() -> None:
    empty = LoadRecord(nodeid="t.py::t", samples=())
    assert merge_records([empty], seed=0) == []


def test_importing_the_plugin_does_not_load_the_load_package() -> None:
    code = (
        "import sys, pytest_ddtree.plugin; "
        "print(sorted(m for m in sys.modules if m.startswith('pytest_ddtree.measure.load')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


PAYLOADS = Path(__file__).parent.parent / "fixtures" / "worker_payload"
#: written before the sweep and the load shared one sample type (the load's former names)
OLD_PAYLOAD = PAYLOADS / "v0.1.0-4a107e8-payload.json"
#: written while a race's reasons were words only (``reason``)
WORDS_PAYLOAD = PAYLOADS / "v0.1.0-e45bd37-payload.json"
#: the same payload, as this version writes it (a race without its sentence: the report words it)
PAYLOAD = PAYLOADS / "v0.1.0-sample-payload.json"


def test_a_worker_payload_reads_and_writes_back_byte_for_byte() -> None:
    text = PAYLOAD.read_text()
    payload = WorkerPayload.from_json(json.loads(text))
    assert (
        len(payload.load_records) == 2
        and payload.load_records[1].races
        and payload.load_records[1].races[0].left
    )
    assert payload.lossy == {None: "t.py::a", 64: "t.py::b"}
    assert json.dumps(payload.to_json(), indent=2) + "\n" == text


def test_an_old_worker_payload_reads_its_load_samples_under_their_former_names() -> None:
    old = WorkerPayload.from_json(json.loads(OLD_PAYLOAD.read_text()))
    assert old == WorkerPayload.from_json(json.loads(PAYLOAD.read_text()))
    assert old == WorkerPayload.from_json(json.loads(WORDS_PAYLOAD.read_text()))
    (first, *_) = old.load_records[0].samples
    assert first.end_to_end is not None and first.completion_tokens == 18


def test_a_bad_load_record_in_a_payload_is_one_line_naming_where() -> None:
    doc = json.loads(PAYLOAD.read_text())
    doc["load"][0]["samples"][3]["end_to_end"] = "slow"
    with pytest.raises(
        ValueError, match=r"^xdist worker: field 'load\[0\]\.samples\[3\]\.end_to_end'"
    ):
        WorkerPayload.from_json(doc)
