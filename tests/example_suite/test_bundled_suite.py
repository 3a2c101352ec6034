"""The suite ships in the package: one command runs it from anywhere, another copies it.

``pytest --pyargs pytest_ddtree.suite`` from an empty directory must run the whole suite
with the suite's own settings (its ``pytest.ini``), a user's ini file must still win over
them, and ``ddtree-suite init`` must write a suite that runs where it was written. Each case
runs pytest in a subprocess as a user would, against the embedded server without simulated
latency.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ddtree.pytest_plugin import bundle

ROOT = Path(__file__).resolve().parents[2]
FAST = ("--ddtree-reference-latency", "off", "-p", "no:xdist")


def _env() -> dict[str, str]:
    # the run must use the embedded server whatever the developer's shell has configured
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DDTREE_", "OPENAI_", "PYTEST_ADDOPTS", "PYTEST_XDIST"))
    }


def _run(
    cwd: Path, *args: str, timeout: float = 180, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={**_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _run(cwd, "-m", "pytest", *args)


def test_the_example_suite_is_the_bundled_suite() -> None:
    # one source: the directory a clone runs as `pytest example_suite` is the package's
    assert (ROOT / "example_suite").resolve() == bundle.SUITE_DIR
    assert {p.name for p in bundle.suite_files()} >= {
        "__init__.py",
        "conftest.py",
        "prompts.json",
        "pytest.ini",
        "test_smoke.py",
        "test_load.py",
    }


# the whole suite against the healthy embedded server: every test passes (the faults each
# fail the test that catches them: test_example_suite.py)
@pytest.mark.slow
def test_pyargs_runs_the_whole_suite_from_an_empty_directory(tmp_path: Path) -> None:
    # the README's first command as a user runs it (simulated latency on), with a report
    result = _pytest(
        tmp_path,
        "--pyargs",
        "pytest_ddtree.suite",
        "-q",
        "--ddtree-report",
        "report",
        "-p",
        "no:xdist",
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert " passed" in output and "failed" not in output
    for name in ("sweep.json", "sweep.html"):
        assert (tmp_path / "report" / name).stat().st_size > 0, name
    # every kind of test ran: the sweep's recommendation and the load schedule are printed
    # decided or not depends on this machine's noise; the verdict line is there
    assert re.search(r"^(Recommended |Undecided: |Either )tree_budget=", output, re.MULTILINE)
    assert "schedule:" in output
    # the run ends with its answer: after pytest-benchmark's tables, before pytest's own line
    tail = result.stdout.rstrip().splitlines()
    start = max(i for i, line in enumerate(tail) if "pytest-ddtree: the answer" in line)
    answer = tail[start + 1 :]
    assert re.match(r"(Recommended |Undecided: |Either )tree_budget=", answer[0]), answer
    assert answer[1].startswith("under load (test_load.py::test_load): "), answer
    assert " passed" in answer[-1] and len(answer) <= 5, answer
    assert "benchmark 'tree_budget=" not in "\n".join(answer)
    # the suite's addopts apply: its benchmark columns, and no cache written into the cwd
    assert "Median" in output and "StdDev" not in output
    assert not (tmp_path / ".pytest_cache").exists()


def _smoke_tokens(cwd: Path, *extra: str) -> str:
    result = _pytest(
        cwd,
        "--pyargs",
        "pytest_ddtree.suite.test_smoke",
        "-q",
        "-rP",
        "-k",
        "essay",
        *FAST,
        *extra,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    line = next(x for x in output.splitlines() if x.startswith("essay-rivers @ budget"))
    return line.split(": ", 1)[1].split(",", 1)[0]


def test_the_suite_settings_apply_under_pyargs_below_the_users_ini(tmp_path: Path) -> None:
    # the suite's pytest.ini sets ddtree_max_tokens = 96: a long essay runs to it
    assert _smoke_tokens(tmp_path) == "96 tokens"
    # a user's own ini file wins over the suite's settings, as its own file would
    (tmp_path / "pytest.ini").write_text("[pytest]\nddtree_max_tokens = 40\n", encoding="utf-8")
    assert _smoke_tokens(tmp_path) == "40 tokens"
    # and the command line wins over both
    assert _smoke_tokens(tmp_path, "--ddtree-max-tokens=24") == "24 tokens"


@pytest.mark.parametrize("how", ["pyargs", "clone"])
def test_the_environment_wins_over_the_suites_own_settings(tmp_path: Path, how: str) -> None:
    """The suite's pytest.ini holds its defaults: a DDTREE_* variable set for a deployment
    (a longer timeout, other load points) applies over them, and a bad one is refused,
    whether the suite runs by --pyargs or as `pytest example_suite` in a clone."""
    where, target = (
        (tmp_path, ["--pyargs", "pytest_ddtree.suite"])
        if how == "pyargs"
        else (ROOT, ["example_suite"])
    )
    collect = [*target, "--collect-only", "-p", "no:randomly"]

    def run(**env: str) -> subprocess.CompletedProcess[str]:
        return _run(where, "-m", "pytest", *collect, env=env, timeout=120)

    assert "ddtree load: total concurrency 1,4,8 (one process)" in run().stdout
    given = run(DDTREE_LOAD_CONCURRENCY="2")
    assert "ddtree load: total concurrency 2 (one process)" in given.stdout, given.stdout[-2000:]
    bad = run(DDTREE_TIMEOUT="read=-1")
    assert bad.returncode == 4, bad.stdout[-2000:]
    assert (
        "ERROR: invalid timeout 'read=-1' (from environment variable DDTREE_TIMEOUT)" in bad.stderr
    ), bad.stderr[-2000:]


def test_targets_suite_only_for_the_suite() -> None:
    here = Path.cwd()
    assert bundle.targets_suite(["pytest_ddtree.suite"], True, here)
    assert bundle.targets_suite(["pytest_ddtree.suite.test_load::test_load"], True, here)
    assert bundle.targets_suite([str(bundle.SUITE_DIR / "test_smoke.py")], False, here)
    assert not bundle.targets_suite(["pytest_ddtree.suite"], False, here)  # a path, not there
    assert not bundle.targets_suite(["pytest_ddtree.suitex"], True, here)
    assert not bundle.targets_suite(["pytest_ddtree.suite", "tests"], True, ROOT)
    assert not bundle.targets_suite([], True, here)


def _init(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _run(cwd, "-m", "pytest_ddtree.pytest_plugin.bundle", "init", *args)


@pytest.mark.slow  # runs the whole written suite
def test_init_writes_a_suite_that_runs_where_it_was_written(tmp_path: Path) -> None:
    result = _init(tmp_path, "tests/ddtree")
    assert result.returncode == 0, result.stderr
    target = tmp_path / "tests" / "ddtree"
    written = sorted(p.relative_to(target) for p in target.rglob("*") if p.is_file())
    assert written == bundle.suite_files()
    assert "pytest tests/ddtree" in result.stdout
    # adapt it: the copy reads its own prompts.json
    prompts = target / "prompts.json"
    prompts.write_text(
        '{"prompts": [{"id": "mine", "prompt": "Write a long essay about the sea.", '
        '"expect": {"min_tokens": 32}, "sweep": true}]}',
        encoding="utf-8",
    )
    run = _pytest(tmp_path, "tests/ddtree", "-q", "--ddtree-budgets=16,64", *FAST)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    # decided or not depends on this machine's noise (latency off); the verdict line is there
    assert re.search(r"^(Recommended |Undecided: )tree_budget=", output, re.MULTILINE)
    collected = _pytest(tmp_path, "tests/ddtree", "--co", "-q", "--ddtree-budgets=16,64")
    assert "test_smoke[mine]" in collected.stdout
    assert "essay-rivers" not in collected.stdout


def test_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    assert _init(tmp_path, "suite").returncode == 0
    conftest = tmp_path / "suite" / "conftest.py"
    conftest.write_text("# mine\n", encoding="utf-8")
    again = _init(tmp_path, "suite")
    assert again.returncode == 1
    assert again.stdout == ""
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1, again.stderr
    assert lines[0].startswith("ddtree-suite: ") and "--force" in lines[0]
    assert "already exists" in lines[0] and "suite" in lines[0]
    assert conftest.read_text(encoding="utf-8") == "# mine\n"  # untouched
    forced = _init(tmp_path, "suite", "--force")
    assert forced.returncode == 0, forced.stderr
    assert conftest.read_text(encoding="utf-8") != "# mine\n"


# "below-a-file" fails in the copy itself (an OSError), as "unwritable" does, for root too
@pytest.mark.parametrize("setup", ["file", "below-a-file", "unwritable"])
def test_init_fails_in_one_line(tmp_path: Path, setup: str) -> None:
    if setup in ("file", "below-a-file"):
        (tmp_path / "dest").write_text("not a directory", encoding="utf-8")
        dest = "dest" if setup == "file" else "dest/ddtree"
        why = "exists and is not a directory" if setup == "file" else "cannot write "
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes anywhere")
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        dest = "locked/ddtree"
        why = "cannot write "
    result = _init(tmp_path, dest)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddtree-suite: "), result.stderr
    assert why in lines[0], lines


def test_init_needs_a_directory_argument(tmp_path: Path) -> None:
    result = _run(tmp_path, "-m", "pytest_ddtree.pytest_plugin.bundle")
    assert result.returncode == 2
    assert "init" in result.stderr and "Traceback" not in result.stderr


def test_the_suite_ini_layer_sits_under_the_users_ini_and_the_environment() -> None:
    from pytest_ddtree.core.options import resolve

    suite = bundle.suite_ini()
    assert suite["ddtree_max_tokens"] == "96"
    alone = resolve({}, {}, {}, suite)
    assert alone.max_tokens == 96 and alone.timeout.read == 15
    assert alone.source_of("max_tokens") == (
        "ini key ddtree_max_tokens of the bundled suite's pytest.ini"
    )
    # the environment wins over the suite's defaults (a deployment's longer timeout)
    env = {"DDTREE_TIMEOUT": "99"}
    given = resolve({}, {}, env, suite)
    assert given.timeout.total == 99 and given.max_tokens == 96
    assert given.source_of("timeout") == "environment variable DDTREE_TIMEOUT"
    mine = resolve({}, {"ddtree_max_tokens": "40"}, env, suite)
    assert mine.max_tokens == 40 and mine.source_of("max_tokens") == "ini key ddtree_max_tokens"
    cli = resolve({"ddtree_max_tokens": "24"}, {"ddtree_max_tokens": "40"}, env, suite)
    assert cli.max_tokens == 24


@pytest.mark.parametrize("raw", ["0", "fast", "11", "nan"])
def test_a_bad_slowdown_is_one_line(raw: str) -> None:
    from pytest_ddtree.core.options import resolve
    from pytest_ddtree.core.settings import SettingsError

    with pytest.raises(SettingsError) as info:
        resolve({}, {"ddtree_reference_slowdown": raw}, {})
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"invalid reference-slowdown {raw!r} (from ini key ")
    assert "between 0.1 and 10" in message
