"""The CI page's commands work after ``pip install``: run from an empty directory
against an installed (non-editable) copy of the package and a real reference server.

The copy is built from this checkout and installed with pip into a directory of its
own that comes first on ``PYTHONPATH``, so every ``pytest_ddtree`` import of the run
(the plugin, the bundled suite) is the installed one, never the checkout. The page's
first ``bash`` block runs as written; ``URL`` is a reference server started for the
test, and ``PYTEST_ADDOPTS`` keeps the runs to the timed sweep (the gate's subject)
so the test stays short.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CI_PAGE = ROOT / "docs" / "ci.md"


def _first_bash_block(page: Path) -> str:
    match = re.search(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    assert match, f"no bash block in {page}"
    return match.group(1)


def test_the_ci_commands_name_the_installed_suite() -> None:
    text = CI_PAGE.read_text(encoding="utf-8")
    assert "example_suite" not in text
    commands = [ln for ln in text.splitlines() if re.match(r"\s*(if )?pytest ", ln)]
    assert commands and all("--pyargs pytest_ddtree.suite" in ln for ln in commands)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("build")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-compile",
            "--target",
            str(target),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        cwd=build,
        timeout=600,
    )
    if proc.returncode != 0:
        pytest.fail(f"pip install of the checkout failed:\n{proc.stderr[-3000:]}")
    assert (target / "pytest_ddtree" / "suite" / "test_sweep.py").is_file()
    return target


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_ddtree.reference", "--port", "0", "--stop-on-stdin-eof"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+/v1)", line)
        assert match, line
        yield match.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# the page saves and compares pytest-benchmark timings, which an xdist worker never records
@pytest.mark.serial
@pytest.mark.slow  # pip installs the package, then runs the page's commands
def test_the_ci_page_runs_from_an_empty_directory(
    installed: Path, server_url: str, tmp_path: Path
) -> None:
    work = tmp_path / "empty"
    work.mkdir()
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(installed),
        URL=server_url,
        PYTEST_ADDOPTS="-k test_sweep -p no:randomly",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    env.pop("DDTREE_ENDPOINT", None)
    where = subprocess.run(
        [sys.executable, "-c", "import pytest_ddtree; print(pytest_ddtree.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(installed), where
    script = "set -x\n" + _first_bash_block(CI_PAGE)
    proc = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env=env, cwd=work, timeout=900
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "file or directory not found" not in out and "ERROR: " not in out, out[-4000:]
    assert "pytest-ddtree budget sweep" in out
    # the first command saved the baseline; the gate compared with it
    saved = sorted(work.glob(".benchmarks/*/*.json"))
    assert saved, out[-4000:]
    assert "Comparing against benchmarks from" in out, out[-4000:]
    gated = "REGRESSION" in out or len(saved) == 2
    assert gated, out[-4000:]
