"""The README's screenshot of the sweep report is a drawing of the current report.

``python docs/generate.py --only suite`` runs the bundled suite with ``--ddtree-report``, draws
the ``sweep.html`` it wrote with headless Chromium (``docs/img/sweep-report.png``) and records
beside it what the page showed (``sweep-report.json``). A PNG cannot be compared with a new
run byte for byte; its record can: the stylesheet and the per-budget table's columns must be
the report's now, and the recommendation the one of the transcript of the same run.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

from pytest_ddtree.measure.sweep import SweepRun
from pytest_ddtree.report.html import render_html
from tests.docs import load_transcripts
from tests.sweep._factory import synthetic_sweep

ROOT = Path(__file__).resolve().parents[2]
transcripts = load_transcripts.transcripts()
SHOT = transcripts.SCENARIOS["suite"].screenshot
REGENERATE = "python docs/generate.py --only suite"


def _record() -> dict[str, object]:
    assert SHOT is not None
    return dict(json.loads(SHOT.record.read_text(encoding="utf-8")))


def test_the_screenshot_is_the_recorded_drawing() -> None:
    record = _record()
    png = SHOT.image.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert [width, height] == record["window"], f"drawn at another size: {REGENERATE}"
    assert hashlib.sha256(png).hexdigest() == record["png_sha256"], (
        f"the image is not the one its record describes: {REGENERATE}"
    )


def test_the_screenshot_shows_the_current_report_format() -> None:
    # any run's page has the report's stylesheet and columns: a small synthetic one here
    run = SweepRun(samples=synthetic_sweep({16: 500.0, 64: 900.0}), metadata={}, seed=1)
    now = transcripts.page_record(render_html(run))
    record = _record()
    assert record["stylesheet_sha256"] == now["stylesheet_sha256"], (
        f"the report's stylesheet changed since the screenshot was drawn: {REGENERATE}"
    )
    assert record["columns"] == now["columns"], f"the report's columns changed: {REGENERATE}"


def test_the_screenshot_is_of_the_run_the_readme_transcript_shows() -> None:
    (block,) = [
        b for b in transcripts.blocks([ROOT / "README.md"]) if b.name == "suite-sweep-and-answer"
    ]
    recommendation = _record()["recommendation"]
    assert recommendation and recommendation in block.lines, (
        f"the screenshot and the README's transcript come from different runs: {REGENERATE}"
    )
