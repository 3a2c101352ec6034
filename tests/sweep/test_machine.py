"""Machine state: --ddtree-probe before and after the session, and the server's /version."""

from __future__ import annotations

import json
import shlex
import socket
import sys
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from pytest_ddtree.measure.machine import run_probe, scrub, server_info
from pytest_ddtree.reference import tokenizer_path
from pytest_ddtree.report import read_sweep_json

PY = shlex.quote(sys.executable)


def _py(code: str) -> str:
    return f"{PY} -c {shlex.quote(code)}"


def test_probe_output_is_kept() -> None:
    r = run_probe(_py("print('clocks.sm [MHz], temperature.gpu'); print('1410 MHz, 41')"), "before")
    assert r.problem is None and r.warning() is None and r.exit_code == 0
    assert r.output == "clocks.sm [MHz], temperature.gpu\n1410 MHz, 41\n"
    assert r.to_json()["when"] == "before"


def test_a_probe_that_is_not_found_is_a_warning() -> None:
    r = run_probe("no-such-probe-command-xyz --query", "after")
    assert r.exit_code is None and r.output == ""
    warning = r.warning()
    assert warning is not None and "\n" not in warning
    assert "cannot run 'no-such-probe-command-xyz'" in warning and "after the session" in warning


def test_a_failing_probe_keeps_its_output_and_says_why() -> None:
    r = run_probe(_py("import sys; print('NVIDIA-SMI has failed'); sys.exit(9)"), "before")
    assert r.exit_code == 9 and "NVIDIA-SMI has failed" in r.output
    assert r.problem == "exited with status 9: NVIDIA-SMI has failed"


def test_a_probe_printing_megabytes_is_cut() -> None:
    r = run_probe(
        _py("import sys\nwhile True: sys.stdout.write('x' * 65536)"), "before", max_bytes=4096
    )
    assert r.truncated and r.output.startswith("x" * 4096)
    assert r.output.endswith("[output cut at 4,096 bytes]") and len(r.output) < 4200
    assert r.problem is not None and "more than 4,096 bytes" in r.problem


def test_a_hanging_probe_is_stopped_with_what_it_printed() -> None:
    # a child of the probe holds the pipe too: the whole process group is stopped
    code = "import subprocess, sys, time; print('partial', flush=True); " + (
        f"subprocess.Popen([{sys.executable!r}, '-c', 'import time; time.sleep(60)']); "
        "time.sleep(60)"
    )
    r = run_probe(_py(code), "after", timeout=1.0)
    assert r.exit_code is None and r.output == "partial\n"
    assert r.problem is not None and r.problem.startswith("stopped after 1 s")


def test_a_bad_quote_is_a_warning_not_a_crash() -> None:
    r = run_probe("nvidia-smi 'unclosed", "before")
    assert r.problem is not None and "cannot split" in r.problem


def test_the_api_key_never_appears() -> None:
    r = run_probe(_py("print('key=sk-topsecret')"), "before", secrets=["sk-topsecret"])
    assert "sk-topsecret" not in json.dumps(r.to_json()) and "key=***" in r.output
    doc = {"server_args": {"api_key": "abc", "admin_api_key": "x", "max_total_tokens": 5}}
    assert scrub(doc) == {
        "server_args": {"api_key": "***", "admin_api_key": "***", "max_total_tokens": 5}
    }
    assert scrub({"note": "uses sk-topsecret"}, ["sk-topsecret"]) == {"note": "uses ***"}


def test_server_info_reads_the_reference_version(healthy_server: Any) -> None:
    with httpx.Client() as http:
        info = server_info(http, healthy_server.root_url)
    assert info.found == {"/version": {"version": "ddtree-reference/0.1"}}
    assert info.problems == ()  # no /get_server_info there: simply absent
    with httpx.Client() as http:
        big = server_info(http, healthy_server.root_url, max_bytes=8)
    assert big.found == {} and "larger than 8 bytes; not recorded" in big.problems[0]


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        t.join(2)
        for c in held:
            c.close()
        sock.close()


def test_a_silent_server_is_a_problem_line(silent_server: str) -> None:
    with httpx.Client(timeout=30) as http:
        info = server_info(http, silent_server, timeout=0.3)
    assert info.found == {}
    assert [p.split(": ", 1)[1].split(" (")[0] for p in info.problems] == [
        "no answer within 0.3 s"
    ] * 2
    assert info.problems[0].startswith(f"{silent_server}/version: ")


# ---------------------------------------------------------------- real pytest runs

_TEST = textwrap.dedent(
    """
    import pytest

    @pytest.mark.parametrize("p", ["rivers"])
    def test_gen(ddtree_benchmark, tree_budget, p):
        ddtree_benchmark("Write a long essay about rivers.", max_tokens=16, rounds=1)
    """
)


def _run(pytester: pytest.Pytester, server: Any, probe: str) -> tuple[Any, Any, Any]:
    pytester.makepyfile(test_bench=_TEST)
    report = pytester.path / "report"
    bench = pytester.path / "bench.json"
    result = pytester.runpytest(
        f"--ddtree-endpoint={server.base_url}",
        f"--ddtree-tokenizer={tokenizer_path()}",
        "--ddtree-budgets=16",
        "--ddtree-api-key=sk-topsecret",
        f"--ddtree-probe={probe}",
        f"--ddtree-report={report}",
        f"--benchmark-json={bench}",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1)
    return result, read_sweep_json(report / "sweep.json"), json.loads(bench.read_text())


def test_probe_and_version_reach_every_report(
    pytester: pytest.Pytester, healthy_server: Any
) -> None:
    probe = _py("print('clocks.sm [MHz]'); print('1410 MHz'); print('sk-topsecret')")
    result, run, bench = _run(pytester, healthy_server, probe)
    probes = run.metadata.probes
    assert [p["when"] for p in probes] == ["before", "after"]
    assert all(p["output"] == "clocks.sm [MHz]\n1410 MHz\n***\n" for p in probes)
    assert run.metadata.server_info == {"/version": {"version": "ddtree-reference/0.1"}}
    state = bench["machine_info"]["ddtree"]
    assert [p["when"] for p in state["probe"]] == ["before", "after"]
    assert state["server_info"] == {"/version": {"version": "ddtree-reference/0.1"}}
    html = (pytester.path / "report" / "sweep.html").read_text()
    assert "<h2>Machine state</h2>" in html and "1410 MHz" in html
    for text in (
        result.stdout.str(),
        html,
        (pytester.path / "report" / "sweep.json").read_text(),
        (pytester.path / "bench.json").read_text(),
    ):
        assert "sk-topsecret" not in text
    assert "--ddtree-probe" not in result.stdout.str()  # no warning when it went well


def test_a_broken_probe_is_one_warning_per_run(
    pytester: pytest.Pytester, healthy_server: Any
) -> None:
    result, run, _ = _run(pytester, healthy_server, "no-such-probe-command-xyz")
    result.stdout.fnmatch_lines(
        [
            "ddtree: WARNING: --ddtree-probe (before the session): cannot run "
            "'no-such-probe-command-xyz': *",
            "ddtree: WARNING: --ddtree-probe (after the session): cannot run *",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    assert [p["problem"] is not None for p in run.metadata.probes] == [True, True]


def test_a_bad_probe_option_is_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(): pass")
    result = pytester.runpytest("--ddtree-probe=nvidia-smi 'unclosed", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*invalid probe * (from option --ddtree-probe): cannot split it into words*"]
    )
